"""modsar generate: rollouts feed the model its own picks (AR and AE), samplers keep to their sets, the
future is the log from the test target on, and every metric matches a hand-computed case."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from modsar.cli import main
from modsar.config import load_config
from modsar.data.split import LeaveOneOut
from modsar.evaluation.rollouts import Sampler, rollout, rollout_metrics, training_facts, true_future
from modsar.training.trainer import run_trial

N = 9


class NextItem(nn.Module):
    """Scores item (last real input + 1) mod N highest, the last input second: a known continuation.
    AE inputs end in the mask token (N + 1); the item before it counts as the last."""

    num_items = N

    def __init__(self) -> None:
        super().__init__()
        self.item_emb = nn.Embedding(N + 2, 1)
        self.seen: list[torch.Tensor] = []

    def forward(self, inputs: torch.Tensor, users=None, need_weights: bool = False) -> torch.Tensor:
        self.seen.append(inputs.clone())
        last = torch.where(inputs[:, -1] == N + 1, inputs[:, -2], inputs[:, -1])
        return last[:, None, None].float().expand(len(inputs), inputs.size(1), 1)

    def score(self, hidden: torch.Tensor, users=None, items=None) -> torch.Tensor:
        last = hidden[:, 0].long()
        scores = torch.zeros(len(hidden), N)
        scores[torch.arange(len(hidden)), last % N] = 2.0  # column of item last + 1 (1-based ids, wrapping)
        scores[torch.arange(len(hidden)), last - 1] = 1.0
        return scores


@pytest.mark.parametrize("task", ["ar", "ae"])
def test_rollout_feeds_the_model_its_own_picks(task):
    model = NextItem()
    windows = torch.tensor([[0, 0, 3], [5, 6, 7]])
    out = rollout(model, task, windows, torch.tensor([1, 2]), 4, Sampler("greedy"), mask_id=N + 1)
    assert out.tolist() == [[4, 5, 6, 7], [8, 9, 1, 2]]
    last_inputs = model.seen[-1]
    if task == "ae":
        assert (last_inputs[:, -1] == N + 1).all() and last_inputs[:, -2].tolist() == [6, 1]
    else:
        assert last_inputs[1].tolist() == [8, 9, 1]  # the window slides: max_len items, the picks at the end


def test_excluded_items_are_never_picked():
    model = NextItem()
    windows = torch.tensor([[0, 2, 3]])
    # history excluded: 4 stays allowed; then rollout exclusion stops 4 -> 5 -> ... from ever repeating
    seen = (np.array([0, 0]), np.array([1, 2]))  # 0-based columns of items 2 and 3
    out = rollout(model, "ar", windows, torch.tensor([1]), 3, Sampler("greedy"), mask_id=N + 1, seen=seen)
    assert out.tolist() == [[4, 5, 6]]
    seen = (
        np.array([0]),
        np.array([3]),
    )  # item 4 banned: the runner-up (the last item, 3) is picked, and again
    out = rollout(model, "ar", windows, torch.tensor([1]), 2, Sampler("greedy"), mask_id=N + 1, seen=seen)
    assert out.tolist() == [[3, 3]]
    out = rollout(
        model,
        "ar",
        windows,
        torch.tensor([1]),
        2,
        Sampler("greedy"),
        mask_id=N + 1,
        seen=seen,
        exclude_rollout=True,
    )
    assert out[0, 0] == 3 and out[0, 1] not in (3, 4)


def test_samplers_keep_to_their_sets_and_are_seeded():
    scores = torch.tensor([[5.0, 4.0, 1.0, -2.0, float("-inf")]]).expand(2000, 5)
    g = torch.Generator().manual_seed(0)
    assert (Sampler("greedy").pick(scores, None) == 0).all()
    assert set(Sampler("topk", top_k=2).pick(scores, g).tolist()) == {0, 1}
    assert set(Sampler("topk", top_k=1).pick(scores, g).tolist()) == {0}
    p = torch.softmax(scores[0], 0)  # nucleus 0.9: item 0 holds .72, items 0-1 .99 -> {0, 1}
    assert p[0] < 0.9 < p[0] + p[1]
    picks = Sampler("nucleus", top_p=0.9).pick(scores, g)
    assert set(picks.tolist()) == {0, 1}
    assert abs((picks == 0).float().mean() - p[0] / (p[0] + p[1])) < 0.05
    assert set(Sampler("nucleus", top_p=0.5).pick(scores, g).tolist()) == {0}
    # a top_p that rounds to 0 in float32 masked every item (multinomial refused): the best always stays
    assert set(Sampler("nucleus", top_p=1e-300).pick(scores, g).tolist()) == {0}
    one = Sampler("topk", top_k=3).pick(scores, torch.Generator().manual_seed(7))
    two = Sampler("topk", top_k=3).pick(scores, torch.Generator().manual_seed(7))
    assert torch.equal(one, two)


@pytest.mark.parametrize("seed", ["-1", "99999999999999999999", "4294967296"])
def test_generate_refuses_a_seed_numpy_and_torch_cannot_take(tmp_path, capsys, seed):
    checkpoint = tmp_path / "best.pt"
    checkpoint.write_bytes(b"never read: the seed is checked first")
    assert main(["generate", "--checkpoint", str(checkpoint), "--steps", "2", "--seed", seed]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"modsar: error: --seed must be in 0..4294967295; got {seed}"


def test_the_future_is_the_log_from_the_test_target_on():
    split = LeaveOneOut(np.array([1, 2, 3, 4, 5, 6, 7, 8]), np.array([0, 5, 8]), 8)
    users, end, _ = split.targets("test")
    assert true_future(split, users, end, 3).tolist() == [[5, 0, 0], [8, 0, 0]]
    early = np.array([2, 6])  # a history ending earlier (as a temporal cut would): everything after it
    assert true_future(split, users, early, 3).tolist() == [[3, 4, 5], [7, 8, 0]]
    again = LeaveOneOut(np.array([1, 2, 1, 3, 2, 4, 5]), np.array([0, 7]), 5)  # 1 and 2 come back later
    assert true_future(again, np.array([0]), np.array([2]), 4).tolist() == [[1, 3, 2, 4]]
    assert true_future(again, np.array([0]), np.array([2]), 4, novel=True).tolist() == [[3, 4, 5, 0]]


def test_a_future_with_repeats_counts_each_item_once():
    """A rollout that reproduces a future with repeated items is perfectly aligned."""
    generated, future = np.array([[7, 7, 9, 9]]), np.array([[7, 7, 9, 9]])
    m = rollout_metrics(generated, future, np.array([1]), np.zeros(11), np.zeros(0, dtype=np.int64), 10)
    assert m["alignment_hits"] == 2 and m["alignment_recall"] == 1.0 and m["alignment_exact"] == 1.0
    assert m["alignment_ndcg"] == pytest.approx(1.0 / (1 + 1 / math.log2(3)) * (1 + 1 / math.log2(4)))


def test_rollouts_come_back_in_target_order_with_their_targets():
    """Batched by history length, reported in the order of split.targets, each row naming its target."""
    from modsar.evaluation.rollouts import generate

    split = LeaveOneOut(np.array([1, 2, 3, 4, 5, 6, 7, 2, 3, 4, 8, 9, 5, 6, 7]), np.array([0, 7, 11, 15]), 9)
    result = generate(NextItem(), split, "ar", 5, 2, Sampler("greedy"), batch_size=1)
    r = result.rollouts
    assert r["user"].tolist() == [1, 1, 2, 2, 3, 3] and r["target_index"].tolist() == [0, 0, 1, 1, 2, 2]
    assert r["target_item"].tolist() == [7, 7, 8, 8, 7, 7]
    assert r["item"].tolist() == [7, 8, 5, 6, 7, 8]  # last history item + 1, + 2
    assert r["future_item"].tolist() == [7, 0, 8, 0, 7, 0]
    assert result.metrics["alignment_exact"] == pytest.approx((1 + 0 + 1) / 3)


def test_no_item_left_is_one_clear_error():
    from modsar.errors import ModsarError

    seen = (np.zeros(N, dtype=np.int64), np.arange(N))  # every item in the history
    with pytest.raises(ModsarError, match="no item left to pick at step 1"):
        rollout(
            NextItem(),
            "ar",
            torch.tensor([[0, 2, 3]]),
            torch.tensor([1]),
            2,
            Sampler("topk"),
            mask_id=N + 1,
            seen=seen,
        )


def test_training_facts_use_only_training_items():
    split = LeaveOneOut(np.array([1, 2, 3, 4, 2, 3, 5, 9, 9]), np.array([0, 5, 9]), 9)
    counts, pairs = training_facts(split)
    # user 1 trains on 1 2 3, user 2 on 3 5 (its 9 9 are validation and test)
    assert counts.tolist() == [0, 1, 1, 2, 0, 1, 0, 0, 0, 0]
    keys = {int(k) for k in pairs}
    assert keys == {1 * 10 + 2, 2 * 10 + 1, 2 * 10 + 3, 3 * 10 + 2, 3 * 10 + 5, 5 * 10 + 3}


def test_rollout_metrics_by_hand():
    generated = np.array([[5, 5, 7, 2], [1, 2, 3, 4]])
    future = np.array([[7, 9, 0, 0], [3, 8, 1, 6]])
    last = np.array([4, 9])
    popularity = np.zeros(101)  # N = 100: the top 1% is one item, the most popular: 5
    popularity[5], popularity[1], popularity[2] = 10, 3, 2
    pairs = np.array([4 * 101 + 5, 5 * 101 + 4, 1 * 101 + 2, 2 * 101 + 1])  # 4-5 and 1-2 were adjacent
    m = rollout_metrics(generated, future, last, popularity, pairs, 100)
    # user 1: distinct picks 5, 7, 2; 7 is in the future {7, 9} at step 3 -> 1 hit, recall 1/2,
    #   NDCG = (1/log2(4)) / (1 + 1/log2(3)); exact: steps 1-2 vs 7, 9: none
    # user 2: picks 1, 2, 3, 4; future {3, 8, 1, 6}: hits 1 (step 1) and 3 (step 3) -> 2, recall 2/4,
    #   NDCG = (1 + 1/log2(4)) / (1 + 1/log2(3) + 1/2 + 1/log2(5)); exact: none of 1=3, 2=8, 3=1, 4=6
    ndcg1 = (1 / math.log2(4)) / (1 + 1 / math.log2(3))
    ndcg2 = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3) + 0.5 + 1 / math.log2(5))
    assert m["alignment_hits"] == pytest.approx(1.5)
    assert m["alignment_recall"] == pytest.approx((0.5 + 0.5) / 2)
    assert m["alignment_ndcg"] == pytest.approx((ndcg1 + ndcg2) / 2)
    assert m["alignment_exact"] == 0.0
    assert m["distinct_ratio"] == pytest.approx((3 / 4 + 4 / 4) / 2)
    assert m["immediate_repeat_rate"] == pytest.approx(1 / 6)
    assert m["distinct_2"] == pytest.approx((3 / 3 + 3 / 3) / 2)  # (5,5) (5,7) (7,2) | (1,2) (2,3) (3,4)
    gen_counts = np.array([2 / 8, 1 / 8, 2 / 8, 1 / 8, 1 / 8, 1 / 8])  # 5:2, 7:1, 2:2, 1:1, 3:1, 4:1
    assert m["entropy_generated"] == pytest.approx(float(-(gen_counts * np.log2(gen_counts)).sum()))
    fut = np.array([1, 1, 1, 1, 1, 1]) / 6  # 7, 9, 3, 8, 1, 6: all distinct
    assert m["entropy_future"] == pytest.approx(float(-(fut * np.log2(fut)).sum()))
    matched = np.array([2 / 6, 1 / 6, 1 / 6, 1 / 6, 1 / 6])  # first |F| steps: 5 5 | 1 2 3 4
    assert m["entropy_generated_matched"] == pytest.approx(float(-(matched * np.log2(matched)).sum()))
    assert m["coverage"] == pytest.approx(6 / 100) and m["coverage_future"] == pytest.approx(6 / 100)
    assert m["top1pct_share_generated"] == pytest.approx(2 / 8) and m["top1pct_share_future"] == 0.0
    assert m["top1pct_share_generated_matched"] == pytest.approx(2 / 6)  # the first |F| picks: 5 5 | 1 2 3 4
    # transitions with the last history item: 4-5 seen, 5-5 same, 5-7 new, 7-2 new | 9-1 new, 1-2 seen, 2-3,
    # 3-4 new
    assert m["unseen_transition_rate"] == pytest.approx(5 / 7)
    # future: 4-7, 7-9 | 9-3, 3-8, 8-1, 1-6: none seen
    assert m["unseen_transition_rate_future"] == 1.0


def test_generate_cli_and_train_rows(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MODSAR_DATA", str(tmp_path / "data"))
    checkpoint = tmp_path / "ar.pt"
    cfg = load_config(None, ["train.max_epochs=2", "model.hidden_size=16", "eval.generate_steps=3"])
    result = run_trial(cfg, checkpoint_path=checkpoint, progress=False)
    assert result.generation["steps"] == 3 and 0 <= result.generation["alignment_recall"] <= 1
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                str(checkpoint),
                "--steps",
                "3",
                "--json",
                "--quiet",
                "--out",
                str(tmp_path / "gen"),
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    for key in (
        "alignment_hits",
        "distinct_ratio",
        "entropy_generated",
        "entropy_future",
        "coverage",
        "top1pct_share_generated",
        "top1pct_share_future",
    ):
        assert key in printed
    assert printed["alignment_hits"] == result.generation["alignment_hits"]  # greedy: the row's rollouts
    assert sorted(p.name for p in (tmp_path / "gen").iterdir()) == [
        "generate.png",
        "metrics.json",
        "rollouts.parquet",
        "steps.parquet",
    ]
    assert main(["generate", "--checkpoint", str(checkpoint), "--steps", "3", "--strategy", "beam"]) == 2
    assert "--strategy must be one of greedy, topk, nucleus; got 'beam'" in capsys.readouterr().err
    assert main(["generate", "--checkpoint", str(tmp_path / "none.pt"), "--steps", "3"]) == 2


def test_auto_exclusion_follows_the_evaluation_filter():
    from modsar.evaluation.rollouts import resolve_exclude

    assert resolve_exclude("auto", "history") == "history" and resolve_exclude("auto", "none") == "none"
    assert resolve_exclude("history", "none") == "history"
    with pytest.raises(Exception, match="--exclude must be one of auto, none, history, rollout, all"):
        resolve_exclude("future", "none")


def tied_split():
    """Temporal split (every event after the test cut t=10 a target) of a log with tied timestamps, items in
    stored order (not by id) within each tie.
    user 1: 1@1 2@2 3@6 | 9@10 4@10 7@10 5@11 8@12 6@12; user 2: 2@3 | 3@10 4@10; user 3: 5@10 6@13."""
    from modsar.data.split import TemporalSplit

    user = np.array([1] * 9 + [2] * 3 + [3] * 2)
    item = np.array([1, 2, 3, 9, 4, 7, 5, 8, 6, 2, 3, 4, 5, 6])
    time = np.array([1, 2, 6, 10, 10, 10, 11, 12, 12, 3, 10, 10, 10, 13], dtype=float)
    return TemporalSplit.from_timed_log(user, item, time, 3, 9, valid_cut=5.0, test_cut=10.0, every=True)


def test_tied_targets_share_one_rollout_whose_future_starts_at_the_target():
    """Under split_targets=every, targets that share a timestamp share a history: one rollout, its future the
    log from the first of them in stored order (the target itself), not one rollout per tied target."""
    from modsar.evaluation.rollouts import generate

    split = tied_split()
    users, _, targets = split.targets("test")
    assert list(zip((users + 1).tolist(), targets.tolist(), strict=True)) == [
        (1, 9),
        (1, 4),
        (1, 7),
        (1, 5),
        (1, 8),
        (1, 6),
        (2, 3),
        (2, 4),
        (3, 6),
    ]  # 9 targets, 5 histories
    result = generate(NextItem(), split, "ar", 5, 3, Sampler("greedy"))
    r = result.rollouts[result.rollouts["step"] == 1]
    assert r["user"].tolist() == [1, 1, 1, 2, 3] and r["target_index"].tolist() == [0, 3, 4, 6, 8]
    assert r["target_item"].tolist() == [9, 5, 8, 3, 6]
    future = result.rollouts["future_item"].to_numpy().reshape(-1, 3)
    assert future.tolist() == [[9, 4, 7], [5, 8, 6], [8, 6, 0], [3, 4, 0], [6, 0, 0]]
    assert result.metrics["users"] == 5
    # picks: last history item + 1, + 2, + 3 (wrapping at 9): 4 5 6 | 8 9 1 | 6 7 8 | 3 4 5 | 6 7 8
    assert result.metrics["alignment_exact"] == pytest.approx((0 + 0 + 0 + 2 / 2 + 1 / 1) / 5)
    for seed in range(10):  # a --users sample draws from the distinct histories too
        sample = generate(NextItem(), split, "ar", 5, 1, Sampler("greedy"), max_users=3, seed=seed).rollouts
        assert len(sample) == 3 and set(sample["target_index"]) <= {0, 3, 4, 6, 8}


def test_steps_a_rollout_cannot_take_are_refused_before_the_first():
    """--exclude rollout allows N steps, all allows N - |set(history)| (the largest history), history allows
    any number unless a history holds the whole catalogue; none any number."""
    from modsar.errors import ModsarError
    from modsar.evaluation.rollouts import generate

    # test histories 1 2 3 4 (4 distinct items) and 1 2 3 2 (3)
    split = LeaveOneOut(np.array([1, 2, 3, 4, 5, 1, 2, 3, 2, 6]), np.array([0, 5, 10]), 9)
    model = NextItem()
    for exclude, steps in (("none", 20), ("history", 20), ("rollout", 9), ("all", 5)):
        assert generate(model, split, "ar", 5, steps, Sampler("greedy"), exclude).metrics["steps"] == steps
    calls = len(model.seen)
    with pytest.raises(
        ModsarError,
        match=r"^--steps 10 is more than a rollout can take with --exclude "
        r"rollout: it never picks an item twice, and the catalogue has 9 items; use --steps 9 "
        r"or fewer, or --exclude none or history$",
    ):
        generate(model, split, "ar", 5, 10, Sampler("greedy"), "rollout")
    with pytest.raises(
        ModsarError,
        match=r"^--steps 6 is more than user 1's rollout can take with --exclude "
        r"all: it never picks an item twice or one of the 4 distinct items of its history, "
        r"which leaves 5 of the 9 items; use --steps 5 or fewer, or --exclude history$",
    ):
        generate(model, split, "ar", 5, 6, Sampler("greedy"), "all")
    assert len(model.seen) == calls  # refused before the first step
    full = LeaveOneOut(np.array([1, 2, 3, 9, 8, 7, 6, 5, 4, 1]), np.array([0, 10]), 9)  # every item seen
    for exclude, also in (("history", ""), ("all", " or rollout")):
        with pytest.raises(
            ModsarError,
            match=rf"^--exclude {exclude} leaves user 1 nothing to pick: the "
            rf"history before its test target holds all 9 items of the catalogue; use "
            rf"--exclude none{also}$",
        ):
            generate(model, full, "ar", 5, 1, Sampler("greedy"), exclude)
    assert len(model.seen) == calls


def test_top_p_is_checked_only_for_nucleus_sampling():
    from modsar.errors import ModsarError

    for strategy in ("greedy", "topk"):
        Sampler(strategy, top_p=5.0).check()
        Sampler(strategy, top_p=0.0).check()
    with pytest.raises(ModsarError, match=r"^--top-p must be in \(0, 1\]; got 1.5$"):
        Sampler("nucleus", top_p=1.5).check()


def test_generate_steps_that_cannot_be_rolled_out_are_refused_before_training():
    """eval.generate_steps with eval.filter_seen=history: a test history holding every item leaves nothing to
    pick, refused with the config's other dataset checks (before a model is built)."""
    from modsar.data.store import StoredDataset
    from modsar.errors import ModsarError

    user = np.repeat(np.arange(1, 4), 4)
    item = np.array([1, 2, 3, 1, 1, 2, 2, 3, 2, 3, 3, 1])  # user 1's test history 1 2 3 is the catalogue
    data = StoredDataset("tiny", user, item, 3, 3, {"max_len": 5})
    over = [
        "model.hidden_size=8",
        "train.max_epochs=1",
        "eval.generate_steps=2",
        "eval.ks=[1]",
        "train.monitor=ndcg@1",
    ]
    with pytest.raises(
        ModsarError,
        match=r"^config: 'eval.generate_steps' rolls out without each test "
        r"history's items \(eval.filter_seen=history\), and user 1's history before its test "
        r"target holds all 3 items: nothing is left to pick; use eval.generate_steps=0 or "
        r"eval.filter_seen=none$",
    ):
        run_trial(load_config(None, [*over, "eval.filter_seen=history"]), data, progress=False)
    result = run_trial(load_config(None, over), data, progress=False)  # picks may repeat the history
    assert result.generation["users"] == 3


