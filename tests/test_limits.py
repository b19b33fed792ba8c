"""Impossible inputs are refused before any work, in one line: Adam's beta2 outside [0, 1), sizes whose
tensors cannot fit in this machine's memory (modsar.memory); and a profile of one symbol or one item is
computed, with null where a measure is undefined, instead of failing."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest

from modsar import memory
from modsar.cli import main
from modsar.config import Config, load_config
from modsar.data.profile import Corpus, profile
from modsar.data.split import make_split
from modsar.data.store import load_dataset
from modsar.errors import ModsarError
from modsar.training.feasible import validate_for_dataset

GIB = 1 << 30


@pytest.fixture
def ram_16gib(monkeypatch):
    """This machine holds 16 GiB, whatever it really has: messages and verdicts are the same anywhere."""
    monkeypatch.setattr(memory, "total_ram", lambda: 16 * GIB)


@pytest.mark.parametrize("value", ["1.0", "1.5", "-0.1"])
def test_adam_beta2_outside_its_range_is_refused(value):
    with pytest.raises(
        ModsarError,
        match=re.escape(
            "config: 'train.beta2' (Adam's second-moment decay) must be in [0, 1), e.g. 0.999 or SASRec's "
            f"0.98; got {float(value)}"
        ),
    ):
        load_config(None, [f"train.beta2={value}"])
    assert load_config(None, ["train.beta2=0.0"]).train.beta2 == 0.0  # torch accepts 0: RMSprop-like


def test_a_space_with_beta2_1_in_its_grid_fails_its_check(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("params:\n  train.beta2: {grid: [0.98, 1.0]}\n")
    assert main(["spaces", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert "1 of 2 configurations are invalid; nothing was run" in err
    assert "train.beta2=1.0: 'train.beta2' (Adam's second-moment decay) must be in [0, 1)" in err


def corpus(sequences: list[list[int]]) -> Corpus:
    items = np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences])
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sequences])]).astype(np.int64)
    return Corpus("test", items, offsets, int(items.max()))


def test_a_profile_of_one_symbol_or_one_item_has_nulls_where_undefined():
    one = profile(corpus([[7]]), max_gap=2, progress=False)
    assert math.isnan(one["zipf_exponent_ols"]) and one["zipf_ols_ranks"] == [1, 1]  # one rank: no slope
    assert one["top1pct_mass"] == 1.0 and one["distinct_items"] == 1
    assert one["unigram_entropy_bits"] == 0.0
    assert math.copysign(1, one["unigram_entropy_bits"]) == 1  # 0.0, not -0.0
    assert all(math.isnan(v) for v in one["permutation_entropy"].values())  # no window of 3 symbols
    assert all(math.isnan(v) for _, v in one["mi_decay_plugin"])  # no pair
    same = profile(corpus([[1, 1, 1, 1], [1, 1, 1]]), max_gap=2, progress=False)  # one item, 7 symbols
    assert math.isnan(same["zipf_exponent_ols"]) and same["unigram_entropy_bits"] == 0.0
    assert same["permutation_entropy"]["3"] == 0.0  # every window has one pattern
    assert same["mi_decay_plugin"] == [[1, 0.0], [2, 0.0]]  # a constant sequence shares nothing with itself


def test_profile_measures_gaps_only_up_to_the_longest_sequence(capsys):
    # --max-gap 10,000,000 computed ten million empty gaps (50 s, then MemoryError); a budget of 12 symbols
    # keeps the first 12 of synthetic's first sequence, so no two symbols are more than 11 apart
    assert np.diff(Corpus.of_dataset(load_dataset("synthetic")).truncated(12).offsets).tolist() == [12]
    assert (
        main(["data", "profile", "synthetic", "--budget", "12", "--json", "--quiet", "--max-gap", "10000000"])
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert [gap for gap, _ in printed["mi_decay"]] == list(range(1, 12))


def test_profile_budget_1_prints_strict_json(capsys):
    assert main(["data", "profile", "synthetic", "--budget", "1", "--json", "--quiet", "--max-gap", "2"]) == 0

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the JSON")

    printed = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert printed["symbols"] == 1 and printed["zipf_exponent_ols"] is None and printed["top1pct_mass"] == 1.0


def test_estimates_by_hand():
    assert memory.size(512) == "512 bytes" and memory.size(728 << 40) == "728.0 TiB"
    assert memory.size(3 * GIB // 2) == "1.5 GiB"
    batch, steps = memory.rollout_needs(steps=10, rollouts=3, batch_size=512, num_items=100)
    assert batch.bytes == 5 * 3 * 100 and not batch.host  # 3 rollouts, one batch: float scores + mask
    assert steps.bytes == 3 * 10 * (10 + 16) and steps.host  # (3, 10, 10) booleans + two (3, 10) int64
    cfg = load_config(None, ["loss.name=bce", "loss.num_negatives=5"])
    (need,) = memory.training_needs(cfg, 300, positions=128)
    assert need.bytes == 128 * 5 * (8 + 4 * 64)  # ids and gathered float vectors, 128 positions x 5
    cfg = load_config(None, ["loss.name=sampled_ce", "loss.num_negatives=5"])
    assert memory.training_needs(cfg, 300, positions=10)[0].bytes == 4 * 10 * 11 + 5 * (8 + 4 * 64)
    cfg = load_config(None, ["loss.fused=false", "model.user_fusion=concat"])
    assert memory.item_width(cfg) == 32  # SSE-PT's user vector takes half of d
    assert memory.training_needs(cfg, 300, positions=128)[0].bytes == 8 * 128 * 300  # logits + log-softmax
    assert (
        memory.training_needs(Config(), 300, positions=128) == []
    )  # the fused CE: a chunk of logits at a time
    assert memory.loo_training_rows({"num_users": 10, "min_length": 4}) == 10
    # 10 users, 40 interactions, at most 12 each: users of 3 or fewer hold <= 30, so >= ceil(10 / 9) = 2 rows
    sizes = {"num_users": 10, "min_length": 2, "max_length": 12, "interactions": 40}
    assert memory.loo_training_rows(sizes) == 2


def test_batch_positions_count_every_labelled_position_of_an_average_batch():
    # training lengths 1 (no row), 3, 5, 11; max_len 4; batch_size 2: three rows
    split = SimpleNamespace(starts=np.array([0, 1, 4, 9]), train_ends=np.array([1, 4, 9, 20]))

    def positions(*overrides):
        return memory.batch_positions(load_config(None, ["data.batch_size=2", *overrides]), split, 4)

    assert (
        positions() == 5
    )  # AR labels min(length - 1, 4): 2 + 4 + 4 = 10 in at most 3 // 2 + 1 token batches
    assert positions("data.batching=random") == positions("data.batching=length") == 5  # ceil(3 / 2) batches
    assert positions("task=ae") == 1  # windows of 3, 5, 5 with round(0.2 x length) >= 1 masks: 3 in 2 batches
    assert positions("data.padding_free=false") == 2 * 4  # dense: every position of 2 rows, 4 wide
    assert positions("data.samples=prefixes") == 2  # 16 prefix rows, each labelled at its last position
    assert memory.batch_positions(load_config(None, []), split, 0) == 3  # window unknown: one a row


def test_the_estimate_never_exceeds_the_largest_batch_trained():
    from modsar.data.batches import TrainBatches

    for overrides in ([], ["data.batching=random"], ["task=ae"], ["data.padding_free=false"]):
        cfg = load_config(None, overrides)
        split = make_split(cfg, load_dataset("synthetic"))
        batches = TrainBatches(
            split,
            cfg.task,
            30,
            cfg.data.batch_size,
            cfg.mask_prob,
            cfg.data.padding_free,
            batching=cfg.data.batching,
        )
        largest = max(
            int((b.labels > 0).sum()) if cfg.data.padding_free else b.labels.numel() for b in batches
        )
        assert cfg.data.batch_size < memory.batch_positions(cfg, split, 30) <= largest, overrides


def test_a_sane_config_passes_and_the_counts_come_from_the_split(ram_16gib):
    cfg = load_config(None, ["eval.generate_steps=10", "loss.name=bce", "loss.num_negatives=100"])
    split = make_split(cfg, load_dataset("synthetic"))
    validate_for_dataset(cfg, split.num_items, "config", split)
    needs = {need.key: need for need in memory.dataset_needs(cfg, split.num_items, split, max_len=30)}
    # every position of a row is labelled: 1,000 rows, 14,919 positions (at most 30 each) in at most
    # 1,000 // 128 + 1 token batches (one chunk of 64 x 128 rows) average 1,864; the largest has more
    assert needs["loss.num_negatives"].bytes == 1864 * 100 * (8 + 4 * 64)
    assert "(1,000 rollouts x 10 x 10 steps)" in needs["eval.generate_steps"].what  # one per test user


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "loss.num_negatives=100000000",
            "config: 'loss.num_negatives=100000000' needs at least 44.8 TiB for "
            "each position's negatives and their item vectors (1,864 positions x 100,000,000 negatives x 64 "
            "floats), more than this machine's 16.0 GiB of RAM; use fewer loss.num_negatives or a smaller "
            "data.batch_size "
            "(or loss.name=sampled_ce, whose negatives the batch shares)",
        ),
        (
            "eval.generate_steps=100000",
            "config: 'eval.generate_steps=100000' needs at least 9.1 TiB for the "
            "rollouts and their comparison with the true future (1,000 rollouts x 100,000 x 100,000 steps), "
            "more than this machine's 16.0 GiB of RAM; use fewer eval.generate_steps",
        ),
        # d = 16384, FFN 4d: 2 layers of qkv 3d^2 + 3d, proj d^2 + d, FFN 8d^2 + 5d, two norms 4d; 302 item
        # and 31 position vectors (max_len 30): 6,448,332,800 parameters, 16 bytes each
        (
            "model.hidden_size=16384",
            "config: the model (modular, model.hidden_size=16384, model.num_layers=2) "
            "needs at least 96.1 GiB for its 6,448,332,800 parameters with their gradients and Adam's two "
            "moments, "
            "more than this machine's 16.0 GiB of RAM; use a smaller model.hidden_size, model.ffn_size, "
            "model.num_layers or data.max_len",
        ),
    ],
)
def test_train_refuses_sizes_that_cannot_fit_before_building_or_training(
    tmp_path, monkeypatch, capsys, ram_16gib, override, message
):
    def never(*args, **kwargs):
        raise AssertionError("the model was built or trained")

    monkeypatch.setattr("modsar.training.trainer.build_model", never)
    monkeypatch.setattr("modsar.training.trainer.train_epoch", never)
    results = tmp_path / "results"
    assert (
        main(["train", "--quiet", "--results", str(results), "train.device=cpu", "loss.name=bce", override])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"modsar: error: {message}") and "\n" not in err
    assert not results.exists() or not any(results.rglob("*.parquet"))  # no row: nothing ran


def test_space_check_with_the_dataset_refuses_what_cannot_fit(tmp_path, capsys, ram_16gib):
    path = tmp_path / "s.yaml"
    path.write_text(
        "base: {train.device: cpu, loss.name: bce}\nparams:\n"
        "  eval.generate_steps: {grid: [0, 10, 100000]}\n"
        "  loss.num_negatives: {grid: [1, 100000000]}\n"
    )
    assert main(["spaces", str(path), "--check", "--dataset", "synthetic"]) == 2
    err = capsys.readouterr().err
    assert "4 of 6 configurations are invalid on dataset synthetic" in err  # the manifest's 1,000 users count
    assert "loss.num_negatives=100000000: 'loss.num_negatives=100000000' needs at least 3.1 TiB" in err
    assert (
        "eval.generate_steps=100000, loss.num_negatives=1: 'eval.generate_steps=100000' needs at least "
        "9.1 TiB"
    ) in err


def test_generate_refuses_steps_that_cannot_fit_before_the_first_step(
    tmp_path, monkeypatch, capsys, ram_16gib
):
    from modsar.training.trainer import build_model, save_checkpoint

    cfg = load_config(None, ["model.hidden_size=8", "model.num_layers=1"])
    data = load_dataset("synthetic")
    checkpoint = tmp_path / "m.pt"
    save_checkpoint(
        checkpoint,
        build_model(cfg, data.num_items, data.num_users, 50),
        cfg,
        {"num_items": data.num_items, "num_users": data.num_users, "max_len": 50},
    )

    def never(*args, **kwargs):
        raise AssertionError("a rollout step ran")

    monkeypatch.setattr("modsar.evaluation.rollouts.rollout", never)
    assert main(["generate", "--checkpoint", str(checkpoint), "--steps", "100000", "--users", "100"]) == 2
    assert capsys.readouterr().err.strip() == (
        "modsar: error: --steps 100000 needs at least 931.5 GiB for the rollouts and their comparison with "
        "the true future (100 rollouts x 100,000 x 100,000 steps), more than this machine's 16.0 GiB of RAM; "
        "use fewer --steps or --users"
    )


def test_cuda_limits_are_the_gpu_memory(monkeypatch):
    """The device's own memory bounds what lives on it (checked here without a GPU: torch.cuda answers as
    one 80 GiB device would)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=80 * GIB))
    monkeypatch.setattr(memory, "total_ram", lambda: 1024 * GIB)
    assert memory.device_memory("auto") == memory.device_memory("cuda:0") == (80 * GIB, "GPU memory (cuda:0)")
    assert memory.device_memory("cuda:1") is None  # not here: resolving the device refuses it
    on_gpu = memory.Need("loss.num_negatives", 1, "x", 100 * GIB, False, "fix")
    in_ram = memory.Need("--steps", 1, "y", 100 * GIB, True, "fix")
    assert memory.problem([in_ram], "cuda") is None  # rollouts' numpy arrays: RAM, 1 TiB here
    assert memory.problem([on_gpu, in_ram], "cuda") == (
        "'loss.num_negatives=1' needs at least 100.0 GiB for x, more than this machine's 80.0 GiB of GPU "
        "memory (cuda:0); fix"
    )
    assert memory.problem([on_gpu], "cpu") is None


