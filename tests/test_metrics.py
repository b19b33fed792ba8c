"""Ranking metrics against hand-computed answers: ties count against the target, filters, sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from modsar.config import EvalConfig
from modsar.data.split import LeaveOneOut
from modsar.evaluation.ranking import (
    evaluate,
    fixed_negatives,
    metric_sums,
    popularity_scorer,
    ranks_from_scores,
)


def test_rank_counts_ties_against_target():
    scores = torch.tensor(
        [
            [0.9, 0.5, 0.5, 0.1],  # target item 2 (0.5) ties with item 3 -> rank 1
            [0.3, 0.3, 0.3, 0.3],  # constant scores -> the target is ranked last
            [0.1, 0.2, 0.3, 0.4],
        ]
    )  # target item 4 is strictly best -> rank 0
    ranks = ranks_from_scores(scores, torch.tensor([2, 1, 4]))
    assert ranks.tolist() == [2, 3, 0]


def test_metric_values_hand_computed():
    ranks = torch.tensor([0, 1, 4, 9, 10])
    sums = metric_sums(ranks, [1, 5, 10])
    assert sums["recall@1"] == 1
    assert sums["recall@5"] == 3
    assert sums["recall@10"] == 4
    assert sums["ndcg@5"] == pytest.approx(1 + 1 / math.log2(3) + 1 / math.log2(6))
    assert sums["ndcg@10"] == pytest.approx(1 + 1 / math.log2(3) + 1 / math.log2(6) + 1 / math.log2(11))
    assert sums["mrr@10"] == pytest.approx(1 + 1 / 2 + 1 / 5 + 1 / 10)


def _split(seqs: list[list[int]], num_items: int) -> LeaveOneOut:
    user = np.repeat(np.arange(1, len(seqs) + 1), [len(s) for s in seqs])
    return LeaveOneOut.from_log(user, np.concatenate(seqs), len(seqs), num_items)


class FixedScorer:
    """Returns the same score row for every user: item i gets scores[i - 1]."""

    def __init__(self, scores):
        self.scores = torch.tensor(scores, dtype=torch.float32)

    def __call__(self, inputs, users):
        return self.scores.expand(len(users), -1).clone()


def test_constant_model_scores_near_zero():
    split = _split([[1, 2, 3, 4], [5, 6, 7, 8], [2, 4, 6, 8]], 20)
    metrics = evaluate(
        FixedScorer([1.0] * 20), split, "test", EvalConfig(ks=[10]), "ar", 5, 2, torch.device("cpu")
    )
    assert metrics["ndcg@10"] == 0.0 and metrics["recall@10"] == 0.0


def test_history_filter_removes_seen_items_but_not_the_target():
    # User 1: history [1, 2, 3], test target 4. Scores prefer 1 > 2 > 3 > 4 > 5.
    split = _split([[1, 2, 3, 4]], 5)
    scorer = FixedScorer([5.0, 4.0, 3.0, 2.0, 1.0])
    device = torch.device("cpu")
    plain = evaluate(scorer, split, "test", EvalConfig(ks=[1, 5], filter_seen="none"), "ar", 5, 8, device)
    filtered = evaluate(
        scorer, split, "test", EvalConfig(ks=[1, 5], filter_seen="history"), "ar", 5, 8, device
    )
    assert plain["mrr@5"] == pytest.approx(1 / 4)  # rank 3 behind the three seen items
    assert filtered["recall@1"] == 1.0  # seen items removed -> the target is first
    # The validation target (3) has history [1, 2]: after filtering only items 4, 5 compete, both below it.
    valid = evaluate(scorer, split, "valid", EvalConfig(ks=[1], filter_seen="history"), "ar", 5, 8, device)
    assert valid["recall@1"] == 1.0


def test_repeated_target_stays_rankable_under_filter():
    split = _split([[2, 1, 3, 2]], 4)  # test target 2 also appears in the history
    scorer = FixedScorer([1.0, 4.0, 3.0, 2.0])
    m = evaluate(
        scorer, split, "test", EvalConfig(ks=[1], filter_seen="history"), "ar", 5, 8, torch.device("cpu")
    )
    assert m["recall@1"] == 1.0


def test_sampled_negatives_are_fixed_and_exclude_history():
    split = _split([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], 40)
    users, end, targets = split.targets("test")
    a = fixed_negatives(split, users, end, targets, 20, seed=3)
    b = fixed_negatives(split, users, end, targets, 20, seed=3)
    np.testing.assert_array_equal(a, b)
    assert not set(a[0]) & {1, 2, 3, 4, 5}
    assert not set(a[1]) & {6, 7, 8, 9, 10}


def test_sampled_ranking_counts_ties_against_target():
    split = _split([[1, 2, 3, 4]], 30)
    cfg = EvalConfig(ks=[1, 10], sampled_negatives=5)
    m = evaluate(FixedScorer([1.0] * 30), split, "test", cfg, "ar", 5, 8, torch.device("cpu"))
    assert m["recall@1"] == 0.0 and m["mrr@10"] == pytest.approx(1 / 6)


def test_popularity_uses_training_items_only():
    # Item 9 is only ever a test target: it must not gain popularity from that.
    split = _split([[1, 1, 2, 9], [1, 3, 4, 9], [1, 5, 6, 9]], 9)
    scores = popularity_scorer(split, torch.device("cpu"))(None, torch.tensor([1]))
    assert scores[0, 8] == 0 and scores[0, 0] == 4


NAN, INF = float("nan"), float("inf")


def test_non_finite_target_gets_the_worst_rank_and_nan_candidates_rank_last():
    scores = torch.tensor(
        [
            [NAN, NAN, NAN, NAN],  # NaN target -> worst rank (3), never 0 or -1
            [0.1, NAN, 0.5, 0.2],  # NaN candidate is below the finite target: rank 1
            [INF, 1.0, 2.0, 3.0],  # +inf candidate ahead of target 2 (1.0): rank 3
            [1.0, INF, 0.0, 0.0],  # +inf target -> worst rank, not best
            [-INF, 0.0, 1.0, 2.0],
        ]
    )  # -inf target -> worst
    ranks = ranks_from_scores(scores, torch.tensor([1, 4, 2, 2, 1]))
    assert ranks.tolist() == [3, 1, 3, 3, 3]


@pytest.mark.parametrize("filter_seen", ["none", "history"])
@pytest.mark.parametrize("sampled", [0, 5])
def test_nan_model_scores_zero_not_perfect(filter_seen, sampled):
    split = _split([[1, 2, 3, 4], [5, 6, 7, 8], [2, 4, 6, 8]], 20)
    cfg = EvalConfig(ks=[1, 10], filter_seen=filter_seen, sampled_negatives=sampled)
    m = evaluate(FixedScorer([NAN] * 20), split, "test", cfg, "ar", 5, 2, torch.device("cpu"))
    assert all(math.isfinite(v) for v in m.values())
    assert m["recall@1"] == 0.0 and m["ndcg@1"] == 0.0 and m["recall@10"] == (1.0 if sampled else 0.0)
    if sampled:  # 5 negatives: a NaN target is ranked behind all of them (rank 5 -> 1 / log2(7))
        assert m["ndcg@10"] == pytest.approx(1 / math.log2(7))


def test_worst_rank_under_history_filter_counts_only_candidates():
    from modsar.evaluation.ranking import target_ranks

    split = _split([[1, 2, 3, 4]], 6)  # test target 4; items 1-3 filtered -> candidates 4, 5, 6
    ranks = target_ranks(
        FixedScorer([0.0, 0.0, 0.0, NAN, 1.0, 2.0]),
        split,
        "test",
        EvalConfig(filter_seen="history"),
        "ar",
        5,
        8,
        torch.device("cpu"),
    )
    assert ranks.tolist() == [2]


class _UserTable:
    """Scores that depend only on the user (a fixed random row per user id), whatever order they come in."""

    def __init__(self, num_users: int, num_items: int) -> None:
        self.table = torch.from_numpy(
            np.random.default_rng(5).integers(0, 6, (num_users + 1, num_items)).astype(np.float32)
        )  # few distinct values: many ties

    def __call__(self, inputs: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        return self.table[users]


@pytest.mark.parametrize("batch_size", [1, 4, 64])
def test_ranks_in_user_order_match_a_brute_force_count(batch_size):
    """Users of mixed lengths (evaluated in length order, in batches) with repeated history items and targets
    that repeat an earlier item: each rank is the count, over the candidates left after the filter (the
    distinct history items except the target), of scores >= the target's, minus the target itself."""
    from modsar.evaluation.ranking import target_ranks

    rng = np.random.default_rng(3)
    n_items, lengths = 9, rng.integers(3, 25, size=23)
    split = _split([list(rng.integers(1, n_items + 1, size=n)) for n in lengths], n_items)
    scorer = _UserTable(len(lengths), n_items)
    ranks = target_ranks(
        scorer, split, "test", EvalConfig(filter_seen="history"), "ar", 6, batch_size, torch.device("cpu")
    )
    users, end, targets = split.targets("test")
    want = []
    for u, e, t in zip(users, end, targets, strict=True):
        seen = set(split.items[split.starts[u] : e].tolist()) - {int(t)}
        row = scorer.table[u + 1]
        want.append(
            sum(1 for i in range(1, n_items + 1) if i not in seen and i != t and row[i - 1] >= row[t - 1])
        )
    assert ranks.tolist() == want