@pytest.mark.parametrize("temperature", [1e-39, 1e-300])
@pytest.mark.parametrize("strategy", ["topk", "nucleus"])
def test_a_tiny_temperature_tends_to_greedy(strategy, temperature):
    """Scores are shifted by their row's best before the division, so every other item goes to -inf and the
    best alone is drawn; before, 5 / 1e-39 overflowed float32 to inf (and 1e-300 rounded to 0), and sampling
    died with "probability tensor contains either inf, nan or element < 0"."""
    scores = torch.tensor([[5.0, 4.0, 1.0, -2.0, float("-inf")], [0.0, 3.0, 3.0, 1.0, 2.0]]).repeat(200, 1)
    picks = Sampler(strategy, temperature=temperature).pick(scores, torch.Generator().manual_seed(0))
    assert set(picks[0::2].tolist()) == {0}
    assert set(picks[1::2].tolist()) == {1, 2}  # a tie for the best: either, nothing else


def test_each_setting_is_checked_only_for_the_strategies_that_read_it():
    """Greedy reads neither --top-k nor --temperature (before, --top-k 0 and --temperature 0 were refused for
    it); nucleus does not read --top-k."""
    from modsar.errors import ModsarError

    Sampler("greedy", top_k=0, temperature=0.0).check()
    Sampler("greedy", top_k=-3, temperature=float("nan")).check()
    Sampler("nucleus", top_k=0).check()
    with pytest.raises(ModsarError, match=r"^--top-k must be >= 1; got 0$"):
        Sampler("topk", top_k=0).check()
    for strategy in ("topk", "nucleus"):
        with pytest.raises(ModsarError, match=r"^--temperature must be a positive number; got 0.0$"):
            Sampler(strategy, temperature=0.0).check()


