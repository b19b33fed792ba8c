"""Losses, training, checkpoints, determinism and the `modsar train` command on synthetic data."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from modsar.cli import main
from modsar.config import Config, LossConfig, load_config
from modsar.data.batches import TrainBatches
from modsar.data.split import LeaveOneOut
from modsar.data.store import load_dataset
from modsar.evaluation.ranking import evaluate, model_scorer, popularity_scorer
from modsar.model.losses import training_loss
from modsar.model.modular import ModularSAR
from modsar.training.checkpoints import load_checkpoint
from modsar.training.optim import decay_groups
from modsar.training.trainer import (
    TrainingDiverged,
    batch_loss,
    make_optimizer,
    run_trial,
)


def quick(*overrides: str) -> Config:
    return load_config(
        None,
        ["train.max_epochs=3", "train.patience=0", "data.batch_size=64", "model.hidden_size=32", *overrides],
    )


@pytest.mark.parametrize("padding_free", [True, False])
@pytest.mark.parametrize("loss", ["ce", "sampled_ce", "bce", "bpr", "gbce"])
def test_every_loss_lowers_on_synthetic(loss, padding_free):
    cfg = quick(f"loss.name={loss}", "loss.num_negatives=16", f"data.padding_free={padding_free}")
    data = load_dataset("synthetic")
    split = LeaveOneOut.from_log(data.user, data.item, data.num_users, data.num_items)
    torch.manual_seed(0)
    model = ModularSAR(cfg.model, data.num_items, data.num_users, 20, "ar")
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch = next(iter(TrainBatches(split, "ar", 20, 256, padding_free=padding_free)))
    losses = []
    for _ in range(30):
        loss_value = training_loss(
            model, model(batch.inputs, batch.users), batch.labels, batch.users, cfg.loss, padding_free
        )
        opt.zero_grad()
        loss_value.backward()
        opt.step()
        losses.append(loss_value.item())
    assert losses[-1] < 0.8 * losses[0]


def test_padding_free_and_dense_losses_agree():
    data = load_dataset("synthetic")
    split = LeaveOneOut.from_log(data.user, data.item, data.num_users, data.num_items)
    model = ModularSAR(Config().model, data.num_items, data.num_users, 20, "ar").eval()
    batch = next(iter(TrainBatches(split, "ar", 20, 128, padding_free=False)))
    hidden = model(batch.inputs, batch.users)
    sparse = training_loss(model, hidden, batch.labels, batch.users, LossConfig("ce"), padding_free=True)
    dense = training_loss(model, hidden, batch.labels, batch.users, LossConfig("ce"), padding_free=False)
    torch.testing.assert_close(sparse, dense)


def test_ar_with_ce_beats_popularity_by_a_wide_margin():
    cfg = load_config(None, ["train.max_epochs=12", "train.eval_every=4", "seed=1"])
    result = run_trial(cfg, progress=False)
    data = load_dataset("synthetic")
    split = LeaveOneOut.from_log(data.user, data.item, data.num_users, data.num_items)
    pop = evaluate(
        popularity_scorer(split, torch.device("cpu")),
        split,
        "test",
        cfg.eval,
        "ar",
        30,
        256,
        torch.device("cpu"),
    )
    assert result.test["ndcg@10"] > 0.4
    assert result.test["ndcg@10"] > 4 * pop["ndcg@10"]


def test_same_seed_same_metrics_and_checkpoint_reproduces_test(tmp_path):
    cfg = quick("seed=7", "task=ae", "train.eval_every=1")
    ckpt = tmp_path / "best.pt"
    calls = []
    first = run_trial(
        cfg,
        on_eval=lambda e, m, imp, c, f: calls.append((e, imp, c, f["last"])),
        checkpoint_path=ckpt,
        progress=False,
    )
    second = run_trial(cfg, progress=False)
    assert first.test == second.test and first.valid == second.valid
    assert [c[0] for c in calls] == [1, 2, 3] and calls[0][1] and calls[0][2] == ckpt
    assert [c[3] for c in calls] == [False, False, True]
    model, loaded_cfg, payload = load_checkpoint(ckpt)
    assert (
        loaded_cfg.flat() == cfg.flat() and payload["epoch"] == first.best_epoch
    )  # stored form: norm resolved
    data = load_dataset("synthetic")
    split = LeaveOneOut.from_log(data.user, data.item, data.num_users, data.num_items)
    test = evaluate(
        model_scorer(model), split, "test", cfg.eval, "ae", payload["max_len"], 256, torch.device("cpu")
    )
    assert test == pytest.approx(first.test)


@pytest.mark.parametrize("schedule", [[], ["train.warmup_steps=20", "train.lr_schedule=linear"]])
def test_resumed_trial_continues_exactly_as_the_uninterrupted_one(tmp_path, schedule):
    """A search trial killed mid-run restarts from its last validation pass (Tune restores it on --resume or a
    retry): weights, optimizer, RNG, mask draws, patience and the step count (hence the learning-rate
    schedule) restored, it must reproduce the uninterrupted run bit for bit, the best epoch's weights kept."""
    from modsar.training.state import load_resume_state

    class Killed(Exception):
        pass

    settings = ("seed=3", "task=ae", "model.dropout=0.3", "train.lr=0.01", "train.patience=2", *schedule)
    cfg = quick(*settings, "train.max_epochs=14")
    whole = run_trial(cfg, checkpoint_path=tmp_path / "whole" / "best.pt", resumable=True, progress=False)
    valid = [
        {k.removeprefix("valid."): v for k, v in h.items() if k.startswith("valid.")} for h in whole.history
    ]
    best, last = whole.best_epoch, whole.epochs_run
    assert last == best + 2 < 14  # two passes without an improvement ended it, on patience

    def kill_at(epoch_killed):
        def on_eval(epoch, metrics, improved, checkpoint, facts):
            if epoch == epoch_killed:
                raise Killed

        return on_eval

    def cut(epoch: int) -> Path:
        with pytest.raises(Killed):
            folder = tmp_path / f"cut{epoch}"
            run_trial(
                cfg,
                on_eval=kill_at(epoch),
                checkpoint_path=folder / "best.pt",
                resumable=True,
                progress=False,
            )
        return folder

    state = load_resume_state(cut(best + 1))
    assert (state["last_epoch"], state["epoch"], state["stale"]) == (best + 1, best, 1)
    assert [h["epoch"] for h in state["history"]] == list(range(1, best + 2))
    calls = []
    resumed = run_trial(cfg, resume=state, on_eval=lambda e, m, imp, c, f: calls.append(e), progress=False)
    assert calls == [last]  # nothing trained twice, and patience went on counting from the pass it was at
    assert resumed.history == whole.history  # losses and every validation metric, exactly
    assert (resumed.best_epoch, resumed.valid, resumed.test) == (whole.best_epoch, whole.valid, whole.test)
    assert load_resume_state(tmp_path / "nothing") is None

    # a resume file from before the state was written at every pass was written at a best epoch only: the
    # run continues from there, and still reproduces the whole run
    old = {
        k: v for k, v in load_resume_state(cut(best)).items() if k not in ("weights", "last_epoch", "stale")
    }
    calls.clear()
    resumed = run_trial(cfg, resume=old, on_eval=lambda e, m, imp, c, f: calls.append(e), progress=False)
    assert calls == list(range(best + 1, last + 1))
    assert resumed.history == whole.history and resumed.test == whole.test

    # resumed at the pass that ended it (killed before Tune heard it ended): one closing report with that
    # pass, nothing retrained; whether patience ended it, its last epoch, or its step budget
    cut_at = tmp_path / f"cut{best + 1}"
    ended_by = {
        "patience": (cfg, tmp_path / "whole", last),
        "its last epoch": (quick(*settings, f"train.max_epochs={best + 1}"), cut_at, best + 1),
        "its step budget": (
            quick(*settings, "train.max_epochs=14", f"train.max_steps={state['steps']}"),
            cut_at,
            best + 1,
        ),
    }
    closing: list[tuple] = []
    for why, (config, folder, ended) in ended_by.items():
        closing.clear()
        again = run_trial(
            config,
            resume=load_resume_state(folder),
            progress=False,
            on_eval=lambda e, m, imp, c, f: closing.append((e, m, imp, f["last"])),
        )
        assert closing == [(ended, valid[ended - 1], False, True)], why
        assert again.history == whole.history[:ended] and again.valid == whole.valid, why
    # the time facts of the resumed run add its own to those its resume state carried
    assert again.setup_s > state["times"]["setup_s"] > 0 and again.passes == best + 1


