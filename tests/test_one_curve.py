"""One config and seed, one curve: `modsar train`, a reused Ray actor's second trial, a Tune retry after the
trial's worker was killed, and a search resumed after SIGKILL of its driver (between trials and mid-trial)
give the same validation value at every epoch and the same test metrics, to the last bit.

The guard behind it: no helper a trial calls between epochs draws from a global random generator."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import torch
import yaml

from modsar.config import Config
from modsar.data.batches import TrainBatches
from modsar.data.split import make_split
from modsar.data.store import load_dataset
from modsar.evaluation.ranking import Evaluator, model_scorer
from modsar.evaluation.rollouts import trial_rollouts
from modsar.memory import check_model
from modsar.randomness import global_states, same_states, seed_everything
from modsar.records.rows import differing_keys, read_rows
from modsar.sweep.spaces import load_space
from modsar.training import flops
from modsar.training.trainer import (
    TrainState,
    build_model,
    make_optimizer,
    run_trial,
    save_checkpoint,
)

SPACE = Path(__file__).parent / "spaces" / "same_curve.yaml"
COMPARED = {"train.lr": 0.003}  # the space's second grid point


def _draws_nothing(name: str, helper) -> None:
    seed_everything(7)
    before = global_states()
    helper()
    assert same_states(before, global_states()), f"{name} drew from a global random generator"


def test_helpers_a_trial_calls_between_epochs_draw_nothing(tmp_path):
    cfg = Config.from_dict(
        {"dataset": "synthetic", "model": {"hidden_size": 16, "num_layers": 1}, "eval": {"generate_steps": 3}}
    )
    dataset = load_dataset("synthetic")
    split = make_split(cfg, dataset)
    model = build_model(cfg, dataset.num_items, dataset.num_users, 30).eval()
    _draws_nothing("the memory check", lambda: check_model(cfg, dataset.num_items, dataset.num_users, 30))
    flops.matmul_peak.cache_clear()  # the first measurement in a process is the one that drew
    _draws_nothing(
        "the matmul peak (MFU)", lambda: flops.utilisation(1e9, 1.0, torch.device("cpu"), torch.float32)
    )
    full = Evaluator.of(split, cfg, 30, torch.device("cpu"))
    _draws_nothing("validation", lambda: full(model_scorer(model), "valid"))
    _draws_nothing("test", lambda: full(model_scorer(model), "test"))
    sampled_cfg = Config.from_dict({**cfg.stored(), "eval": {"sampled_negatives": 20}})
    _draws_nothing(
        "sampled evaluation",
        lambda: Evaluator.of(split, sampled_cfg, 30, torch.device("cpu"))(model_scorer(model), "valid"),
    )
    _draws_nothing("greedy rollouts", lambda: trial_rollouts(model, split, cfg, 30, torch.device("cpu")))
    from modsar.evaluation.rollouts import Sampler, generate

    _draws_nothing(
        "sampled rollouts",
        lambda: generate(
            model, split, "ar", 30, 3, Sampler("topk", top_k=5), "none", seed=1, device=torch.device("cpu")
        ),
    )
    meta = {"num_items": dataset.num_items, "num_users": dataset.num_users, "max_len": 30}
    _draws_nothing("checkpointing", lambda: save_checkpoint(tmp_path / "best.pt", model, cfg, meta))
    batches = TrainBatches(split, "ar", 30, 64, 0.2, True, 0.0, 0.0, seed=0)
    state = TrainState(make_optimizer(model, cfg), batches, torch.device("cpu"))
    _draws_nothing("the resume state", lambda: state.state_dict(1.0, global_states(), model, 1))


def test_a_helper_that_draws_cannot_shift_training():
    """Even a callback that draws (a library inside tune.report, a logger) leaves the curve as it was."""
    cfg = Config.from_dict(
        {
            "dataset": "synthetic",
            "model": {"hidden_size": 16, "num_layers": 1, "dropout": 0.3},
            "train": {"max_epochs": 3, "threads": 1},
        }
    )

    def draw(*_args) -> None:
        torch.rand(5)
        np.random.rand(5)
        random.random()

    quiet, noisy = (
        run_trial(cfg, progress=False, evaluate_test=False, on_eval=callback) for callback in (None, draw)
    )
    assert [h["valid.ndcg@10"] for h in quiet.history] == [h["valid.ndcg@10"] for h in noisy.history]
    assert [h["loss"] for h in quiet.history] == [h["loss"] for h in noisy.history]


# --- the same config through every path ------------------------------------------------------------------


def _reports(experiment: Path, trial: str) -> list[dict]:
    """Tune's reports of the trial whose id ends with `trial` so far (result.json grows one line a report)."""
    lines = []
    for path in experiment.glob(f"ray-ar/*_{trial}_*/result.json"):
        try:
            lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):  # a line being written
            continue
    return lines


def _wait(condition, what: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            log = getattr(proc, "log", None)  # where the search's stderr went, when the test kept it
            err = Path(log).read_text()[-3000:] if log else ""
            raise AssertionError(f"the search ended (exit {proc.returncode}) before {what}:\n{err}")
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _kill_driver(proc: subprocess.Popen) -> None:
    """SIGKILL the driver and its processes at whatever moment the test reached, even inside Tune's copy of
    its state into the search folder: --resume restores the state of one save (sweep/storage.py), so any
    moment must be resumable."""
    if proc.poll() is not None:
        raise AssertionError("the search ended before the test could kill it")
    family = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGKILL)
    for child in family:
        child.kill()
    proc.wait()


