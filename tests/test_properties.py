"""Property-based tests (hypothesis): no leakage from the split and batches, exact ranks against a brute-force
reference, invariance to item relabelling, NaN models never beating finite ones, bit-for-bit reproducible
trials.

Every hypothesis test runs derandomized with no example database, so CI sees the same examples every run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modsar.config import EvalConfig, load_config
from modsar.data.batches import TrainBatches, eval_inputs
from modsar.data.split import LeaveOneOut
from modsar.data.store import load_dataset
from modsar.evaluation.ranking import evaluate, fixed_negatives, target_ranks
from modsar.training.trainer import run_trial

CPU = torch.device("cpu")
NAN, INF = float("nan"), float("inf")


def fixed(max_examples: int) -> settings:
    """Deterministic, database-free, no deadline (2 shared cores): the same examples in CI every time."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def make_split(seqs: list[list[int]], num_items: int) -> LeaveOneOut:
    user = np.repeat(np.arange(1, len(seqs) + 1), [len(s) for s in seqs]).astype(np.int64)
    items = np.concatenate([np.asarray(s, dtype=np.int64) for s in seqs]) if seqs else np.zeros(0, np.int64)
    return LeaveOneOut.from_log(user, items, len(seqs), num_items)


# ------------------------------------------------------------------------------------------------------------
# --- 1. Split and batches: held-out positions never reach a training row; AR labels are the next items;
# evaluation    inputs hold only the items before their target. ----------------------------------------------
# -----------------------------------------------------------------


@st.composite
def batch_cases(draw):
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=8))
    num_items = draw(st.integers(1, 6))  # a handful of items: the same id recurs within a user's history
    seqs = [draw(st.lists(st.integers(1, num_items), min_size=n, max_size=n)) for n in lengths]
    return dict(
        seqs=seqs,
        num_items=num_items,
        task=draw(st.sampled_from(["ar", "ae"])),
        max_len=draw(st.integers(1, 8)),
        batch_size=draw(st.integers(1, 5)),
        mask_prob=draw(st.sampled_from([0.0, 0.15, 0.5, 1.0])),
        padding_free=draw(st.booleans()),
        item_sse_prob=draw(st.sampled_from([0.0, 0.0, 0.3, 1.0])),
        user_sse_prob=draw(st.sampled_from([0.0, 0.5])),
        seed=draw(st.integers(0, 2**16)),
        batching=draw(st.sampled_from(["tokens", "length", "random"])),
    )


def expected_window(start: int, end: int, width: int) -> np.ndarray:
    """Position tags (position + 1) of the last `width` log positions of [start, end), left-padded with 0."""
    idx = end - width + np.arange(width)
    return np.where(idx >= start, idx + 1, 0)