def test_a_restored_trial_reports_folders_that_hold_its_best_epoch(tmp_path):
    """Tune restores a trial from a checkpoint folder; the trial trains in a fresh folder of its own. Its
    first pass after the resume does not improve, and the folder it reports then must still hold best.pt (the
    row's checkpoint, and the next retry, read it)."""
    from ray import tune

    from modsar.sweep.trial import restore_into
    from modsar.training.state import load_resume_state

    class Killed(Exception):
        pass

    def kill_at_5(epoch, metrics, improved, checkpoint, facts):
        if epoch == 5:
            raise Killed

    cfg = quick(
        "seed=3", "task=ae", "model.dropout=0.3", "train.lr=0.01", "train.patience=2", "train.max_epochs=14"
    )
    with pytest.raises(Killed):
        run_trial(
            cfg,
            on_eval=kill_at_5,
            checkpoint_path=tmp_path / "cut" / "best.pt",
            resumable=True,
            progress=False,
        )
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert restore_into(None, fresh) is None and not any(fresh.iterdir())
    resume = restore_into(tune.Checkpoint.from_directory(str(tmp_path / "cut")), fresh)
    reported = []
    run_trial(
        cfg,
        resume=resume,
        checkpoint_path=fresh / "best.pt",
        resumable=True,
        progress=False,
        on_eval=lambda e, m, imp, c, f: reported.append((e, imp, sorted(p.name for p in c.parent.iterdir()))),
    )
    assert reported == [(6, False, ["best.pt", "resume.pt"])]
    again = load_resume_state(fresh)
    assert (again["epoch"], again["last_epoch"]) == (4, 6)