def _compared_row(results: Path, experiment: str) -> pd.Series:
    rows = read_rows(str(results), experiment)
    return rows[rows["train.lr"] == COMPARED["train.lr"]].iloc[0]


@pytest.mark.slow
@pytest.mark.long
def test_train_reused_actor_retry_and_resume_give_one_curve(tmp_path):
    data = tmp_path / "data"
    results = tmp_path / "results"
    env = {**os.environ, "MODSAR_DATA": str(data)}
    space = load_space(str(SPACE))
    config = {
        **space.base,
        **COMPARED,
        "train.max_epochs": space.budget["max_epochs"],
        "train.eval_every": space.budget["eval_every"],
    }
    (tmp_path / "compared.yaml").write_text(yaml.safe_dump(config))
    bin_dir = Path(sys.executable).parent
    trained = subprocess.run(
        [
            str(bin_dir / "modsar"),
            "train",
            "--dataset",
            "synthetic",
            "--config",
            str(tmp_path / "compared.yaml"),
            "--results",
            str(results),
            "--experiment",
            "t",
            "--quiet",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    reference = read_rows(str(results), "t").iloc[0]
    curve = json.loads(reference["curve"])
    assert [e for e, _ in curve] == list(range(1, 9)) and curve[-1][1] > 3 * curve[0][1] / 2  # it learns

    search = [
        str(bin_dir / "modsar"),
        "search",
        "--space",
        str(SPACE),
        "--dataset",
        "synthetic",
        "--results",
        str(results),
        "--quiet",
        "--max-concurrent",
        "1",
    ]

    # 1. uninterrupted: the compared config is the second trial of the actor that ran the first
    done = subprocess.run(
        [*search, "--experiment", "reused"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = ({r["pid"] for r in _reports(results / "reused", t)} for t in ("00000", "00001"))
    assert len(first) == 1 and first == second, "the compared trial ran on a reused actor"

    # 2. killed between trials (or just after the second began): resumed, it runs in a fresh worker; then
    # that worker is killed mid-trial (Tune retries it from its checkpoint), then the driver is killed
    # mid-trial and the search resumed again
    experiment = results / "killed"
    proc = subprocess.Popen(
        [*search, "--experiment", "killed", "--max-failures", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "search-first.err").open("w"),
    )
    proc.log = tmp_path / "search-first.err"  # type: ignore[attr-defined]
    _wait(
        lambda: len(list((experiment / "trials").glob("[!.]*.parquet"))) == 1, "the first trial's row", proc
    )
    _kill_driver(proc)
    proc = subprocess.Popen(
        [*search, "--experiment", "killed", "--max-failures", "2", "--resume"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "search-resumed.err").open("w"),
    )
    proc.log = tmp_path / "search-resumed.err"  # type: ignore[attr-defined]
    killed = {
        r["pid"] for r in _reports(experiment, "00001")
    }  # the second trial may have begun before the kill
    _wait(
        lambda: any(r["epoch"] >= 2 and r["pid"] not in killed for r in _reports(experiment, "00001")),
        "epoch 2 of the second trial after the resume",
        proc,
    )
    worker = next(r["pid"] for r in _reports(experiment, "00001") if r["pid"] not in killed)
    os.kill(worker, signal.SIGKILL)  # the trial's Ray worker dies: Tune retries the trial from its checkpoint
    _wait(
        lambda: any(
            r["epoch"] >= 4 and r["pid"] not in {*killed, worker} for r in _reports(experiment, "00001")
        ),
        "epoch 4 of the retried trial",
        proc,
    )
    _kill_driver(proc)
    assert not list((experiment / "trials").glob("*00001.parquet")), "the driver was killed mid-trial"
    resumed = subprocess.run(
        [*search, "--experiment", "killed", "--max-failures", "2", "--resume"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert len({r["pid"] for r in _reports(experiment, "00001")} - killed) == 3, "three workers ran the trial"

    compared = [
        "curve",
        "best_epoch",
        "epochs_run",
        *(k for k in reference.index if k.startswith(("valid.", "test."))),
    ]
    for name in ("reused", "killed"):
        row = _compared_row(results, name)
        assert not differing_keys(pd.DataFrame([reference, row])), (
            f"{name}: not the config `modsar train` ran"
        )
        assert row["selected"], f"{name}: the compared trial is the one selected and tested"
        assert json.loads(row["curve"]) == curve, f"{name}: validation curve differs from modsar train's"
        for key in compared:
            assert row[key] == reference[key], (
                f"{name}: {key} {row[key]!r} != modsar train's {reference[key]!r}"
            )


def test_the_resume_file_restores_every_global_generator(tmp_path):
    """A plugin backbone may draw from python's or numpy's generator in training: a resumed trial continues
    their streams too, from a file torch loads with weights_only."""
    cfg = Config.from_dict({"dataset": "synthetic", "model": {"hidden_size": 16, "num_layers": 1}})
    dataset = load_dataset("synthetic")
    model = build_model(cfg, dataset.num_items, dataset.num_users, 30)
    batches = TrainBatches(make_split(cfg, dataset), "ar", 30, 64, seed=0)
    seed_everything(3)
    random.random(), np.random.rand(), torch.rand(1)  # somewhere in the streams
    saved = global_states()
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    state = TrainState(make_optimizer(model, cfg), batches, torch.device("cpu"))
    resume_file = {**state.state_dict(1.0, saved, model, 1), "state_dict": model.state_dict()}
    torch.save(resume_file, tmp_path / "resume.pt")
    seed_everything(99)
    resumed = TrainState(make_optimizer(model, cfg), batches, torch.device("cpu"))
    resumed.load(torch.load(tmp_path / "resume.pt", weights_only=True), model)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