def test_sampled_negatives_with_nothing_left_to_draw_are_refused_before_training(monkeypatch):
    """fixed_negatives draws, with replacement, from the items outside the history before a target and the
    target itself: only a user with none left cannot get negatives. Before, `modsar train` trained, then died
    with "RuntimeError: could not draw clean negatives"; now the config is refused before a model is built."""
    from modsar.data.store import StoredDataset
    from modsar.training import trainer as training

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(training, "build_model", no_model)
    over = [
        "model.hidden_size=8",
        "train.max_epochs=1",
        "eval.sampled_negatives=1",
        "eval.ks=[1]",
        "train.monitor=ndcg@1",
    ]
    two = StoredDataset(
        "twoitems", np.ones(6, dtype=np.int64), np.array([1, 2, 1, 2, 1, 2]), 1, 2, {"max_len": 5}
    )
    with pytest.raises(
        ModsarError,
        match=re.escape(
            "config: 'eval.sampled_negatives' draws each target's negatives from the items its user has not "
            "seen, and user 1's history before its validation target, with the target, holds all 2 items: "
            "there is nothing to draw; use eval.sampled_negatives=0 (full ranking)"
        ),
    ):
        training.run_trial(load_config(None, over), two, progress=False)
    # user 1 always has item 3 left; user 2's test history 1 1 1 2 1 and its target 3 hold the catalogue
    three = StoredDataset(
        "threeitems",
        np.repeat([1, 2], 6),
        np.array([1, 2, 1, 2, 1, 2, 1, 1, 1, 2, 1, 3]),
        2,
        3,
        {"max_len": 5},
    )
    with pytest.raises(
        ModsarError,
        match=r"user 2's history before its test target, with the target, holds all "
        r"3 items",
    ):
        training.run_trial(load_config(None, [*over, "eval.sampled_negatives=2"]), three, progress=False)