def test_scores_held_at_once_stay_within_the_budget(monkeypatch):
    """On a catalogue too large for the eval batch, fewer users are scored at once; ranks do not change."""
    import modsar.evaluation.ranking as ev

    rng = np.random.default_rng(4)
    split = _split([list(rng.integers(1, 10, size=n)) for n in rng.integers(3, 12, size=20)], 9)
    table = _UserTable(20, 9)
    seen: list[int] = []

    def scorer(inputs, users):
        seen.append(len(users))
        return table(inputs, users)

    args = (split, "test", EvalConfig(filter_seen="history"), "ar", 6, 64, torch.device("cpu"))
    full = ev.target_ranks(scorer, *args)
    assert seen == [20]
    monkeypatch.setattr(ev, "SCORES_BUDGET", 27)  # 27 scores // 9 items = 3 users at a time
    seen.clear()
    assert ev.target_ranks(scorer, *args).tolist() == full.tolist()
    assert max(seen) == 3 and sum(seen) == 20


def test_evaluation_scores_equal_the_training_product_and_rank_alike():
    """Without gradients on CPU, item scores come from the item-major product as a (B, N) view: the same
    values as the row-major product training uses, and the same pessimistic ranks."""
    from modsar.model.toolkit import item_scores

    g = torch.Generator().manual_seed(0)
    table = torch.nn.Embedding(302, 16)
    hidden = torch.randn(37, 16, generator=g)
    targets = torch.randint(1, 301, (37,), generator=g)
    trained = item_scores(hidden, table, 300)
    with torch.no_grad():
        evaluated = item_scores(hidden, table, 300)
    assert evaluated.shape == (37, 300) and not evaluated.is_contiguous()  # the item-major product's view
    torch.testing.assert_close(evaluated, trained.detach(), rtol=1e-6, atol=1e-6)
    assert torch.equal(ranks_from_scores(evaluated, targets), ranks_from_scores(trained.detach(), targets))