def test_best_epoch_is_the_validation_max_not_the_last(monkeypatch):
    import modsar.training.trainer as train_module

    monkeypatch.setattr(train_module, "popularity_level", lambda *a: 0.05)  # fakes validation passes only
    values = iter([0.2, 0.5, 0.3, 0.1])
    monkeypatch.setattr(
        train_module.Evaluator, "__call__", lambda *a, **k: {"ndcg@10": next(values, 0.0), "recall@10": 0.0}
    )
    cfg = quick("train.max_epochs=4", "eval.ks=[10]")
    result = run_trial(cfg, progress=False)
    assert result.best_epoch == 2 and result.valid["ndcg@10"] == 0.5


def test_early_stopping_patience(monkeypatch):
    import modsar.training.trainer as train_module

    monkeypatch.setattr(train_module, "popularity_level", lambda *a: 0.05)  # fakes validation passes only
    monkeypatch.setattr(
        train_module.Evaluator, "__call__", lambda *a, **k: {"ndcg@10": 0.1, "recall@10": 0.0}
    )
    result = run_trial(quick("train.max_epochs=50", "train.patience=2", "eval.ks=[10]"), progress=False)
    assert result.epochs_run == 3 and result.best_epoch == 1


def test_nan_loss_raises_training_diverged(monkeypatch):
    import modsar.training.trainer as train_module

    monkeypatch.setattr(
        train_module, "training_loss", lambda *a, **k: torch.tensor(float("nan"), requires_grad=True)
    )
    with pytest.raises(TrainingDiverged, match="loss became nan"):
        run_trial(quick(), progress=False)