def test_rollouts_are_counted_as_histories_where_a_user_has_several():
    """Under split_targets=every a user has one history per test timestamp: 5 rollouts of 3 users are not "5
    users"; under leave-one-out every user has one history, and the words stay "users"."""
    from modsar.evaluation.rollouts import generate

    assert (
        generate(NextItem(), tied_split(), "ar", 5, 1, Sampler("greedy")).counted()
        == "5 test histories of 3 users"
    )
    split = LeaveOneOut(np.array([1, 2, 3, 4, 5, 6, 7, 2, 3, 4, 8, 9, 5, 6, 7]), np.array([0, 7, 11, 15]), 9)
    assert generate(NextItem(), split, "ar", 5, 1, Sampler("greedy")).counted() == "3 test users"
    one = LeaveOneOut(np.array([1, 2, 3]), np.array([0, 3]), 9)
    assert generate(NextItem(), one, "ar", 5, 1, Sampler("greedy")).counted() == "1 test user"


def test_generate_cli_says_histories_under_split_targets_every(tmp_path, capsys):
    """`modsar generate` on a model trained with data.split_targets=every: 4 users with 2 test timestamps each
    give 8 rollouts, printed as "8 test histories of 4 users" (before: "8 test users"); --help says --users
    samples histories."""
    from modsar.data.store import prepare_dataset

    lines = ["userId,movieId,rating,timestamp"]
    for user in range(1, 5):  # six events a day apart, days 0-5 of 2001; the test cut at day 4
        lines += [f"{user},{(user + day) % 7 + 1},4,{978307200 + 86400 * day}" for day in range(6)]
    (tmp_path / "ratings.csv").write_text("\n".join(lines) + "\n")
    prepare_dataset("daily", sources=[tmp_path / "ratings.csv"], fmt="ml-csv", root=tmp_path / "data")
    cfg = load_config(
        None,
        [
            "model.hidden_size=8",
            "train.max_epochs=1",
            "data.split=temporal",
            "data.split_dates=[2001-01-04,2001-01-05]",
            "data.split_targets=every",
            "eval.ks=[1]",
            "train.monitor=ndcg@1",
            "train.threads=1",
        ],
    )
    cfg.dataset = "daily"
    run_trial(cfg, checkpoint_path=tmp_path / "best.pt", progress=False, data_root=tmp_path / "data")
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                str(tmp_path / "best.pt"),
                "--steps",
                "2",
                "--quiet",
                "--data-dir",
                str(tmp_path / "data"),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith(
        "AR daily (temporal split), greedy rollouts of 2 steps for 8 test histories of 4 users (1.50 true "
        "future items each; the users_* and *_per_user figures count histories):\n"
    )
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "a seeded sample of this many test histories" in " ".join(capsys.readouterr().out.split())


def test_exclude_suggestions_are_never_refused_themselves():
    """On a one-item corpus every history holds the catalogue, so --exclude history is refused: the message
    for --exclude rollout suggests only none (before: "none or history")."""
    from modsar.errors import ModsarError
    from modsar.evaluation.rollouts import generate

    one = LeaveOneOut(np.array([1, 1, 1, 1]), np.array([0, 4]), 1)
    with pytest.raises(
        ModsarError,
        match=r"^--steps 5 is more than a rollout can take with --exclude rollout: it "
        r"never picks an item twice, and the catalogue has 1 item; use --steps 1 or fewer, or "
        r"--exclude none$",
    ):
        generate(NextItem(), one, "ar", 5, 5, Sampler("greedy"), "rollout")
    with pytest.raises(ModsarError, match=r"^--exclude history leaves user 1 nothing to pick"):
        generate(NextItem(), one, "ar", 5, 5, Sampler("greedy"), "history")
