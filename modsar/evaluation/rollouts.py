"""`modsar generate`: H-step rollouts from each test user's history, measured against the held-out future
(the data-first paper §5).

A rollout feeds the model its own picks: AR reads the window and scores the next item at the last position;
AE appends a mask token and scores it, then writes its pick in the mask's place. The true future of a user
is the log from the test target on (its next H items): one item under leave-one-out, every later event under
`data.split=temporal`, where the future is real. Each distinct (user, history) is rolled out once: under
`data.split_targets=every`, events sharing a timestamp are targets with one history (the events before that
time), and its future starts at the first of them in stored order, the order the split keeps for ties.
Where the history is excluded from the picks, the future keeps only items not in the history (its next H
such items): the rest could never be generated.
Metrics (per rollout, then the mean over rollouts with a future, unless said otherwise):
- alignment: `alignment_hits` = |set(G) & set(F)| (distinct generated items found among the future's),
  `alignment_recall` = that / |set(F)|, `alignment_ndcg` = sum over steps s of [g_s in F, first time] /
  log2(s + 2) over the ideal min(|set(F)|, H) hits; `alignment_exact` = share of steps s < |F| with g_s = f_s.
- diversity: `distinct_ratio` = distinct items / H, `immediate_repeat_rate` = share of steps repeating the
  previous pick, `distinct_2` = distinct consecutive pairs / (H - 1).
- `entropy_generated` / `entropy_future` (bits): of the item distribution over all users' generated / true
  future items; `entropy_generated_matched` reads only the first |F| steps of each rollout, so it counts as
  many items as the future does (entropy grows with the sample).
- `coverage` / `coverage_future`: share of the catalogue generated / in the future at least once.
- mode collapse: `top1pct_share_generated` / `top1pct_share_future` = share of items that are in the top 1%
  by training popularity (the ceil(N / 100) most frequent training items), pooled over all picks / all future
  items; `top1pct_share_generated_matched` pools only the first |F| picks of each rollout, as the future does.
- oscillation: `unseen_transition_rate` (and `_future`) = share of consecutive pairs, from the last history
  item on, that are two different items never adjacent (either order) in any training sequence (stricter than
  "never in one sequence": compare the two rates, not either with zero).
Rollouts run in batches of users of similar history length, as evaluation does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from modsar import memory
from modsar.config import Config
from modsar.data.batches import TaskRows, history_times, history_windows, task_rows
from modsar.data.split import LeaveOneOut, history_index, rollout_targets
from modsar.errors import ModsarError
from modsar.model.interface import Recommender, encode
from modsar.task import Task

STRATEGIES = ("greedy", "topk", "nucleus")
EXCLUDE = (
    "auto",
    "none",
    "history",
    "rollout",
    "all",
)  # items a pick may not be: the history, earlier picks,
#   both; auto = as the checkpoint's evaluation ranks: eval.filter_seen=history -> history (earlier picks stay
#   allowed, so repetition and collapse remain measurable)


def resolve_exclude(exclude: str, filter_seen: str) -> str:
    if exclude not in EXCLUDE:
        raise ModsarError(f"--exclude must be one of {', '.join(EXCLUDE)}; got {exclude!r}")
    return ("history" if filter_seen == "history" else "none") if exclude == "auto" else exclude


@dataclass
class Sampler:
    """How the next item is picked from a row of scores."""

    strategy: str = "greedy"
    top_k: int = 10
    top_p: float = 0.9
    temperature: float = 1.0

    def check(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ModsarError(f"--strategy must be one of {', '.join(STRATEGIES)}; got {self.strategy!r}")
        # each setting is checked only for the strategies that read it: greedy reads none of them
        if self.strategy == "topk" and self.top_k < 1:
            raise ModsarError(f"--top-k must be >= 1; got {self.top_k}")
        if self.strategy == "nucleus" and not 0.0 < self.top_p <= 1.0:
            raise ModsarError(f"--top-p must be in (0, 1]; got {self.top_p}")
        if self.strategy != "greedy" and not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ModsarError(f"--temperature must be a positive number; got {self.temperature}")

    def logits(self, scores: torch.Tensor) -> torch.Tensor:
        """(scores - row max) / temperature in float32: the best item gets 0 and the others <= 0, so a tiny
        temperature tends to greedy (the others go to -inf) instead of overflowing to inf and NaN. Where the
        temperature itself rounds to 0 in float32 (below about 1e-45), 0 / 0 is read as 0: still the best."""
        scores = scores.float()
        top = scores.amax(1, keepdim=True)
        shifted = scores - torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        return torch.where(shifted == 0, torch.zeros_like(shifted), shifted / self.temperature)

    def pick(self, scores: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """0-based columns (B,) from scores (B, N), -inf marking excluded items."""
        if self.strategy == "greedy":
            return scores.argmax(1)
        logits = self.logits(scores)
        if self.strategy == "topk":
            values, columns = logits.topk(min(self.top_k, logits.size(1)), dim=1)
            chosen = torch.multinomial(values.softmax(1), 1, generator=generator)
            return columns.gather(1, chosen)[:, 0]
        values, columns = logits.sort(1, descending=True)
        probs = values.softmax(1)
        before = probs.cumsum(1) - probs  # mass ahead of each item: keep the smallest prefix reaching top_p
        # the best item always stays: a top_p that rounds to 0 in float32 (1e-300) would mask every item
        drop = before >= self.top_p
        drop[:, 0] = False
        probs = probs.masked_fill(drop, 0.0)
        chosen = torch.multinomial(probs, 1, generator=generator)
        return columns.gather(1, chosen)[:, 0]


@torch.no_grad()
def rollout(
    model: Recommender,
    task: Task,
    windows: torch.Tensor,
    users: torch.Tensor,
    steps: int,
    sampler: Sampler,
    *,
    mask_id: int,
    seen: tuple[np.ndarray, np.ndarray] | None = None,
    exclude_rollout: bool = False,
    seed: int = 0,
    batch_size: int = 512,
    device: torch.device | None = None,
    progress: bool = False,
    times: torch.Tensor | None = None,
) -> np.ndarray:
    """(n, steps) generated item ids for left-padded history windows (n, max_len) and 1-based users (n,).

    `times` (n, max_len), the windows' relative times, for a time_bias model: a generated item takes the time
    of the last history item (the rollout asks what comes right after; no future time is known).

    `seen` = (row, 0-based column) pairs, sorted by row, never to be picked (the history); `exclude_rollout`
    bans each pick for the rest of its rollout. Greedy picks depend on nothing else; sampled picks also on
    the seed and on how rows fall into batches (one generator draws for the whole run, batch after batch).
    """
    device = device or torch.device("cpu")
    generator = torch.Generator(device=device).manual_seed(seed) if sampler.strategy != "greedy" else None
    lengths = (windows > 0).sum(1).numpy()
    out = np.zeros((len(windows), steps), dtype=np.int64)
    bar = tqdm(
        total=len(windows) * steps, desc="generate", unit="item", disable=not progress, dynamic_ncols=True
    )
    rollouts = BatchRollout(
        model, task_rows(task), sampler, generator, mask_id, exclude_rollout, seen is not None, device, bar
    )
    for lo in range(0, len(windows), batch_size):
        hi = min(lo + batch_size, len(windows))
        banned = torch.zeros(hi - lo, model.num_items, dtype=torch.bool, device=device)
        if seen is not None:
            a, b = np.searchsorted(seen[0], [lo, hi])
            banned[
                torch.from_numpy(seen[0][a:b] - lo).to(device), torch.from_numpy(seen[1][a:b]).to(device)
            ] = True
        clock = times[lo:hi].to(device) if times is not None else None
        picks = rollouts(
            windows[lo:hi].to(device),
            users[lo:hi].to(device),
            clock,
            banned,
            int(lengths[lo:hi].max()),
            steps,
        )
        out[lo:hi] = picks.cpu().numpy()
    bar.close()
    return out


@dataclass
class BatchRollout:
    """`rollout`'s steps for one batch of rows: the model, how the task reads a history, the sampler and its
    generator (shared by every batch of a run), and what a pick may not be."""

    model: Recommender
    layout: TaskRows
    sampler: Sampler
    generator: torch.Generator | None
    mask_id: int
    exclude_rollout: bool
    exclude_history: bool
    device: torch.device
    bar: tqdm

    def __call__(
        self,
        window: torch.Tensor,
        user: torch.Tensor,
        clock: torch.Tensor | None,
        banned: torch.Tensor,
        longest: int,
        steps: int,
    ) -> torch.Tensor:
        """(B, steps) 1-based picks; `banned` (B, N) gains each pick under exclude_rollout, and the longest
        history (`longest` items) bounds the columns read at each step."""
        picks = torch.zeros(len(window), steps, dtype=torch.long, device=self.device)
        for step in range(steps):
            keep = -min(window.size(1), longest + step)  # no column that is padding in every row
            inputs = self.layout.with_inference_slot(window[:, keep:], self.mask_id)
            when = None if clock is None else self.layout.with_inference_time(clock[:, keep:])
            scores = self.model.score(encode(self.model, inputs, user, when)[:, -1], user).float()
            scores = scores.nan_to_num(nan=float("-inf")).masked_fill(banned, float("-inf"))
            if (self.exclude_history or self.exclude_rollout) and bool(torch.isinf(scores).all(1).any()):
                raise ModsarError(
                    f"a user has no item left to pick at step {step + 1}: the excluded items cover the "
                    "catalogue; use fewer --steps or --exclude history (or none)"
                )
            picked = self.sampler.pick(scores, self.generator)
            if self.exclude_rollout:
                banned[torch.arange(len(picked), device=self.device), picked] = True
            picks[:, step] = picked + 1
            window = torch.cat([window[:, 1:], (picked + 1)[:, None]], dim=1)  # the pick joins the history
            clock = torch.cat([clock[:, 1:], clock[:, -1:]], dim=1) if clock is not None else None
            self.bar.update(len(window))
        return picks


def step_limit(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, exclude: str
) -> tuple[float, int, int]:
    """The most steps every rollout can take under `exclude` (inf: any number), with the 1-based user whose
    history leaves the least room and how many distinct items that history holds (0, 0 where no history is
    excluded). A step needs one allowed item: `history` bans the history's distinct items at every step,
    `rollout` each earlier pick, so `all` allows N - |set(history)| steps and `rollout` N."""
    n = split.num_items
    who, held = 0, 0
    if exclude in ("history", "all") and len(users):
        rows, items = history_index(split, users, history_end)
        distinct = np.bincount(np.unique(rows * (n + 1) + items) // (n + 1), minlength=len(users))
        row = int(np.argmax(distinct))
        who, held = int(users[row]) + 1, int(distinct[row])
    room = n - held  # items a rollout may pick at its first step
    if exclude in ("rollout", "all"):
        return float(room), who, held
    return (math.inf if room > 0 else 0.0), who, held


def check_steps(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, steps: int, exclude: str
) -> None:
    """Refuses `modsar generate --steps` that some rollout cannot take under `--exclude` (before any step)."""
    limit, who, held = step_limit(split, users, history_end, exclude)
    n = split.num_items
    if steps <= limit:
        return
    if limit == 0:
        raise ModsarError(
            f"--exclude {exclude} leaves user {who} nothing to pick: the history before its "
            f"test target holds all {n} items of the catalogue; use --exclude none"
            + (" or rollout" if exclude == "all" and steps <= n else "")
        )
    if exclude == "rollout":  # --exclude history is suggested only where no history holds the whole catalogue
        history_too = step_limit(split, users, history_end, "history")[0] > 0
        raise ModsarError(
            f"--steps {steps} is more than a rollout can take with --exclude rollout: it never "
            f"picks an item twice, and the catalogue has {n} item{'' if n == 1 else 's'}; use "
            f"--steps {n} or fewer, or --exclude none" + (" or history" if history_too else "")
        )
    raise ModsarError(
        f"--steps {steps} is more than user {who}'s rollout can take with --exclude all: it "
        f"never picks an item twice or one of the {held} distinct items of its history, "
        f"which leaves {int(limit)} of the {n} items; use --steps {int(limit)} or fewer, or "
        "--exclude history"
    )


def true_future(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, steps: int, novel: bool = False
) -> np.ndarray:
    """(n, steps) each user's items from the test target on, 0 where the log ends first; `novel` keeps only
    items not in the user's history (all a rollout that never repeats the history can produce)."""
    counts = split.offsets[users + 1] - history_end
    rows = np.repeat(np.arange(len(users)), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    items = split.items[np.arange(counts.sum()) - first + np.repeat(history_end, counts)]
    if novel:
        seen_rows, seen_items = history_index(split, users, history_end)
        n = split.num_items + 1
        keep = ~np.isin(rows * n + items, seen_rows * n + seen_items)
        rows, items = rows[keep], items[keep]
    rank = np.arange(len(rows)) - np.searchsorted(rows, rows)  # place within the row (rows are sorted)
    out = np.zeros((len(users), steps), dtype=np.int64)
    out[rows[rank < steps], rank[rank < steps]] = items[rank < steps]
    return out


def training_facts(split: LeaveOneOut) -> tuple[np.ndarray, np.ndarray]:
    """Training popularity per item id (N + 1,) and the sorted keys a * (N + 1) + b of every pair of items
    adjacent in a training sequence (both orders)."""
    n = split.num_items + 1
    train = split.in_training
    counts = np.bincount(split.items[train], minlength=n)
    adjacent = train[1:] & train[:-1] & (split.owner[1:] == split.owner[:-1])
    a, b = split.items[:-1][adjacent], split.items[1:][adjacent]
    return counts, np.unique(np.concatenate([a * n + b, b * n + a]))


def top_popular(popularity: np.ndarray, num_items: int) -> np.ndarray:
    """(N + 1,) True for the ceil(N / 100) most frequent training items (ties: the lower id)."""
    popular = np.zeros(num_items + 1, dtype=bool)
    popular[1:][np.argsort(-popularity[1:], kind="stable")[: max(1, math.ceil(num_items / 100))]] = True
    return popular


def entropy_bits(items: np.ndarray, num_items: int) -> float:
    counts = np.bincount(items[items > 0], minlength=num_items + 1)
    p = counts[counts > 0] / counts.sum() if counts.sum() else np.zeros(0)
    return float(-(p * np.log2(p)).sum())


def unseen_transitions(chains: np.ndarray, pairs: np.ndarray, num_items: int) -> float:
    """Share of consecutive pairs (two real, different items) in the rows of `chains` never adjacent in
    training."""
    a, b = chains[:, :-1].ravel(), chains[:, 1:].ravel()
    real = (a > 0) & (b > 0) & (a != b)
    if not real.any():
        return math.nan
    return float(1.0 - np.isin(a[real] * (num_items + 1) + b[real], pairs).mean())


def first_occurrences(generated: np.ndarray) -> np.ndarray:
    """(n, H) True where an item appears in its row for the first time (one vectorised pass per step)."""
    first = np.ones_like(generated, dtype=bool)
    for s in range(1, generated.shape[1]):
        first[:, s] = ~(generated[:, :s] == generated[:, s : s + 1]).any(1)
    return first


def rollout_metrics(
    generated: np.ndarray,
    future: np.ndarray,
    last_history: np.ndarray,
    popularity: np.ndarray,
    pairs: np.ndarray,
    num_items: int,
) -> dict[str, float]:
    """The module docstring's metrics for rollouts (n, H) against true futures (n, H; 0 = none)."""
    n, steps = generated.shape
    have = future > 0  # futures are packed to the left: step s has a true item iff s < |F|
    lengths = have.sum(1)
    first = first_occurrences(generated)
    in_future = (generated[:, :, None] == np.where(have, future, -1)[:, None, :]).any(2)
    hits = (in_future & first).sum(1)  # distinct generated items among the future's
    targets = (first_occurrences(future) & have).sum(1)  # distinct future items
    discount = 1.0 / np.log2(np.arange(steps) + 2.0)
    ideal = np.cumsum(discount)[np.maximum(np.minimum(targets, steps) - 1, 0)]
    evaluable = lengths > 0
    popular = top_popular(popularity, num_items)
    matched = generated[have]
    bigrams = generated[:, :-1] * (num_items + 1) + generated[:, 1:]
    distinct_2 = first_occurrences(bigrams).sum(1) / (steps - 1) if steps > 1 else np.full(n, math.nan)
    exact = ((generated == future) & have).sum(1)
    mean = lambda x: float(np.mean(x)) if len(x) else math.nan  # noqa: E731
    return {
        "users": int(n),
        "steps": int(steps),
        "users_with_future": int(evaluable.sum()),
        "future_items_per_user": mean(lengths),
        "alignment_hits": mean(hits[evaluable]),
        "alignment_recall": mean(hits[evaluable] / targets[evaluable]),
        "alignment_ndcg": mean(((in_future & first) * discount).sum(1)[evaluable] / ideal[evaluable]),
        "alignment_exact": mean(exact[evaluable] / lengths[evaluable]),
        "distinct_ratio": mean(first.sum(1) / steps),
        "immediate_repeat_rate": float((generated[:, 1:] == generated[:, :-1]).mean())
        if steps > 1
        else math.nan,
        "distinct_2": mean(distinct_2),
        "entropy_generated": entropy_bits(generated.ravel(), num_items),
        "entropy_generated_matched": entropy_bits(matched, num_items),
        "entropy_future": entropy_bits(future[have], num_items),
        "coverage": float(len(np.unique(generated)) / num_items),
        "coverage_future": float(len(np.unique(future[have])) / num_items),
        "top1pct_share_generated": float(popular[generated].mean()),
        "top1pct_share_generated_matched": float(popular[matched].mean()) if len(matched) else math.nan,
        "top1pct_share_future": float(popular[future[have]].mean()) if have.any() else math.nan,
        "unseen_transition_rate": unseen_transitions(
            np.concatenate([last_history[:, None], generated], 1), pairs, num_items
        ),
        "unseen_transition_rate_future": unseen_transitions(
            np.concatenate([last_history[:, None], future], 1), pairs, num_items
        ),
    }


def per_step(
    generated: np.ndarray, future: np.ndarray, popularity: np.ndarray, num_items: int
) -> pd.DataFrame:
    """Per step s: share of users whose pick is among their future items, whose pick equals f_s, whose pick
    is a top-1% item, and the distinct share of picks so far."""
    popular = top_popular(popularity, num_items)
    have = (future > 0).any(1)
    distinct = first_occurrences(generated).cumsum(1)
    rows = []
    for s in range(generated.shape[1]):
        g = generated[:, s]
        rows.append(
            {
                "step": s + 1,
                "hit_in_future": float((g[:, None] == future).any(1)[have].mean()),
                "exact": float((g == future[:, s])[future[:, s] > 0].mean())
                if (future[:, s] > 0).any()
                else math.nan,
                "top1pct_share": float(popular[g].mean()),
                "distinct_so_far": float(distinct[:, s].mean() / (s + 1)),
            }
        )
    return pd.DataFrame(rows)


@dataclass
class Generation:
    metrics: dict[str, float]
    rollouts: pd.DataFrame  # user, step, item, future_item
    steps: pd.DataFrame  # per_step

    def counted(self) -> str:
        """What the rollouts were made from, in words: "N test users" where every user has one history, else
        "N test histories of U users". `metrics["users"]` (a row's generate.users) counts rollouts, one per
        distinct history, and under data.split_targets=every a user has one for each test timestamp."""
        rollouts, users = int(self.metrics["users"]), int(self.rollouts["user"].nunique())
        if users == rollouts:
            return f"{rollouts} test user{'' if rollouts == 1 else 's'}"
        return f"{rollouts} test histories of {users} user{'' if users == 1 else 's'}"


def generate(
    model: Recommender,
    split: LeaveOneOut,
    task: Task,
    max_len: int,
    steps: int,
    sampler: Sampler,
    exclude: str = "none",
    seed: int = 0,
    max_users: int = 0,
    batch_size: int = 512,
    device: torch.device | None = None,
    progress: bool = False,
) -> Generation:
    """Rollouts from every distinct test history (`rollout_targets`; a seeded sample of `max_users` of them
    when > 0), with their metrics; rollouts in the order of `split.targets("test")`. Steps that some rollout
    cannot take under `exclude` are refused before the first."""
    if steps < 1:
        raise ModsarError(f"--steps must be >= 1; got {steps}")
    if exclude not in EXCLUDE[1:]:
        raise ModsarError(f"--exclude must be one of {', '.join(EXCLUDE[1:])}; got {exclude!r}")
    sampler.check()
    users, history_end, targets = split.targets("test")
    index = chosen_targets(history_end, max_users, seed)
    check_steps(split, users[index], history_end[index], steps, exclude)
    memory.refuse(memory.rollout_needs(steps, len(index), batch_size, split.num_items), str(device or "cpu"))
    by_length = np.argsort(history_end[index] - split.starts[users[index]], kind="stable")
    order = index[by_length]  # the targets, users of similar history length next to each other
    timed = getattr(model, "timed", False)
    history = exclude in ("history", "all")
    seen = history_index(split, users[order], history_end[order]) if history else None
    model.eval()
    generated = rollout(
        model,
        task,
        history_windows(split, users[order], history_end[order], max_len),
        torch.from_numpy(users[order] + 1),
        steps,
        sampler,
        mask_id=split.num_items + 1,
        seen=(seen[0], seen[1] - 1) if seen is not None else None,
        exclude_rollout=exclude in ("rollout", "all"),
        seed=seed,
        batch_size=batch_size,
        device=device,
        progress=progress,
        times=history_times(split, users[order], history_end[order], max_len) if timed else None,
    )
    generated = generated[np.argsort(by_length)]  # back to the targets' order
    users, history_end, targets = users[index], history_end[index], targets[index]
    future = true_future(split, users, history_end, steps, novel=history)
    popularity, pairs = training_facts(split)
    metrics = rollout_metrics(
        generated, future, split.items[history_end - 1], popularity, pairs, split.num_items
    )
    table = rollout_table(users, index, targets, generated, future)
    return Generation(metrics, table, per_step(generated, future, popularity, split.num_items))


def chosen_targets(history_end: np.ndarray, max_users: int, seed: int) -> np.ndarray:
    """The test targets to roll out from, as indices into `split.targets("test")`: each distinct history's
    (a user has several under `every`), or a seeded sample of `max_users` of them when > 0."""
    index = rollout_targets(history_end)
    if max_users and max_users < len(index):
        index = np.sort(np.random.default_rng(seed).choice(index, max_users, replace=False))
    if not len(index):
        raise ModsarError("there are no test users to generate for")
    return index


def rollout_table(
    users: np.ndarray, index: np.ndarray, targets: np.ndarray, generated: np.ndarray, future: np.ndarray
) -> pd.DataFrame:
    """One row per rollout step: the 1-based user, the test target it continues (its index among the split's
    test targets, and its item), the step, the pick and the true item at that step (0: none)."""
    steps = generated.shape[1]
    return pd.DataFrame(
        {
            "user": np.repeat(users + 1, steps),
            "target_index": np.repeat(index, steps),
            "target_item": np.repeat(targets, steps),
            "step": np.tile(np.arange(1, steps + 1), len(users)),
            "item": generated.ravel(),
            "future_item": future.ravel(),
        }
    )


def write(generation: Generation, out: str | Path, facts: dict) -> list[Path]:
    """rollouts.parquet, steps.parquet, metrics.json and generate.png under `out` (each written to a temporary
    name, then renamed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from modsar.outputs import save_figure, to_json, write_parquet, write_text

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, frame in (("rollouts.parquet", generation.rollouts), ("steps.parquet", generation.steps)):
        paths.append(write_parquet(frame, folder / name))
    paths.append(write_text(folder / "metrics.json", to_json({**facts, **generation.metrics}) + "\n"))
    m, s = generation.metrics, generation.steps
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(s["step"], s["hit_in_future"], marker="o", label="pick among the true future")
    left.plot(s["step"], s["exact"], marker=".", label="pick = true item at that step")
    left.plot(s["step"], s["distinct_so_far"], ls="--", label="distinct picks so far / steps")
    left.set_xlabel("step")
    left.set_ylim(0, 1)
    left.legend(fontsize=8)
    left.set_title("alignment and diversity per step")
    right.plot(s["step"], s["top1pct_share"], marker="o", label="generated")
    right.axhline(m["top1pct_share_future"], color="k", ls=":", label="true future")
    right.set_xlabel("step")
    right.set_ylabel("share in the top-1% popular items")
    right.set_ylim(0, 1)
    right.legend(fontsize=8)
    right.set_title("mode collapse")
    for axis in (left, right):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(f"{facts.get('strategy', '')} rollouts, {generation.counted()}, H={m['steps']}", fontsize=10)
    fig.tight_layout()
    paths.append(save_figure(fig, folder / "generate.png"))
    return paths


def trial_rollouts(
    model: Recommender, split: LeaveOneOut, cfg: Config, max_len: int, device: torch.device
) -> dict[str, float]:
    """A trial's rollout metrics (its test's `gen.*`): where eval.generate_steps > 0, greedy rollouts from
    every test user's history (seeded by the trial's seed), never picking a seen item where the evaluation
    filters them (`--exclude auto` of modsar generate)."""
    if not cfg.eval.generate_steps:
        return {}
    return generate(
        model,
        split,
        cfg.task,
        max_len,
        cfg.eval.generate_steps,
        Sampler("greedy"),
        resolve_exclude("auto", cfg.eval.filter_seen),
        seed=cfg.seed,
        device=device,
    ).metrics