def test_cli_train_writes_result_row(tmp_path, capsys):
    out = tmp_path / "results"
    code = main(
        [
            "train",
            "--dataset",
            "synthetic",
            "--quiet",
            "--results",
            str(out),
            "--experiment",
            "e1",
            "train.max_epochs=2",
            "task=ae",
            "mask_prob=0.3",
            "model.hidden_size=16",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0 and "AE on synthetic" in text and "test" in text
    files = list((out / "e1" / "trials").glob("*.parquet"))
    assert len(files) == 1 and not list((out / "e1" / "trials").glob(".tmp*"))
    row = pq.read_table(files[0]).to_pylist()[0]
    assert row["status"] == "finished" and row["task"] == "ae" and row["mask_prob"] == 0.3
    assert row["model.hidden_size"] == 16 and row["eval.filter_seen"] == "none"
    assert 0 <= row["test.ndcg@10"] <= 1 and row["best_epoch"] in (1, 2)
    assert "torch" in json.loads(row["versions"])
    assert (out / "e1" / "checkpoints").is_dir()


def _nan_weights_in_epoch(monkeypatch, bad_epoch: int) -> None:
    """Epoch `bad_epoch` ends with NaN weights after a finite loss (the last optimizer step blew up)."""
    import modsar.training.trainer as train_module

    real = train_module.train_epoch

    def epoch_then_nan(model, optimizer, batches, cfg, device, epoch=0, rate=None):
        loss = real(model, optimizer, batches, cfg, device, epoch, rate)
        if epoch == bad_epoch:
            with torch.no_grad():
                next(model.parameters()).fill_(float("nan"))
        return loss

    monkeypatch.setattr(train_module, "train_epoch", epoch_then_nan)


def test_nan_weights_before_validation_end_the_trial_with_the_best_so_far(monkeypatch, tmp_path):
    _nan_weights_in_epoch(monkeypatch, bad_epoch=2)
    with pytest.raises(TrainingDiverged, match="weights became NaN or infinite in epoch 2") as caught:
        run_trial(quick(), progress=False, checkpoint_path=tmp_path / "best.pt")
    partial = caught.value.partial
    assert partial.best_epoch == 1 and partial.epochs_run == 2 and partial.test == {}
    assert [h["epoch"] for h in partial.history] == [1]  # the NaN epoch was never validated
    assert all(torch.isfinite(v).all() for v in torch.load(tmp_path / "best.pt")["state_dict"].values())


def test_non_finite_validation_metric_is_never_the_best_epoch(monkeypatch):
    import modsar.training.trainer as train_module

    monkeypatch.setattr(train_module, "popularity_level", lambda *a: 0.05)  # fakes validation passes only
    values = iter([0.1, float("inf")])
    monkeypatch.setattr(
        train_module.Evaluator, "__call__", lambda *a, **k: {"ndcg@10": next(values), "recall@10": 0.0}
    )
    with pytest.raises(TrainingDiverged, match="validation ndcg@10 not finite at epoch 2") as caught:
        run_trial(quick("eval.ks=[10]"), progress=False)
    assert caught.value.partial.best_epoch == 1 and caught.value.partial.valid["ndcg@10"] == 0.1


def test_cli_train_writes_a_diverged_row(monkeypatch, tmp_path, capsys):
    _nan_weights_in_epoch(monkeypatch, bad_epoch=2)
    out = tmp_path / "results"
    code = main(
        [
            "train",
            "--dataset",
            "synthetic",
            "--quiet",
            "--results",
            str(out),
            "--experiment",
            "d",
            "train.max_epochs=3",
            "model.hidden_size=16",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "training diverged: weights became NaN" in err[0], err
    row = pq.read_table(next((out / "d" / "trials").glob("*.parquet"))).to_pylist()[0]
    assert row["status"] == "diverged" and "epoch 2" in row["error"]
    assert row["best_epoch"] == 1 and 0 < row["valid.ndcg@10"] <= 1 and "test.ndcg@10" not in row


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "adamw_bert"])
def test_an_overflowing_optimizer_step_is_divergence_not_a_crash(optimizer):
    with pytest.raises(TrainingDiverged, match=r"loss became nan at epoch 1; lower train\.lr"):
        run_trial(quick("train.lr=3e38", f"train.optimizer={optimizer}"), progress=False)


def test_more_sampled_negatives_than_items_is_refused():
    from modsar.errors import ModsarError

    with pytest.raises(
        ModsarError, match=r"'eval.sampled_negatives' \(300\) must be below the number of items"
    ):
        run_trial(quick("eval.sampled_negatives=300"), progress=False)


def test_weight_decay_skips_norms_and_biases_and_optionally_embeddings():
    cfg = load_config(None, ["model.head=bert4rec", "model.embedding_norm=true"])
    model = ModularSAR(cfg.model, 30, 5, 10, "ar")
    names = {id(p): n for n, p in model.named_parameters()}
    decayed, kept = decay_groups(model, "norm,bias")
    kept_names = {names[id(p)] for p in kept}
    assert kept_names == {
        n for n, _ in model.named_parameters() if n.endswith("bias") or "norm" in n
    }  # LayerNorm gains, Linear biases, the item bias
    assert "head.item_bias" in kept_names and "embed_norm.weight" in kept_names
    assert {names[id(p)] for p in decayed} >= {
        "item_emb.weight",
        "pos_emb.weight",
        "blocks.0.attn.qkv.weight",
    }
    _, kept = decay_groups(model, "norm,bias,embedding")
    assert {"item_emb.weight", "pos_emb.weight"} <= {names[id(p)] for p in kept}
    decayed, kept = decay_groups(model, "none")
    assert not kept and len(decayed) == len(list(model.parameters()))
    optimizer = make_optimizer(model, load_config(None, ["train.optimizer=adamw", "train.weight_decay=0.1"]))
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]


@pytest.mark.parametrize("batching", ["length", "tokens"])
def test_epoch_normalised_loss_weighs_every_position_the_same(batching):
    """loss.normalize=epoch: the mean of the batch losses is the mean over every position of the epoch."""
    cfg = quick("loss.normalize=epoch", f"data.batching={batching}")
    data = load_dataset("synthetic")
    split = LeaveOneOut.from_log(data.user, data.item, data.num_users, data.num_items)
    model = ModularSAR(cfg.model, data.num_items, data.num_users, 20, "ar").eval()
    batches = TrainBatches(split, "ar", 20, 64, batching=batching)
    epoch = [batches.make(rows) for rows in batches.epoch_plan()]
    per_batch = batches.num_targets / len(epoch)
    with torch.no_grad():
        normalised = [batch_loss(model, b, cfg, per_batch).item() for b in epoch]
        per_position = torch.cat(
            [
                torch.nn.functional.cross_entropy(
                    model.score(model(b.inputs, b.users)[b.labels > 0]),
                    b.labels[b.labels > 0] - 1,
                    reduction="none",
                )
                for b in epoch
            ]
        )
    assert len(per_position) == batches.num_targets
    assert sum(normalised) / len(epoch) == pytest.approx(per_position.mean().item(), rel=1e-4)


def test_modular_auto_norm_is_stored_as_post_and_old_auto_checkpoints_load_as_pre(tmp_path):
    """0.2 made post-LN the modular default; a checkpoint of an older `auto` (pre-LN) model still loads as
    pre."""
    assert (
        load_config(None, []).flat()["model.norm"] == "post"
        and not ModularSAR(load_config(None, []).model, 30, 5, 10, "ar").blocks[0].pre_norm
    )
    assert load_config(None, ["model.backbone=llama", "model.dropout=0"]).flat()["model.norm"] == "auto"
    cfg = load_config(None, ["model.norm=pre", "model.hidden_size=16"])
    model = ModularSAR(cfg.model, 30, 5, 10, "ar").eval()
    old = cfg.to_dict()
    old["model"]["norm"] = "auto"
    path = tmp_path / "old.pt"
    torch.save(
        {"config": old, "state_dict": model.state_dict(), "num_items": 30, "num_users": 5, "max_len": 10},
        path,
    )
    loaded, loaded_cfg, _ = load_checkpoint(path)
    assert loaded_cfg.model.norm == "pre" and loaded.blocks[0].pre_norm
    x = torch.tensor([[0, 3, 4, 5], [1, 2, 3, 4]])
    torch.testing.assert_close(loaded(x), model(x))


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_the_fused_optimizer_takes_adams_first_step(optimizer):
    """Adam's first step moves every weight by lr * g / (|g| + eps) against its gradient (bias-corrected
    moments: m = g, v = g^2), here with weight decay 0; the fused kernel must take exactly that step."""
    cfg = load_config(None, [f"train.optimizer={optimizer}", "train.lr=0.01", "train.weight_decay=0"])
    model = ModularSAR(cfg.model, 30, 5, 10, "ar")
    opt = make_optimizer(model, cfg)
    assert all(group["fused"] for group in opt.param_groups)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.manual_seed(0)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    for n, p in model.named_parameters():
        g = p.grad
        torch.testing.assert_close(p.detach() - before[n], -0.01 * g / (g.abs() + 1e-8), rtol=1e-5, atol=1e-7)


def test_learning_rate_warms_up_then_decays_linearly():
    from modsar.training.trainer import LearningRate

    rate = LearningRate(1e-3, warmup=4, linear=True, total=10)
    assert [round(rate.factor(s), 6) for s in range(11)] == [
        0.25,
        0.5,
        0.75,
        1.0,
        0.6,
        0.5,
        0.4,
        0.3,
        0.2,
        0.1,
        0.0,
    ]
    assert [LearningRate(1e-3, warmup=2).factor(s) for s in (0, 1, 5, 10**6)] == [0.5, 1.0, 1.0, 1.0]


def test_each_optimizer_step_gets_its_scheduled_rate():
    """The rate the optimizer applies at step s is lr * factor(s): checked on the updates of a plain SGD-like
    probe (the last step of an epoch of 16 batches under a 10-step warm-up and linear decay over 3 epochs)."""
    from modsar.training.trainer import LearningRate, train_epoch

    cfg = quick("train.warmup_steps=10", "train.lr_schedule=linear")
    data = load_dataset("synthetic")
    split = LeaveOneOut.from_log(data.user, data.item, data.num_users, data.num_items)
    batches = TrainBatches(split, "ar", 50, cfg.data.batch_size, cfg.mask_prob, True, seed=0)
    model = ModularSAR(cfg.model, data.num_items, data.num_users, 50, "ar")
    optimizer = make_optimizer(model, cfg)
    seen = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append(opt.param_groups[0]["lr"]))
    rate = LearningRate(cfg.train.lr, 10, True)
    train_epoch(model, optimizer, batches, cfg, torch.device("cpu"), 1, rate)
    assert rate.steps == len(seen) == 16 and rate.total == 16 * 3
    assert seen == pytest.approx([1e-3 * rate.factor(s) for s in range(16)])
    assert seen[:3] == pytest.approx([1e-4, 2e-4, 3e-4]) and seen[15] == pytest.approx(1e-3 * (1 - 15 / 48))