@given(batch_cases())
@fixed(150)
def test_training_rows_use_only_training_positions(case):
    real = make_split(case["seqs"], case["num_items"])
    total = len(real.items)
    # The same log with every item replaced by its position + 1: a value in a batch names its log position.
    tagged = LeaveOneOut(np.arange(1, total + 1, dtype=np.int64), real.offsets, total)
    owner = np.repeat(np.arange(real.num_users), real.lengths)
    starts, train_ends = real.starts, real.train_ends
    lengths = real.lengths
    # Held-out and training positions from the leave-one-out definition itself, not from the package.
    held_out = {
        int(real.offsets[u + 1] - k) for u in range(real.num_users) if lengths[u] >= 3 for k in (1, 2)
    }
    assert np.array_equal(train_ends, real.offsets[1:] - np.where(lengths >= 3, 2, 0))
    assert {p for p in range(total) if p < train_ends[owner[p]]} == set(range(total)) - held_out
    trainable = {u for u in range(real.num_users) if train_ends[u] - starts[u] >= 2}

    task, max_len, sse = case["task"], case["max_len"], case["item_sse_prob"]
    kwargs = dict(
        mask_prob=case["mask_prob"],
        padding_free=case["padding_free"],
        item_sse_prob=sse,
        user_sse_prob=case["user_sse_prob"],
        seed=case["seed"],
        batching=case["batching"],
    )
    batches = TrainBatches(tagged, task, max_len, case["batch_size"], **kwargs)
    # token batches hold an average batch's positions (at most one row more), the others batch_size users
    tokens = case["padding_free"] and case["batching"] == "tokens"
    budget = case["batch_size"] * batches.row_lengths.mean() if len(batches.users) else 0.0
    mask = total + 1
    full_width = max_len + (task == "ae")
    for _epoch in range(2):
        epoch_users = []
        for batch in batches:
            inputs, labels, users = batch.inputs.numpy(), batch.labels.numpy(), batch.users.numpy()
            rows, width = inputs.shape
            assert labels.shape == inputs.shape and users.shape == (rows,) and rows >= 1
            if tokens:
                assert (inputs > 0).sum() <= budget + width  # real slots = the rows' lengths
            else:
                assert rows <= case["batch_size"]
            if not case["padding_free"]:
                assert width == full_width
            assert width <= full_width
            for r in range(rows):
                label_pos = labels[r][labels[r] > 0] - 1
                assert len(label_pos) >= 1
                u = int(owner[label_pos[0]])
                epoch_users.append(u)
                if case["user_sse_prob"] == 0:
                    assert users[r] == u + 1
                else:
                    assert 1 <= users[r] <= real.num_users
                s, e = int(starts[u]), int(train_ends[u])
                # The leakage check proper: every label names a training position of this row's user.
                assert all(s <= p < e for p in label_pos)
                assert set(label_pos.tolist()).isdisjoint(held_out)
                if task == "ar":
                    want_inputs = expected_window(s, e - 1, width)
                    want_labels = expected_window(s + 1, e, width)
                    assert np.array_equal(labels[r], want_labels)
                    assert (want_labels > 0).sum() == min(e - s - 1, max_len)
                    # Labels are the inputs shifted by one: label at column c is the input at column c + 1.
                    assert np.array_equal(
                        labels[r][:-1][labels[r][:-1] > 0], want_inputs[1:][labels[r][:-1] > 0]
                    )
                    real_cols = want_labels > 0
                    assert np.array_equal(want_inputs[real_cols] + 1, want_labels[real_cols])
                    # No input at or before column c holds label c or a later item (causal order).
                    for c in np.flatnonzero(real_cols):
                        assert want_inputs[: c + 1].max() < labels[r, c]
                    assert labels[r, -1] == e  # the last training item is only ever a label
                else:
                    window = expected_window(s, e, width)
                    assert (window > 0).sum() == min(e - s, max_len + 1)
                    masked = inputs[r] == mask
                    n_real = int((window > 0).sum())
                    assert masked.sum() == max(1, round(n_real * case["mask_prob"]))
                    assert np.all(window[masked] > 0)
                    assert np.array_equal(labels[r], np.where(masked, window, 0))
                    want_inputs = np.where(masked, mask, window)
                pad = want_inputs == 0
                assert np.all(inputs[r][pad] == 0)  # padding stays padding, SSE or not
                kept = ~pad & (inputs[r] != mask)
                if sse == 0:
                    assert np.array_equal(inputs[r], want_inputs)
                else:  # SSE may swap a real input for any item, never padding for an item
                    assert np.all((inputs[r][kept] >= 1) & (inputs[r][kept] <= total))
                covered = want_inputs[~pad & (want_inputs != mask)] - 1
                assert all(s <= p < e for p in covered) and set(covered.tolist()).isdisjoint(held_out)
        assert sorted(epoch_users) == sorted(trainable)  # every trainable user exactly once per epoch

    # The real log gives the same batches, value for value (same seed and shapes: same permutation and masks).
    if sse == 0:
        lookup = np.concatenate(
            [[0], real.items, [real.num_items + 1]]
        )  # tag -> real id; tagged mask -> mask
        for a, b in zip(
            TrainBatches(tagged, task, max_len, case["batch_size"], **kwargs),
            TrainBatches(real, task, max_len, case["batch_size"], **kwargs),
            strict=True,
        ):
            assert np.array_equal(lookup[a.inputs.numpy()], b.inputs.numpy())
            assert np.array_equal(lookup[a.labels.numpy()], b.labels.numpy())
            assert torch.equal(a.users, b.users)

    for which, shift in (("valid", 2), ("test", 1)):
        users, end, targets = tagged.targets(which)
        assert users.tolist() == [u for u in range(real.num_users) if lengths[u] >= 3]
        assert np.array_equal(end, real.offsets[users + 1] - shift) and np.array_equal(targets, end + 1)
        x = eval_inputs(tagged, users, end, task, max_len).numpy()
        assert x.shape == (len(users), full_width)
        for r, u in enumerate(users):
            history = x[r, :max_len]
            assert np.array_equal(history, expected_window(int(starts[u]), int(end[r]), max_len))
            before = history[history > 0] - 1
            assert all(starts[u] <= p < end[r] for p in before)  # only items before the target
            if task == "ae":
                assert x[r, -1] == mask