def test_more_negatives_than_unseen_items_are_drawn_with_replacement():
    """Room for one negative is enough for any count (they repeat), and a user who has seen all but one of
    5,000 items gets that one: before, 1,000 rounds of uniform redraws missed it and raised RuntimeError."""
    from modsar.data.split import LeaveOneOut
    from modsar.evaluation.ranking import fixed_negatives, negative_room
    from modsar.training.feasible import validate_for_dataset

    few = LeaveOneOut(np.array([1, 2, 1, 2, 1, 2]), np.array([0, 6]), 3)
    validate_for_dataset(load_config(None, ["eval.sampled_negatives=2"]), 3, split=few)  # not refused
    users, end, targets = few.targets("valid")
    assert negative_room(few, users, end, targets).tolist() == [1]
    assert fixed_negatives(few, users, end, targets, 2, seed=0).tolist() == [[3, 3]]
    n = 5000
    seen = np.concatenate([np.arange(1, 778), np.arange(779, n + 1), [1, 2]])  # every item but 778, then 1 2
    many = LeaveOneOut(np.concatenate([seen, [5, 6, 7, 8]]), np.array([0, len(seen), len(seen) + 4]), n)
    users, end, targets = many.targets("test")
    assert negative_room(many, users, end, targets).tolist() == [1, n - 4]
    drawn = fixed_negatives(many, users, end, targets, 20, seed=0)
    assert drawn[0].tolist() == [778] * 20
    assert not np.isin(drawn[1], [5, 6, 7, 8]).any() and drawn[1].min() >= 1 and drawn[1].max() <= n