def test_min_steps_keeps_patience_from_stopping_a_run_early(monkeypatch):
    """A flat validation curve stops after `patience` passes, but not before train.min_steps optimizer steps:
    16 steps per epoch (1,000 users, batch 64) and min_steps 100 give the first stop at epoch 7 (112
    steps)."""
    import modsar.training.trainer as train_module

    monkeypatch.setattr(train_module, "popularity_level", lambda *a: 0.05)
    monkeypatch.setattr(
        train_module.Evaluator, "__call__", lambda *a, **k: {"ndcg@10": 0.1, "recall@10": 0.0}
    )
    result = run_trial(
        quick("train.max_epochs=50", "train.patience=2", "train.min_steps=100", "eval.ks=[10]"),
        progress=False,
    )
    assert (result.steps_per_epoch, result.epochs_run, result.steps, result.best_epoch) == (16, 7, 112, 1)


def test_escape_steps_count_to_the_first_pass_clear_of_the_popularity_level(monkeypatch):
    """Popularity level 0.1: passes of .10, .12, .13 and .2 clear 1.25 x .1 first at epoch 3, after 48
    steps."""
    import modsar.training.trainer as train_module

    monkeypatch.setattr(train_module, "popularity_level", lambda *a: 0.1)
    values = iter([0.10, 0.12, 0.13, 0.2])
    monkeypatch.setattr(
        train_module.Evaluator, "__call__", lambda *a, **k: {"ndcg@10": next(values, 0.0), "recall@10": 0.0}
    )
    result = run_trial(quick("train.max_epochs=4", "eval.ks=[10]"), progress=False)
    assert (result.popularity_level, result.escape_steps) == (0.1, 48)
    assert [h["steps"] for h in result.history] == [16, 32, 48, 64]
    never = iter([0.10, 0.12])
    monkeypatch.setattr(
        train_module.Evaluator, "__call__", lambda *a, **k: {"ndcg@10": next(never, 0.0), "recall@10": 0.0}
    )
    assert run_trial(quick("train.max_epochs=2", "eval.ks=[10]"), progress=False).escape_steps is None