# ------------------------------------------------------------------------------------------------------------
# 2. The evaluator against a brute-force reference.
# ------------------------------------------------------------------------------------------------------------

SCORE_VALUES = [-2.0, -1.0, 0.0, 0.5, 1.0, 3.0, NAN, INF, -INF]  # few values: many ties


@st.composite
def eval_cases(draw, sampled: bool | None = None, min_items: int = 1):
    lengths = draw(st.lists(st.integers(1, 8), min_size=1, max_size=7))
    if sampled is None:  # full ranking twice as often: there the history filter and NaN counting matter
        sampled = draw(st.sampled_from([False, False, True]))
    # Sampled negatives need an item outside each user's history and target: more items than interactions.
    low = max(min_items, max(lengths) + 1 if sampled else 1)
    num_items = draw(st.integers(low, max(low, 10)))
    seqs = [draw(st.lists(st.integers(1, num_items), min_size=n, max_size=n)) for n in lengths]
    score = st.one_of(st.sampled_from(SCORE_VALUES), st.floats(-4, 4, width=32))
    table = [draw(st.lists(score, min_size=num_items, max_size=num_items)) for _ in lengths]
    evaluable = sum(n >= 3 for n in lengths)
    return dict(
        seqs=seqs,
        num_items=num_items,
        table=table,
        filter_seen=draw(st.sampled_from(["none", "history"])),
        sampled=draw(st.integers(1, 6)) if sampled else 0,
        ks=sorted(draw(st.sets(st.sampled_from([1, 2, 3, 5, 10]), min_size=1, max_size=3))),
        task=draw(st.sampled_from(["ar", "ae"])),
        max_len=draw(st.integers(1, 6)),
        batch_size=draw(st.integers(1, max(1, evaluable - 1))),
        sample_seed=draw(st.integers(0, 1000)),
    )


