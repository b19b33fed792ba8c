"""Exact, batched evaluation: Recall (= HR), NDCG and MRR at k over a full ranking of items 1..N.

Ties count against the target: its 0-based rank is the number of other candidates scoring >= it, so a
constant model ranks every target last. Non-finite scores can never rank a target well: a target whose
score is NaN or +-inf gets the worst rank (every other candidate ahead of it), and a NaN candidate ranks
below every finite score, so a diverged model scores 0, never 1. `filter_seen="history"` removes the
user's earlier items (the full history, not just the model's window) from the candidates, except the
target itself. Sampled evaluation ranks the target against `sampled_negatives` items drawn once with a fixed
seed (never from the user's history), so every pass and every model sees the same candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from modsar.config import Config, EvalConfig
from modsar.data.batches import eval_inputs, eval_times
from modsar.data.split import LeaveOneOut, history_index
from modsar.model.interface import Recommender, encode, trim_left_padding
from modsar.task import Task

SCORES_BUDGET = 1 << 24  # scores held at once (16M floats, 64 MiB): fewer users per batch on huge catalogues


def users_per_batch(batch_size: int, num_items: int) -> int:
    """Users ranked at once: data.eval_batch_size, fewer where their scores over the catalogue would pass
    SCORES_BUDGET (one answer for the evaluator and the cost estimate's timing of it)."""
    return max(1, min(batch_size, SCORES_BUDGET // max(num_items, 1)))


# (inputs (B, T), users (B,)) -> scores (B, N); an evaluation with `timed` also passes the times (B, T)
Scorer = Callable[..., torch.Tensor]


def ranks_from_scores(
    scores: torch.Tensor, targets: torch.Tensor, excluded: tuple[torch.Tensor, torch.Tensor] | None = None
) -> torch.Tensor:
    """0-based pessimistic rank of each target (1-based item id) among the columns of `scores` (items 1..N).

    `excluded` = (rows, columns): the (row, 0-based column) pairs that are not candidates (seen items under
    filter_seen=history), each pair once and never a row's target. They are subtracted from the count of
    candidates scoring >= the target, so no dense (B, N) mask is built. A non-finite target score gets the
    worst rank, the number of other candidates; NaN candidates never count against a finite target.
    """
    target_scores = scores.gather(1, (targets - 1)[:, None])
    # NaN compares False: a NaN candidate ranks below every finite score. int32 sums run 6x faster than bool
    ahead = (scores >= target_scores).sum(1, dtype=torch.int32).long()
    candidates = torch.full_like(targets, scores.size(1))
    if excluded is not None:
        rows, cols = excluded
        seen_ahead = (scores[rows, cols] >= target_scores[rows, 0]).long()
        ahead = ahead - torch.zeros_like(ahead).index_add_(0, rows, seen_ahead)
        candidates = candidates - torch.bincount(rows, minlength=len(targets))
    rank = ahead - 1  # the target itself is >= itself
    return torch.where(torch.isfinite(target_scores[:, 0]), rank, candidates - 1)


def seen_pairs(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, targets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(row, 0-based column) of each distinct history item of each user, the user's target left out."""
    rows, items = history_index(split, users, history_end)
    keys = np.unique(rows * (split.num_items + 1) + items)
    rows, items = keys // (split.num_items + 1), keys % (split.num_items + 1)
    keep = items != targets[rows]
    return rows[keep], items[keep] - 1


def metric_sums(ranks: torch.Tensor, ks: list[int]) -> dict[str, float]:
    """Sums (not means) of each metric over the batch, so batches can be accumulated exactly."""
    ranks = ranks.double()
    out = {}
    for k in ks:
        hit = ranks < k
        out[f"recall@{k}"] = hit.sum().item()
        out[f"ndcg@{k}"] = torch.where(hit, 1.0 / torch.log2(ranks + 2), 0.0).sum().item()
        out[f"mrr@{k}"] = torch.where(hit, 1.0 / (ranks + 1), 0.0).sum().item()
    return out


def forbidden_keys(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, targets: np.ndarray
) -> np.ndarray:
    """Sorted distinct keys row * (N + 1) + item of the items `fixed_negatives` never draws for a row: those
    of the user's history before the target (items[starts[u]:history_end]) and the target itself."""
    n = split.num_items
    rows, items = history_index(split, users, history_end)
    return np.unique(np.concatenate([rows * (n + 1) + items, np.arange(len(users)) * (n + 1) + targets]))


def negative_room(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, targets: np.ndarray
) -> np.ndarray:
    """(len(users),) the items each row's negatives may be drawn from. Negatives are drawn with replacement,
    so any count can be drawn where this is >= 1; at 0 (the history and target hold the whole catalogue)
    none can (feasible.validate_for_dataset refuses that before training)."""
    keys = forbidden_keys(split, users, history_end, targets)
    return split.num_items - np.bincount(keys // (split.num_items + 1), minlength=len(users))


def fixed_negatives(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, targets: np.ndarray, count: int, seed: int
) -> np.ndarray:
    """`count` uniform items per user, none in the user's history or equal to the target (seeded, redrawn
    until clean). A draw still unclean after 1,000 rounds (a user who has seen all but a few of many items)
    is drawn from its row's allowed items directly, so every row with one (`negative_room` >= 1) gets its
    negatives; the rounds keep the draws every earlier version made."""
    n = split.num_items
    rng = np.random.default_rng(seed)
    forbidden = forbidden_keys(split, users, history_end, targets)
    negatives = rng.integers(1, n + 1, size=(len(users), count))
    for _ in range(1000):
        keys = np.arange(len(users))[:, None] * (n + 1) + negatives
        clash = np.isin(keys, forbidden)
        if not clash.any():
            return negatives
        negatives[clash] = rng.integers(1, n + 1, size=int(clash.sum()))
    keys = np.arange(len(users))[:, None] * (n + 1) + negatives
    clash = np.isin(keys, forbidden)
    rows = np.nonzero(clash)[0]
    room = negative_room(split, users, history_end, targets)
    if (room[rows] == 0).any():
        # refused before training
        raise RuntimeError("could not draw clean negatives: a user has seen every item")
    # the j-th allowed item (1-based) of a row is j plus the number of its forbidden items f_i (i-th, 1-based)
    # with f_i - i < j: below f_i lie f_i - i allowed items. f_i - i is non-decreasing within a row
    owner = forbidden // (n + 1)
    rank = np.arange(len(forbidden)) - np.searchsorted(owner, owner)  # i - 1
    below = owner * (n + 1) + forbidden % (n + 1) - rank - 1
    wanted = (rng.random(len(rows)) * room[rows]).astype(np.int64) + 1  # j, uniform in 1..room
    first = np.searchsorted(owner, rows)
    negatives[clash] = wanted + np.searchsorted(below, rows * (n + 1) + wanted) - first
    return negatives


@torch.no_grad()
def target_ranks(
    scorer: Scorer,
    split: LeaveOneOut,
    which: str,
    cfg: EvalConfig,
    task: Task,
    max_len: int,
    batch_size: int,
    device: torch.device,
    in_order: bool = False,
    timed: bool = False,
) -> torch.Tensor:
    """0-based pessimistic rank of every evaluable user's `valid` or `test` target, in user order.

    The scorer sees the users in order of history length (`in_order`: in user order, as a scorer that
    pairs each call with its own rows needs); `timed` also passes the windows' times (time_bias models)."""
    users, history_end, targets = split.targets(which)
    negatives = (
        fixed_negatives(
            split, users, history_end, targets, cfg.sampled_negatives, cfg.sample_seed + (which == "test")
        )
        if cfg.sampled_negatives
        else None
    )
    # users in order of history length, so a batch's rows are about as long as each other and trimming the
    # left padding leaves little to compute on; the ranks go back to user order at the end
    order = (
        np.arange(len(users))
        if in_order
        else np.argsort(np.minimum(history_end - split.starts[users], max_len), kind="stable")
    )
    ranks = torch.zeros(len(users), dtype=torch.long)
    batch_size = users_per_batch(batch_size, split.num_items)  # bounded on any catalogue
    for lo in range(0, len(users), batch_size):
        sl = order[lo : lo + batch_size]
        inputs = trim_left_padding(eval_inputs(split, users[sl], history_end[sl], task, max_len)).to(device)
        user_ids = torch.from_numpy(users[sl] + 1).to(device)
        target = torch.from_numpy(targets[sl]).to(device)
        if timed:
            times = eval_times(split, users[sl], history_end[sl], task, max_len)[:, -inputs.size(1) :].to(
                device
            )
            scores = scorer(inputs, user_ids, times).float()
        else:
            scores = scorer(inputs, user_ids).float()
        if negatives is not None:  # column 0 is the target, then its negatives
            candidates = torch.cat([target[:, None], torch.from_numpy(negatives[sl]).to(device)], dim=1)
            ranks[sl] = ranks_from_scores(scores.gather(1, candidates - 1), torch.ones_like(target)).cpu()
            continue
        excluded = None
        if cfg.filter_seen == "history":
            rows, cols = seen_pairs(split, users[sl], history_end[sl], targets[sl])
            excluded = torch.from_numpy(rows).to(device), torch.from_numpy(cols).to(device)
        ranks[sl] = ranks_from_scores(scores, target, excluded).cpu()
    return ranks


def evaluate(
    scorer: Scorer,
    split: LeaveOneOut,
    which: str,
    cfg: EvalConfig,
    task: Task,
    max_len: int,
    batch_size: int,
    device: torch.device,
    in_order: bool = False,
    timed: bool = False,
) -> dict[str, float]:
    """Mean metrics over all evaluable users of the `valid` or `test` split."""
    ranks = target_ranks(scorer, split, which, cfg, task, max_len, batch_size, device, in_order, timed)
    return {key: value / max(len(ranks), 1) for key, value in metric_sums(ranks, cfg.ks).items()}


@dataclass(frozen=True)
class Evaluator:
    """`evaluate` bound to one split, evaluation settings, task, window and device: callers name only the
    scorer and the split part (valid or test)."""

    split: LeaveOneOut
    cfg: EvalConfig
    task: Task
    max_len: int
    batch_size: int
    device: torch.device
    in_order: bool = False  # users in stored order instead of by history length (see target_ranks)
    timed: bool = False  # scorers also take the windows' times (model.time_bias)

    @classmethod
    def of(
        cls,
        split: LeaveOneOut,
        cfg: Config,
        max_len: int,
        device: torch.device,
        batch_size: int | None = None,
        in_order: bool = False,
    ) -> Evaluator:
        return cls(
            split,
            cfg.eval,
            cfg.task,
            max_len,
            batch_size or cfg.data.eval_batch_size,
            device,
            in_order,
            cfg.model.timed,
        )

    def __call__(self, scorer: Scorer, which: str) -> dict[str, float]:
        return evaluate(
            scorer,
            self.split,
            which,
            self.cfg,
            self.task,
            self.max_len,
            self.batch_size,
            self.device,
            self.in_order,
            self.timed,
        )


def model_scorer(model: Recommender, offset: int = 0) -> Scorer:
    """Scores from the hidden state at the final position, or `offset` positions before it."""

    def score(inputs: torch.Tensor, users: torch.Tensor, times: torch.Tensor | None = None) -> torch.Tensor:
        if offset >= inputs.size(
            1
        ):  # a batch of short histories (trimmed to its longest): no row has a state
            pad = offset + 1 - inputs.size(1)  # `offset` back, and callers count such rows as misses
            inputs = F.pad(inputs, (pad, 0))
            times = None if times is None else F.pad(times, (pad, 0))
        hidden = encode(model, inputs, users, times)[:, -1 - offset]
        return model.score(hidden, users)

    return score


def popularity_scorer(split: LeaveOneOut, device: torch.device) -> Scorer:
    """Most-popular baseline: every user gets the items ranked by training-interaction count."""
    train = split.items[split.in_training]
    counts = torch.from_numpy(np.bincount(train, minlength=split.num_items + 1)[1:].astype(np.float32)).to(
        device
    )
    return lambda inputs, users, times=None: counts.expand(len(users), -1).clone()