def test_the_popularity_level_is_the_most_popular_ranking_on_validation():
    from modsar.evaluation.ranking import Evaluator

    cfg = quick("eval.filter_seen=history")
    result = run_trial(cfg, progress=False)
    data = load_dataset("synthetic")
    split = LeaveOneOut.from_log(data.user, data.item, data.num_users, data.num_items)
    device = torch.device("cpu")
    expected = Evaluator.of(split, cfg, 50, device)(popularity_scorer(split, device), "valid")["ndcg@10"]
    assert result.popularity_level == expected > 0


def test_truncated_normal_init_and_the_norm_epsilon():
    from modsar.config import ModelConfig

    model = ModularSAR(
        ModelConfig(init="truncated_normal", norm_eps=1e-12, hidden_size=32, scale_embedding=False),
        300,
        10,
        50,
        "ar",
    )
    weights = [m.weight for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))]
    assert max(w.abs().max().item() for w in weights) <= 0.04
    assert 0.015 < torch.cat([w.flatten() for w in weights]).std().item() < 0.02  # cut at 2 std: 0.88 x 0.02
    norms = [m for m in model.blocks.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and all(n.eps == 1e-12 and bool((n.weight == 1).all()) for n in norms)


def test_a_step_budget_ends_the_run_at_the_first_pass_past_it():
    """16 steps an epoch, validation every 2 epochs (32 steps): train.max_steps=40 ends the run at the pass of
    epoch 4 (64 steps), as ASHA's max_t of 40 steps would; the learning rate never knew (constant)."""
    result = run_trial(
        quick("train.max_epochs=10", "train.eval_every=2", "train.max_steps=40"), progress=False
    )
    assert (result.epochs_run, result.steps) == (4, 64)
    assert [h["steps"] for h in result.history] == [32, 64]
    assert run_trial(quick("train.max_epochs=3", "train.max_steps=0"), progress=False).epochs_run == 3


def test_a_trial_hands_tune_its_folder_at_improvements_and_every_few_minutes(monkeypatch, tmp_path):
    """Each checkpoint Tune is handed is a copy into storage, and every num_to_keep of a trial's make Tune
    save the experiment's state: the folder goes with an improvement, and otherwise once CHECKPOINT_EVERY_S
    has passed since it last went."""
    from modsar.sweep import trial

    handed = []
    monkeypatch.setattr(trial.tune, "report", lambda report, checkpoint=None: handed.append(checkpoint))
    reports = trial._TrialReports("ndcg@10", (), {}, "")
    facts = {"last": False, "epoch_time_s": 1.0, "eval_time_s": 0.1, "loss": 1.0, "num_parameters": 1}
    folder = tmp_path / "best.pt"
    reports.on_eval(1, {"ndcg@10": 0.1}, True, folder, facts)
    reports.on_eval(2, {"ndcg@10": 0.05}, False, folder, facts)
    reports.on_eval(3, {"ndcg@10": 0.2}, True, folder, facts)
    monkeypatch.setattr(trial, "CHECKPOINT_EVERY_S", 0.0)
    reports.on_eval(4, {"ndcg@10": 0.15}, False, folder, facts)
    reports.on_eval(5, {"ndcg@10": 0.15}, False, None, facts)  # a run without a folder hands none
    assert [c is not None for c in handed] == [True, False, True, True, False]
    assert handed[0].path == str(tmp_path)