class TableScorer:
    """A fixed score row per user: scorer(inputs, users) = table[users - 1]; checks what it is given."""

    def __init__(self, table, max_len: int, task: str):
        self.table = torch.tensor(table, dtype=torch.float32).reshape(len(table), -1)
        self.width = max_len + (task == "ae")
        self.calls = 0

    def __call__(self, inputs: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        assert inputs.dim() == 2 and inputs.size(0) == users.size(0) and inputs.size(1) <= self.width
        assert users.min() >= 1 and users.max() <= len(self.table)
        self.calls += 1
        return self.table[users - 1]


def reference_rank(target_score: float, others: list[float]) -> int:
    """Others scoring >= the target (ties against it; NaN >= x is False, +inf >= x True); non-finite target:
    every other candidate is ahead."""
    if not math.isfinite(target_score):
        return len(others)
    return sum(1 for s in others if s >= target_score)


def reference(case: dict, which: str, table=None) -> tuple[list[int], list[int], dict[str, float]]:
    """(ranks, candidate counts, metrics) by brute force, users in order."""
    table = case["table"] if table is None else table
    table = [[float(np.float32(v)) for v in row] for row in table]  # the scorer's float32 values
    split = make_split(case["seqs"], case["num_items"])
    negatives = None
    if case["sampled"]:
        users, end, targets = split.targets(which)
        negatives = fixed_negatives(
            split, users, end, targets, case["sampled"], case["sample_seed"] + (which == "test")
        )
    ranks, counts = [], []
    evaluable = [u for u, s in enumerate(case["seqs"]) if len(s) >= 3]
    for i, u in enumerate(evaluable):
        seq = case["seqs"][u]
        pos = len(seq) - (2 if which == "valid" else 1)
        target, history = seq[pos], set(seq[:pos])
        if negatives is not None:
            assert target not in negatives[i] and not history & set(negatives[i].tolist())
            others = [int(x) for x in negatives[i]]
        else:
            others = [j for j in range(1, case["num_items"] + 1) if j != target]
            if case["filter_seen"] == "history":
                others = [j for j in others if j not in history]
        ranks.append(reference_rank(table[u][target - 1], [table[u][j - 1] for j in others]))
        counts.append(len(others) + 1)
    metrics = {}
    count = max(len(ranks), 1)
    for k in case["ks"]:
        metrics[f"recall@{k}"] = sum(r < k for r in ranks) / count
        metrics[f"ndcg@{k}"] = sum(1 / math.log2(r + 2) for r in ranks if r < k) / count
        metrics[f"mrr@{k}"] = sum(1 / (r + 1) for r in ranks if r < k) / count
    return ranks, counts, metrics


def run_eval(case: dict, which: str, seqs=None, table=None) -> tuple[list[int], dict[str, float]]:
    split = make_split(case["seqs"] if seqs is None else seqs, case["num_items"])
    cfg = EvalConfig(
        ks=case["ks"],
        filter_seen=case["filter_seen"],
        sampled_negatives=case["sampled"],
        sample_seed=case["sample_seed"],
    )
    scorer = TableScorer(case["table"] if table is None else table, case["max_len"], case["task"])
    args = (split, which, cfg, case["task"], case["max_len"], case["batch_size"], CPU)
    ranks = target_ranks(scorer, *args)
    metrics = evaluate(scorer, *args)
    evaluable = int((split.lengths >= 3).sum())
    assert scorer.calls == 2 * math.ceil(evaluable / case["batch_size"])  # batched as asked, twice
    return ranks.tolist(), metrics


@given(eval_cases())
@fixed(250)
def test_evaluator_matches_brute_force_reference(case):
    for which in ("valid", "test"):
        want_ranks, counts, want = reference(case, which)
        ranks, metrics = run_eval(case, which)
        assert ranks == want_ranks
        assert all(0 <= r < c for r, c in zip(ranks, counts, strict=True))
        assert set(metrics) == set(want)
        for key, value in want.items():
            assert metrics[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_reference_rank_semantics_hand_computed():
    """The reference itself, on the docstring's cases (so a wrong reference cannot agree with a wrong
    evaluator)."""
    assert reference_rank(0.5, [0.9, 0.5, 0.1]) == 2  # a tie counts against the target
    assert reference_rank(0.5, [NAN, NAN, 0.1]) == 0  # NaN candidates rank below a finite target
    assert reference_rank(0.5, [INF, -INF]) == 1  # +inf counts, -inf does not
    for bad in (NAN, INF, -INF):
        assert reference_rank(bad, [NAN, -INF, 0.0]) == 3  # non-finite target: worst rank
    case = dict(
        seqs=[[1, 2, 3, 4]],
        num_items=5,
        table=[[5.0, 4.0, 3.0, 2.0, 1.0]],
        filter_seen="none",
        sampled=0,
        ks=[1, 5],
        task="ar",
        max_len=3,
        batch_size=1,
        sample_seed=0,
    )
    assert reference(case, "test")[0] == [3] and reference(case, "valid")[0] == [2]
    assert reference({**case, "filter_seen": "history"}, "test")[:2] == ([0], [2])


# ------------------------------------------------------------------------------------------------------------
# 3. Relabelling items changes nothing (full ranking).
# ------------------------------------------------------------------------------------------------------------


@given(eval_cases(sampled=False), st.data())
@fixed(120)
def test_metrics_invariant_to_item_relabelling(case, data):
    n = case["num_items"]
    perm = data.draw(st.permutations(range(1, n + 1)))  # item i -> perm[i - 1]
    seqs = [[perm[i - 1] for i in s] for s in case["seqs"]]
    table = [[0.0] * n for _ in case["table"]]
    for u, row in enumerate(case["table"]):
        for i in range(1, n + 1):
            table[u][perm[i - 1] - 1] = row[i - 1]
    for which in ("valid", "test"):
        ranks, metrics = run_eval(case, which)
        moved_ranks, moved_metrics = run_eval(case, which, seqs, table)
        assert moved_ranks == ranks
        assert moved_metrics == metrics
        assert ranks == reference(case, which)[0]


# ------------------------------------------------------------------------------------------------------------
# 4. A NaN model never beats a finite one.
# ------------------------------------------------------------------------------------------------------------


@given(eval_cases(), st.data())
@fixed(120)
def test_nan_rows_only_worsen_ranks(case, data):
    nan_users = data.draw(st.lists(st.booleans(), min_size=len(case["seqs"]), max_size=len(case["seqs"])))
    table = [
        [NAN] * case["num_items"] if bad else row for bad, row in zip(nan_users, case["table"], strict=True)
    ]
    evaluable = [u for u, s in enumerate(case["seqs"]) if len(s) >= 3]
    for which in ("valid", "test"):
        before, _ = run_eval(case, which)
        after, _ = run_eval(case, which, table=table)
        _, counts, _ = reference(case, which)
        for i, u in enumerate(evaluable):
            if nan_users[u]:
                assert after[i] >= before[i] and after[i] == counts[i] - 1  # the worst rank
            else:
                assert after[i] == before[i]


@given(eval_cases(sampled=False, min_items=10 + 8 + 1))
@fixed(60)
def test_all_nan_scorer_scores_exactly_zero(case):
    """More candidates than any k (N > max k + longest history): a NaN model hits nothing."""
    table = [[NAN] * case["num_items"] for _ in case["table"]]
    for which in ("valid", "test"):
        ranks, metrics = run_eval(case, which, table=table)
        _, counts, _ = reference(case, which)
        assert ranks == [c - 1 for c in counts]
        assert all(value == 0.0 for value in metrics.values()), metrics


# ------------------------------------------------------------------------------------------------------------
# 5. Same seed, same CPU: identical trials; another seed: different numbers.
# ------------------------------------------------------------------------------------------------------------

TINY = [
    "train.max_epochs=2",
    "train.patience=0",
    "model.hidden_size=16",
    "model.num_layers=1",
    "data.batch_size=128",
    "train.device=cpu",
]


def trial_facts(task: str, seed: int, dataset) -> dict:
    result = run_trial(
        load_config(None, [*TINY, f"task={task}", f"seed={seed}"]), dataset=dataset, progress=False
    )
    return dict(
        valid=result.valid,
        test=result.test,
        best_epoch=result.best_epoch,
        epochs_run=result.epochs_run,
        history=result.history,
        num_parameters=result.num_parameters,
    )


@pytest.mark.parametrize("task", ["ar", "ae"])
def test_same_seed_same_trial_and_another_seed_differs(task):
    dataset = load_dataset("synthetic")
    first, second = trial_facts(task, 0, dataset), trial_facts(task, 0, dataset)
    assert first["epochs_run"] == 2 and len(first["history"]) == 2 and first["test"]
    assert all(math.isfinite(v) for v in [*first["valid"].values(), *first["test"].values()])
    assert first == second  # exact equality: losses and metrics of every epoch, valid, test, best epoch
    other = trial_facts(task, 1, dataset)
    assert other["history"][0]["loss"] != first["history"][0]["loss"]
    assert [h["loss"] for h in other["history"]] != [h["loss"] for h in first["history"]]
    assert other["valid"] != first["valid"] or other["test"] != first["test"]


def test_same_seed_same_cpu_identical_result_rows(tmp_path, capsys):
    """The Parquet rows of two `modsar train` runs with one seed agree on every column but the run's own
    identity and clock (trial id, checkpoint path, times and the rates measured from them, timestamp)."""
    import pyarrow.parquet as pq

    from modsar.cli import main

    out = tmp_path / "results"
    args = [
        "train",
        "--dataset",
        "synthetic",
        "--quiet",
        "--results",
        str(out),
        "--experiment",
        "same",
        "train.max_epochs=2",
        "train.patience=0",
        "model.hidden_size=16",
        "model.num_layers=1",
        "train.device=cpu",
    ]
    assert main(args) == 0 and main(args) == 0
    capsys.readouterr()
    rows = [pq.read_table(f).to_pylist()[0] for f in sorted((out / "same" / "trials").glob("*.parquet"))]
    own = {
        "trial_id",
        "checkpoint",
        "finished_at",
        "wall_time_s",
        "epoch_time_s",
        "eval_time_s",
        "gflops",
        "mfu",
        "setup_s",
        "checkpoint_s",
    }
    assert len(rows) == 2 and set(rows[0]) == set(rows[1])
    assert {k: v for k, v in rows[0].items() if k not in own} == {
        k: v for k, v in rows[1].items() if k not in own
    }
    assert rows[0]["test.ndcg@10"] > 0 and rows[0]["trial_id"] != rows[1]["trial_id"]
