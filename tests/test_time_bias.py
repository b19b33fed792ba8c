"""model.time_bias (data-first paper §3): attention biased by the time between query and key, or by the
session boundaries between them. Buckets by hand, the bias as the only score, a query's time is its own item's
(never the target's), AE masks hide their own times, times are relative, refusals without timestamps.

Future leak, bidirectionality and padding invariance of the time variants are in test_model.py (VARIANTS).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from modsar.config import ModelConfig, load_config
from modsar.data.batches import TrainBatches, eval_times
from modsar.data.split import LeaveOneOut
from modsar.errors import ModsarError
from modsar.model.modular import GAP_BUCKETS, SESSION_BUCKETS, ModularSAR, time_buckets

HOUR = 3600.0


def test_gap_buckets_by_hand():
    """Under a minute -> 0, then 1 + floor(log2(gap / 60 s)): [1, 2) min -> 1, [2, 4) -> 2, ...; capped."""
    times = torch.tensor([[0.0, 30.0, 90.0, 200.0, 4000.0, 1e9]])
    b = time_buckets(times, "gap", 1800.0, prefix=0)[0]
    assert b[0].tolist() == [0, 0, 1, 2, 7, GAP_BUCKETS - 1]  # 4000 s = 66.7 min: log2 6.06 -> 7
    assert torch.equal(b, b.T)  # |t_q - t_k|: symmetric
    assert b[2, 3] == 1 and b[3, 4] == 6  # 110 s; 3800 s = 63.3 min: log2 5.98 -> 6


def test_session_buckets_count_pauses_between_items():
    """Pauses longer than session_gap between consecutive items start sessions; a key's bucket is how many lie
    between it and the query, whatever the order; a user token gets the extra bucket."""
    times = torch.tensor([[0.0, 60.0, 2 * HOUR, 2 * HOUR + 10, 9 * HOUR, 30 * HOUR]])
    b = time_buckets(times, "session", 1800.0, prefix=0)[0]
    assert b[5].tolist() == [3, 3, 2, 2, 1, 0] and b[0].tolist() == [0, 0, 1, 1, 2, 3]
    many = torch.arange(40.0)[None, :] * HOUR  # a pause before every item
    assert time_buckets(many, "session", 1800.0, 0)[0, -1, 0] == SESSION_BUCKETS - 1
    with_user = time_buckets(times, "session", 1800.0, prefix=1)[0]
    assert (with_user[0] == SESSION_BUCKETS).all() and (with_user[:, 0] == SESSION_BUCKETS).all()
    assert torch.equal(with_user[1:, 1:], b)


def biased_only(task: str, kind: str) -> ModularSAR:
    """One layer, one head, q = k = 0: the attention probabilities are the softmax of the time bias alone;
    bucket b of the table is worth b / 8 (gap), times the table's scale sqrt(d), so the query prefers far
    keys."""
    cfg = ModelConfig(hidden_size=8, num_layers=1, num_heads=1, dropout=0.0, attn_dropout=0.0, time_bias=kind)
    model = ModularSAR(cfg, 20, 3, 10, task).eval()
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight[:16].zero_()
        model.blocks[0].attn.qkv.bias[:16].zero_()
        model.time_tables[0].weight.copy_(
            torch.arange(len(model.time_tables[0].weight), dtype=torch.float)[:, None] / 8
        )
    return model


@pytest.mark.parametrize("task", ["ar", "ae"])
def test_the_bias_is_the_score_the_table_names(task):
    x = torch.tensor([[0, 3, 4, 5, 6]])
    times = torch.tensor([[0.0, -5000.0, -200.0, -90.0, 0.0]])  # 83 min, 3.3 min, 1.5 min, 0 before the last
    model = biased_only(task, "gap")
    _, maps = model(x, None, need_weights=True, times=times)
    buckets = time_buckets(times, "gap", 1800.0, 0)[0].float()
    for i in range(1, 5):
        keys = list(range(1, i + 1)) if task == "ar" else [1, 2, 3, 4]
        expected = torch.softmax(buckets[i, keys] / 8 * model.time_scale, 0)  # the table is scaled by sqrt(d)
        torch.testing.assert_close(maps[0][0, 0, i, keys], expected)
    # the SDPA path (no maps) gives the states the explicit path gives
    torch.testing.assert_close(model(x, None, times=times), model(x, None, need_weights=True, times=times)[0])


def test_times_are_relative_and_a_later_time_never_reaches_an_earlier_ar_state():
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=16, num_heads=2, dropout=0.0, attn_dropout=0.0, time_bias="gap")
    model = ModularSAR(cfg, 20, 3, 10, "ar").eval()
    for table in model.time_tables:
        torch.nn.init.normal_(table.weight, std=2.0)
    x = torch.tensor([[3, 4, 5, 6, 7, 8]])
    times = torch.tensor([[-9e4, -8e4, -500.0, -400.0, -30.0, 0.0]])
    base = model(x, None, times=times)
    torch.testing.assert_close(model(x, None, times=times + 86400.0), base)  # only differences count
    later = times.clone()
    later[0, 4:] -= 7200.0  # the last two items happened two hours earlier
    moved = model(x, None, times=later)
    torch.testing.assert_close(moved[:, :4], base[:, :4], rtol=0, atol=1e-6)
    assert (moved[:, 4:] - base[:, 4:]).abs().max() > 1e-3


def timed_split() -> LeaveOneOut:
    # user 1: items 1..6 at t = 0, 10, 100, 1000, 5000, 9000; user 2: items 7, 8, 9 at t = 50, 60, 70
    user = np.array([1] * 6 + [2] * 3)
    item = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9])
    time = np.array([0, 10, 100, 1000, 5000, 9000, 50, 60, 70], dtype=float)
    return LeaveOneOut.from_log(user, item, 2, 9, time)


def test_ar_training_times_are_the_inputs_own():
    """Position t reads item t and predicts item t + 1: its time is item t's, never the target's."""
    batch = next(iter(TrainBatches(timed_split(), "ar", 10, 8, times=True, padding_free=False)))
    row = int(torch.nonzero(batch.users == 1)[0])
    assert batch.inputs[row, -3:].tolist() == [1, 2, 3] and batch.labels[row, -1] == 4  # train: items 1..4
    assert batch.times[row, -3:].tolist() == [-100.0, -90.0, 0.0]  # relative to item 3 (t = 100), not item 4
    assert (batch.times[row, :-3] == 0).all()


def test_ae_masks_hide_their_own_times():
    """A masked slot reads the time of the nearest unmasked item before it (after it, if none is before)."""
    split = timed_split()
    batches = TrainBatches(split, "ae", 10, 8, mask_prob=0.5, times=True, padding_free=False, seed=3)
    mask_token = split.num_items + 1
    checked = 0
    for _ in range(20):
        for batch in batches:
            for row in range(len(batch.users)):
                real = batch.labels[row] + batch.inputs[row] * (batch.inputs[row] != mask_token) > 0
                items = torch.where(batch.inputs[row] == mask_token, batch.labels[row], batch.inputs[row])[
                    real
                ]
                clear = (batch.inputs[row] != mask_token)[real]
                true = split.timestamp[items.numpy() - 1]  # item i sits at log position i - 1 here
                if not clear.any():
                    assert (batch.times[row][real] == 0).all()
                    continue
                source = [max([j for j in range(k + 1) if clear[j]], default=None) for k in range(len(items))]
                source = [s if s is not None else int(np.flatnonzero(clear.numpy())[0]) for s in source]
                expected = true[source] - true[source[-1]]
                assert batch.times[row][real].tolist() == expected.tolist()
                checked += int((~clear).sum())
    assert checked > 20


def test_eval_times_end_at_the_history_and_ae_masks_take_the_last_items_time():
    split = timed_split()
    users, end, _ = split.targets("test")  # user 1: history items 1..5, target 6 at t = 9000
    ar = eval_times(split, users, end, "ar", 4)
    assert ar[0].tolist() == [-4990.0, -4900.0, -4000.0, 0.0]  # items 2..5, relative to item 5 (t = 5000)
    split.timestamp[end[0]] = 1e12  # the target's own time is never read
    assert torch.equal(eval_times(split, users, end, "ar", 4), ar)
    ae = eval_times(split, users, end, "ae", 4)
    assert ae.shape == (2, 5) and ae[0].tolist() == [-4990.0, -4900.0, -4000.0, 0.0, 0.0]


def test_time_bias_is_refused_where_it_cannot_hold():
    from modsar.training.trainer import run_trial

    with pytest.raises(
        ModsarError, match=r"'model\.time_bias=gap' is an attention bias of the modular backbone"
    ):
        load_config(None, ["model.backbone=gru4rec", "model.time_bias=gap"])
    with pytest.raises(ModsarError, match=r"'model\.session_gap' must be > 0 seconds"):
        load_config(None, ["model.time_bias=session", "model.session_gap=0"])
    cfg = load_config(None, ["model.time_bias=session", "train.max_epochs=1"])
    cfg.dataset = "synthetic"
    with pytest.raises(
        ModsarError, match=r"model\.time_bias=session needs timestamps, and dataset 'synthetic' has none"
    ):
        run_trial(cfg, progress=False)
    model = ModularSAR(ModelConfig(time_bias="gap"), 10, 2, 5, "ar")
    with pytest.raises(ValueError, match="needs the inputs' times"):
        model(torch.tensor([[1, 2]]))
    assert math.isfinite(
        float(model(torch.tensor([[1, 2]]), times=torch.tensor([[-5.0, 0.0]])).detach().sum())
    )


@pytest.mark.parametrize("init", ["sasrec_plus", "normal", "xavier", "xavier_uniform", "xavier_attention"])
def test_time_tables_start_at_zero_under_every_init(init):
    """Training starts from the plain model whatever init the rest gets (xavier re-initialises every
    Embedding)."""
    model = ModularSAR(ModelConfig(time_bias="gap", init=init), 10, 2, 5, "ar")
    assert all(float(table.weight.detach().abs().max()) == 0.0 for table in model.time_tables)


def test_evaluating_a_timed_model_without_timestamps_is_one_clear_error():
    split = timed_split()
    split.timestamp = None
    users, end, _ = split.targets("test")
    with pytest.raises(
        ModsarError,
        match=r"reads timestamps \(model\.time_bias\), and the dataset it is evaluated on has none",
    ):
        eval_times(split, users, end, "ar", 4)


@pytest.fixture(scope="module")
def timed_checkpoint(tmp_path_factory):
    """A session-bias AR model briefly trained on a generated timestamped MovieLens-format log (60 users,
    sessions of 3-6 items an hour to a week apart) with rollouts in its rows."""
    from modsar.data.store import prepare_dataset
    from modsar.training.trainer import run_trial

    root = tmp_path_factory.mktemp("timed")
    rng = np.random.default_rng(0)
    lines = ["userId,movieId,rating,timestamp"]
    for user in range(1, 61):
        t = 1.6e9 + rng.integers(0, 1e6)
        for _ in range(3):
            for _ in range(rng.integers(3, 7)):
                t += rng.integers(10, 600)
                lines.append(f"{user},{rng.integers(1, 41)},4,{int(t)}")
            t += rng.integers(3600, 7 * 86400)
    (root / "ratings.csv").write_text("\n".join(lines) + "\n")
    prepare_dataset("timed", sources=[root / "ratings.csv"], fmt="ml-csv", root=root / "data")
    cfg = load_config(
        None,
        [
            "model.time_bias=session",
            "model.num_heads=2",
            "model.hidden_size=16",
            "train.max_epochs=3",
            "train.patience=0",
            "eval.generate_steps=2",
            "train.threads=1",
        ],
    )
    cfg.dataset = "timed"
    result = run_trial(cfg, checkpoint_path=root / "best.pt", progress=False, data_root=root / "data")
    return root, result


def shaken(model: ModularSAR) -> ModularSAR:
    """The model with its time tables drawn N(0, 2): a few training steps move them too little for checks to
    bite."""
    torch.manual_seed(4)
    for table in model.time_tables:
        torch.nn.init.normal_(table.weight, std=2.0)
    return model


def test_a_timed_model_trains_evaluates_and_generates_with_its_times(timed_checkpoint):
    """The run records metrics and rollouts; the evaluator ranks every validation target exactly as
    model(history, times=eval_times(history)) ranks it by hand, in batches of 7 (trimmed differently), and the
    times matter: all-zero times rank differently."""
    from modsar.data.batches import eval_inputs
    from modsar.evaluation.ranking import model_scorer, target_ranks
    from modsar.training.checkpoints import checkpoint_split, load_checkpoint

    root, result = timed_checkpoint
    assert result.generation["distinct_ratio"] > 0 and set(result.test) >= {"ndcg@10"}
    model, cfg, payload = load_checkpoint(root / "best.pt")
    model = shaken(model)
    split = checkpoint_split(cfg, str(root / "data"))
    users, end, target = split.targets("valid")
    max_len = payload["max_len"]

    def by_hand(times: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            scores = model.score(
                model(
                    eval_inputs(split, users, end, "ar", max_len), torch.from_numpy(users + 1), times=times
                )[:, -1]
            )
        own = scores.gather(1, torch.from_numpy(target - 1)[:, None])
        return (scores >= own).sum(1) - 1  # ties count against the target

    times = eval_times(split, users, end, "ar", max_len)
    evaluated = target_ranks(
        model_scorer(model),
        split,
        "valid",
        cfg.eval,
        "ar",
        max_len,
        7,
        torch.device("cpu"),
        in_order=True,
        timed=True,
    )
    assert torch.equal(evaluated, by_hand(times))
    assert not torch.equal(by_hand(torch.zeros_like(times)), by_hand(times))


@pytest.mark.parametrize("task", ["ar", "ae"])
def test_timed_rollouts_give_each_pick_the_last_history_time(task):
    """Greedy rollouts equal a manual loop in which every generated item joins the window with the time of the
    last history item (AE: a mask token with that time follows the window), and the model is passed exactly
    those times at every step."""
    from modsar.evaluation.rollouts import Sampler, rollout

    torch.manual_seed(0)
    model = shaken(
        ModularSAR(
            ModelConfig(hidden_size=16, num_heads=2, dropout=0.0, attn_dropout=0.0, time_bias="gap"),
            20,
            3,
            6,
            task,
        ).eval()
    )
    windows = torch.tensor([[0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 7, 8]])
    times = torch.tensor(
        [[0.0, 0, -9e4, -500, -90, 0], [-4e5, -3e5, -2e5, -6e3, -70, 0], [0, 0, 0, 0, -1e3, 0]]
    )
    users = torch.tensor([1, 2, 3])
    seen_times: list[torch.Tensor] = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: seen_times.append(kwargs["times"].clone()), with_kwargs=True
    )
    got = rollout(
        model, task, windows, users, 4, Sampler("greedy"), mask_id=21, times=times, exclude_rollout=True
    )
    hook.remove()
    window, clock = windows.clone(), times.clone()
    banned = torch.zeros(3, 20, dtype=torch.bool)
    for step in range(4):
        inputs, when = window, clock
        if task == "ae":
            inputs = torch.cat([inputs, torch.full((3, 1), 21)], 1)
            when = torch.cat([when, torch.zeros(3, 1)], 1)
        with torch.no_grad():
            scores = model.score(model(inputs, users, times=when)[:, -1]).masked_fill(banned, float("-inf"))
        pick = scores.argmax(1) + 1
        banned[torch.arange(3), pick - 1] = True
        assert got[:, step].tolist() == pick.tolist()
        assert torch.equal(seen_times[step], when[:, -seen_times[step].size(1) :])  # what the rollout passed
        window = torch.cat([window[:, 1:], pick[:, None]], 1)
        clock = torch.cat([clock[:, 1:], torch.zeros(3, 1)], 1)  # relative to the last history item: 0


def test_modsar_generate_runs_on_a_timed_checkpoint(timed_checkpoint, capsys):
    import json

    from modsar.cli import main

    root, _ = timed_checkpoint
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                str(root / "best.pt"),
                "--steps",
                "2",
                "--json",
                "--data-dir",
                str(root / "data"),
                "--out",
                str(root / "gen"),
            ]
        )
        == 0
    )
    facts = json.loads(capsys.readouterr().out)
    assert {"alignment_hits", "distinct_ratio", "entropy_generated", "top1pct_share_generated"} <= set(facts)


def test_analyze_refuses_a_timed_checkpoint(timed_checkpoint):
    from modsar.analysis.analyze import run

    root, _ = timed_checkpoint
    with pytest.raises(ModsarError, match=r"refuses a model\.time_bias=session checkpoint"):
        run(root / "best.pt", ["hrli"], data_dir=str(root / "data"))
    from modsar.cli import main

    assert main(["analyze", "--checkpoint", str(root / "best.pt"), "--data-dir", str(root / "data")]) == 2


def test_an_ae_timed_model_trains_and_the_time_space_checks_on_timestamped_data(timed_checkpoint, capsys):
    """AE with a gap bias runs end to end (masks with borrowed times, the appended mask at evaluation and in
    rollouts), and the bluesky_time space is accepted on a dataset with timestamps."""
    from modsar.cli import main
    from modsar.training.trainer import run_trial

    root, _ = timed_checkpoint
    cfg = load_config(
        None,
        [
            "task=ae",
            "model.time_bias=gap",
            "model.num_heads=2",
            "model.hidden_size=16",
            "train.max_epochs=2",
            "train.patience=0",
            "eval.generate_steps=2",
            "train.threads=1",
        ],
    )
    cfg.dataset = "timed"
    result = run_trial(cfg, progress=False, data_root=root / "data")
    assert math.isfinite(result.test["ndcg@10"]) and result.generation["distinct_ratio"] > 0
    assert (
        main(["spaces", "bluesky_time", "--check", "--dataset", "timed", "--data-dir", str(root / "data")])
        == 0
    )
    assert "all 12 configurations are valid on dataset timed" in capsys.readouterr().out
