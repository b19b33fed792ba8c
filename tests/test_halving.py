"""Synchronous successive halving (modsar.sweep.halving): its rule by hand, its replay's fixed epochs, and a
real search on a local Ray cluster, uninterrupted and killed while trials wait at a rung."""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from modsar.cli import main
from modsar.devices import cpu_identity
from modsar.records.rows import read_rows
from modsar.sweep.halving import SuccessiveHalving, best_of, promoted_count, rung_times
from modsar.sweep.scheduler_replay import Schedule, TrialShape, replay
from modsar.sweep.spaces import load_space

SPACE = Path(__file__).parent / "spaces" / "halving.yaml"


def test_rungs_and_promotions_by_hand():
    assert rung_times(2000, 3, 18000) == [2000, 6000]  # the paper spaces' default: 15 and 35 epochs on Beauty
    assert rung_times(1, 2, 4) == [1, 2] and rung_times(5, 2, 5) == []
    assert [promoted_count(n, 3) for n in (20, 6, 2, 0)] == [6, 2, 1, 0]  # at least one goes on
    values = {"a": 0.1, "b": 0.3, "c": 0.3, "d": math.nan, "e": 0.2}
    assert best_of(values, 2) == ["b", "c"]  # a tie goes to the smaller id; NaN is never best
    assert best_of(values, 5) == ["b", "c", "e", "a", "d"]
    assert best_of(values, 2, mode="min") == ["a", "e"]


class _Searcher:
    """What the scheduler asks of Tune's search algorithm: whether every trial is made; whom it told."""

    def __init__(self) -> None:
        self.told: dict[str, float] = {}

    def is_finished(self) -> bool:
        return True

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.told[trial_id] = (result or {})["m"]


class _Controller:
    """The calls SuccessiveHalving makes on Tune's controller (its rule, apart from Ray: the searches below
    run it on a real local Ray)."""

    def __init__(self, count: int) -> None:
        # ids in the reverse of the trials' order, so that a tie broken by id would pick the last trial
        self.trials = [
            SimpleNamespace(trial_id=f"id{9 - i}", status=Trial.RUNNING, experiment_tag=f"{i + 1}_x=1")
            for i in range(count)
        ]
        self.search_alg = _Searcher()

    def get_trials(self) -> list:
        return self.trials

    def stop_trial(self, trial) -> None:
        trial.status = Trial.TERMINATED


def _report(scheduler, controller, i: int, passes: int, value: float, **extra) -> str:
    trial = controller.trials[i]
    decision = scheduler.on_trial_result(controller, trial, {"passes": passes, "m": value, **extra})
    if decision == TrialScheduler.PAUSE:
        trial.status = Trial.PAUSED  # as Tune does
    if decision == TrialScheduler.STOP:
        trial.status = Trial.TERMINATED
    return decision


def _halving(**options) -> SuccessiveHalving:
    return SuccessiveHalving("passes", 1, 2, 4, metric="m", mode="max", **options)  # rungs at 1 and 2 passes


def test_the_rung_decides_once_all_are_there_and_ties_go_to_the_first_made():
    scheduler, controller = _halving(), _Controller(4)
    assert [_report(scheduler, controller, i, 1, v) for i, v in enumerate((0.1, 0.3, 0.3))] == ["PAUSE"] * 3
    assert scheduler.choose_trial_to_run(controller) is None  # all three wait for the fourth
    assert _report(scheduler, controller, 3, 1, 0.2) == "STOP"  # the last one decides: 2 of 4 go on
    statuses = [t.status for t in controller.trials]
    assert statuses == [Trial.TERMINATED, Trial.PAUSED, Trial.PAUSED, Trial.TERMINATED]
    assert scheduler.promoted[0] == ["id8", "id7"]  # the tie at 0.3 in the trials' order, not their ids'
    assert controller.search_alg.told == {"id9": 0.1, "id8": 0.3, "id7": 0.3, "id6": 0.2}  # TPE, at rung 1
    assert scheduler.choose_trial_to_run(controller) is controller.trials[1]
    controller.trials[1].status = Trial.RUNNING
    assert _report(scheduler, controller, 1, 2, 0.5) == "PAUSE"  # at the second rung, waits for the other
    controller.trials[2].status = Trial.RUNNING
    assert _report(scheduler, controller, 2, 2, 0.6) == "CONTINUE"  # the best of 2 goes on to max_t
    assert controller.trials[1].status == Trial.TERMINATED
    assert _report(scheduler, controller, 2, 4, 0.7) == "STOP"  # max_t


def test_a_trial_that_ends_at_a_rung_leaves_its_place_and_a_late_one_stops():
    scheduler, controller = _halving(), _Controller(4)
    _report(scheduler, controller, 0, 1, 0.9, trial_done=True)  # patience ended it there: it cannot go on
    controller.trials[0].status = Trial.TERMINATED
    for i, v in ((1, 0.3), (2, 0.2)):
        _report(scheduler, controller, i, 1, v)
    controller.trials[3].status = Trial.ERROR  # failed before the rung (a retry will follow)
    scheduler.on_trial_error(controller, controller.trials[3])
    assert not scheduler.decided[0]  # Tune retries it: no decision without it yet
    scheduler.choose_trial_to_run(controller)  # ... but it failed for good: decided on the next step
    assert scheduler.promoted[0] == ["id8"]  # 3 // 2 of the 3 that arrived: not the ended one, best as it was
    controller.trials[3].status = Trial.RUNNING  # a --resume of the errored trial: decided without it
    assert _report(scheduler, controller, 3, 1, 0.99) == "STOP"


def test_promoted_trials_resume_within_max_running_and_waiting_ones_never():
    scheduler, controller = _halving(max_running=1), _Controller(2)
    _report(scheduler, controller, 0, 1, 0.5)
    assert _report(scheduler, controller, 1, 1, 0.4) == "STOP"
    controller.trials.append(SimpleNamespace(trial_id="busy", status=Trial.RUNNING, experiment_tag="3_x"))
    assert scheduler.choose_trial_to_run(controller) is None  # one trial runs: the promoted one waits
    controller.trials[-1].status = Trial.TERMINATED
    assert scheduler.choose_trial_to_run(controller) is controller.trials[0]
    # a resumed search: Tune restores a trial that waited at a rung as PENDING; it is never chosen, and its
    # repeated rung report keeps its first value
    again, control = _halving(), _Controller(3)
    _report(again, control, 0, 1, 0.5)
    control.trials[0].status = Trial.PENDING
    control.trials[1].status = Trial.PENDING  # a new trial
    assert again.choose_trial_to_run(control) is control.trials[1]  # not the waiting one
    assert _report(again, control, 0, 1, 0.7, repeat=True) == "PAUSE" and again.arrived[0]["id9"] == 0.5


def test_a_resumed_search_stops_the_trials_its_rungs_stopped_before_tune_starts_them():
    """Tune restores a trial stopped while it waited at a rung as pending where its saved state still lists
    it as paused (searches saved before Tune was told of such stops); the scheduler stops it again, and the
    promoted trial, pending too, is the one chosen."""
    scheduler, controller = _halving(), _Controller(4)
    stopped, paused, pending = Trial.TERMINATED, Trial.PAUSED, Trial.PENDING
    for i, value in enumerate((0.1, 0.4, 0.3, 0.2)):
        _report(scheduler, controller, i, 1, value)
    assert [t.status for t in controller.trials] == [stopped, paused, paused, stopped]
    for trial in controller.trials:
        trial.status = pending  # as Tune restores a state saved while they waited
    assert scheduler.choose_trial_to_run(controller) is controller.trials[1]  # the best of the 4 goes on
    assert [t.status for t in controller.trials] == [stopped, pending, pending, stopped]
    controller.trials[1].status = Trial.RUNNING
    assert scheduler.choose_trial_to_run(controller) is controller.trials[2]  # 2 of 4 go on


def test_a_scheduler_pickled_before_later_records_restores_them_empty():
    scheduler = _halving()
    state = {k: v for k, v in scheduler.__dict__.items() if k not in ("ended", "index", "promoted")}
    restored = SuccessiveHalving.__new__(SuccessiveHalving)
    restored.__setstate__(pickle.loads(pickle.dumps(state)))
    assert restored.ended == set() and restored.index == {} and restored.promoted == [[], []]


def _schedule(kind: str) -> Schedule:
    return Schedule(
        grace=2000, reduction_factor=3, max_t=18000, unit="steps", eval_every=5, max_epochs=200, kind=kind
    )


def test_the_replay_of_halving_trains_what_the_trial_count_fixes():
    """Beauty's shape (177 steps an epoch, a pass of 5 epochs): 20 trials to the pass past 2,000 steps
    (15 epochs), 6 to the pass past 6,000 (35), 2 to the pass past 18,000 (105): 560 epochs in every
    replay, where ASHA's depend on the order of good and poor trials."""
    shape = TrialShape(share=1.0, steps_per_epoch=177, pass_s=1.0, last_pass_s=1.0)
    halving = replay([shape], 20, 2, _schedule("halving"), runs=12)
    assert halving.epochs == 20 * 15 + 6 * 20 + 2 * 70 == 560
    assert halving.passes == 20 * 3 + 6 * 4 + 2 * 14
    # 2 workers: 60 passes of rung 0 (30 s), 24 to the second rung (12 s), the last 2 side by side (14 s)
    assert set(halving.seconds_by_run) == {56.0} and halving.busy == pytest.approx(112 / 112)
    asha = replay([shape], 20, 2, _schedule("asha"), runs=12)
    assert len(set(asha.seconds_by_run)) > 1  # ASHA's cost moves with the order the trials come in

    # 7 trials on 2 workers: the seventh trial's rung-0 work runs alone (a core idles at the barrier)
    seven = replay([shape], 7, 2, _schedule("halving"), runs=1)
    assert seven.epochs == 7 * 15 + 2 * 20 + 1 * 70
    assert seven.seconds == 4 * 3 + 4 + 14  # ceil(7/2) rounds of 3 passes, then 2 side by side, then 1
    assert seven.busy == pytest.approx((21 + 8 + 14) / (2 * 30))


def test_a_trial_ending_at_a_rung_cannot_go_on():
    """Max_epochs at the first rung: every trial ends there, none goes on (the scheduler cannot resume a
    trial whose training is over)."""
    shape = TrialShape(share=1.0, steps_per_epoch=177, pass_s=1.0, last_pass_s=1.0)
    short = Schedule(
        grace=2000, reduction_factor=3, max_t=18000, unit="steps", eval_every=5, max_epochs=15, kind="halving"
    )
    assert replay([shape], 9, 2, short, runs=1).epochs == 9 * 15


def _first_values(row) -> list[float]:
    return [v for _, v in json.loads(row["curve"])]


def test_a_halving_search_trains_what_its_rungs_keep(local_ray, data_dir, tmp_path, monkeypatch):
    """7 TPE trials, rungs at 1 and 2 passes, reduction factor 2: all 7 train 1 epoch, the best 3 there a
    second, the best of those to max_t (4): epochs 1, 1, 1, 1, 2, 2, 4. TPE was told every trial's value at
    the first rung, and the trial paused twice and resumed trains the curve `modsar train` gives its
    config. Tune's saved state lists every trial stopped while it waited as stopped, and a --resume of the
    finished search trains nothing again."""
    out = tmp_path / "results"
    argv = ["search", "--quiet", "--no-estimate", "--space", str(SPACE), "--dataset", "synthetic"]
    # Tune saves its state at every step: saves fall between trials pausing and their rung's decision
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "0")
    assert main([*argv, "--results", str(out), "--experiment", "h", "--max-concurrent", "2"]) == 0
    assert not _waiting(out / "h")  # (it failed before Tune was told of the trials stopped while paused)
    rows = read_rows(str(out), "h")
    assert sorted(rows["epochs_run"]) == [1, 1, 1, 1, 2, 2, 4]
    assert (rows["passes"] == rows["reports"]).all()  # a paused trial resumed where it paused: no pass twice
    for row in rows.to_dict("records"):  # the steps at each pass, those before a pause included
        at = json.loads(row["curve_steps"])
        assert [e for e, _ in at] == [e for e, _ in json.loads(row["curve"])]
        assert [s for _, s in at] == [e * row["steps_per_epoch"] for e, _ in at] and at[-1][1] == row["steps"]
    first = {r["trial_id"]: _first_values(r)[0] for _, r in rows.iterrows()}
    went_on = set(rows[rows["epochs_run"] >= 2]["trial_id"])
    assert went_on == set(best_of(first, 3))  # the best 3 at the first rung, by their value there
    second = {
        r["trial_id"]: max(_first_values(r)[:2]) for _, r in rows.iterrows() if r["trial_id"] in went_on
    }
    (last,) = rows[rows["epochs_run"] == 4].to_dict("records")
    assert [last["trial_id"]] == best_of(second, 1) and last["selected"] and last["status"] == "finished"
    assert set(rows[rows["epochs_run"] < 4]["status"]) == {"stopped"}

    (state,) = (out / "h" / "ray-ar").glob("searcher-state-*.pkl")
    study = pickle.loads(state.read_bytes())["_ot_study"]
    told = sorted(t.values[0] for t in study.get_trials() if t.state.name == "COMPLETE")
    assert told == sorted(first.values())  # TPE learned every trial at the same budget: the first rung's
    assert json.loads((out / "h" / "search.json").read_text())["asha"]["kind"] == "halving"

    space = load_space(str(SPACE))
    config = {
        **space.base,
        "model.dropout": last["model.dropout"],
        "model.attn_dropout": last["model.attn_dropout"],
        "train.lr": last["train.lr"],
        "train.max_epochs": 4,
        "train.eval_every": 1,
    }
    (tmp_path / "last.yaml").write_text(yaml.safe_dump(config))
    trained = ["train", "--dataset", "synthetic", "--config", str(tmp_path / "last.yaml"), "--quiet"]
    assert main([*trained, "--results", str(out), "--experiment", "t"]) == 0
    (alone,) = read_rows(str(out), "t").to_dict("records")
    assert json.loads(alone["curve"]) == json.loads(last["curve"])  # paused and resumed: one curve
    assert json.loads(alone["curve_steps"]) == json.loads(last["curve_steps"])  # at the same steps

    # --resume of the finished search (as --seeds does): Tune's saved state still lists the trials stopped
    # while they waited as paused, and restores them as pending; none trains again, no row is rewritten
    reports = {p: p.read_text() for p in (out / "h" / "ray-ar").glob("*/result.json")}
    assert main([*argv, "--results", str(out), "--experiment", "h", "--max-concurrent", "2", "--resume"]) == 0
    assert {p: p.read_text() for p in reports} == reports
    again = read_rows(str(out), "h")
    key = ["trial_id", "finished_at", "wall_time_s", "curve", "selected"]
    assert again[key].sort_values("trial_id").equals(rows[key].sort_values("trial_id"))


def _waiting(experiment: Path) -> bool:
    """Tune's saved state has a trial paused at a rung."""
    for state_file in experiment.glob("ray-ar/experiment_state-*.json"):
        try:
            trials = json.loads(state_file.read_text())["trial_data"]
        except (OSError, ValueError, KeyError):  # being rewritten
            continue
        if any(json.loads(trial).get("status") == "PAUSED" for trial, _ in trials):
            return True
    return False


@pytest.mark.slow
@pytest.mark.long
def test_a_halving_search_killed_while_trials_wait_resumes_to_the_same_rows(data_dir, tmp_path):
    """Killed (with its local Ray) while trials wait at the first rung, --resume neither trains a waiting
    trial again nor decides the rung before every trial is there: every row equals an uninterrupted
    search's (one trial at a time, so TPE draws alike in both). The same with its Tune state gone (another
    machine): it goes on from the rows the waiting trials wrote (status paused), replaying them."""
    out = tmp_path / "results"
    env = {**os.environ, "MODSAR_DATA": str(data_dir)}

    def command(experiment: str) -> list[str]:
        where = ["--dataset", "synthetic", "--results", str(out), "--experiment", experiment]
        options = ["--quiet", "--no-estimate", "--max-concurrent", "1"]
        return [sys.executable, "-m", "modsar.cli", "search", "--space", str(SPACE), *where, *options]

    from test_search import _kill_with_family  # tests/ is on sys.path (no package)

    def kill_while_waiting(experiment: str, rows_at_least: int) -> pd.DataFrame:
        # Tune saves its state at every step (not every 10 s): the kill lands while a trial waits on record
        saving = {**env, "TUNE_GLOBAL_CHECKPOINT_S": "0"}
        proc = subprocess.Popen(
            command(experiment), env=saving, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        rows = out / experiment / "trials"
        deadline = time.time() + 240
        while time.time() < deadline and not (
            _waiting(out / experiment) and len(list(rows.glob("[!.]*.parquet"))) >= rows_at_least
        ):
            time.sleep(0.02)
        _kill_with_family(proc)
        assert _waiting(out / experiment), "no trial was seen waiting at the first rung"
        return read_rows(str(out), experiment) if rows_at_least else pd.DataFrame()

    kill_while_waiting("k", 0)
    waited = read_rows(str(out), "k")
    assert not len(waited) or set(waited["status"]) == {"paused"}  # a waiting trial's row so far
    done = subprocess.run([*command("k"), "--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]

    waited = kill_while_waiting("c", 2)
    assert set(waited["status"]) == {"paused"} and sorted(waited["epochs_run"]) == [1] * len(waited)
    for ray_dir in (out / "c").glob("ray-*"):
        shutil.rmtree(ray_dir)
    for path in (out / "c" / "trials").glob("[!.]*.parquet"):  # rows from before they recorded their CPU
        pq.write_table(pq.read_table(path).drop_columns(["cpu"]), path)
    carried = subprocess.run(
        [*command("c"), "--resume"], env=env, capture_output=True, text=True, timeout=600
    )
    assert carried.returncode == 0, carried.stderr[-2000:]
    replaced = read_rows(str(out), "c").set_index("trial_id")
    assert set(replaced.index[replaced["role"] == "superseded"]) == set(waited["trial_id"])
    # a replayed trial the rung then stopped trained nothing here: its CPU is its row's, unknown; one that
    # went on trained again here, on this CPU
    search = replaced[replaced["role"] == "search"]
    idle = search["train.lr"].isin(waited["train.lr"]) & (search["epochs_run"] == 1)
    assert idle.any() and search.loc[idle, "cpu"].isna().all()
    assert (search.loc[~idle, "cpu"] == cpu_identity()).all()

    whole = subprocess.run(command("whole"), env=env, capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr[-2000:]
    facts = ["status", "epochs_run", "best_epoch", "valid.ndcg@10", "curve", "selected", "test.ndcg@10"]
    resumed, gone_on, uninterrupted = (
        read_rows(str(out), name).query("role == 'search'").set_index("train.lr").sort_index()[facts]
        for name in ("k", "c", "whole")
    )
    assert sorted(resumed["epochs_run"]) == [1, 1, 1, 1, 2, 2, 4]
    assert resumed.equals(uninterrupted), resumed.compare(uninterrupted)
    assert gone_on.equals(uninterrupted), gone_on.compare(uninterrupted)
    assert np.isfinite(resumed["test.ndcg@10"].dropna()).all() and resumed["selected"].sum() == 1


def test_scheduler_halving_on_a_grid_space_waits_without_deadlock(local_ray, data_dir, tmp_path):
    """`--scheduler halving` on a grid space (the AR directions of loss_* and hf_* run their grid): Tune's
    grid generator caps live trials at --max-concurrent, and trials waiting at a rung would hold those slots
    forever, but a trial at the first rung is told complete to its generator. AE's 8 points: 8 train 1 epoch,
    4 a second, 2 to max_t (4); AR's 4: 4, then 2, then 1."""
    out = tmp_path / "results"
    space = str(Path(__file__).parent / "spaces" / "asha.yaml")  # a grid, ASHA by its own settings
    argv = [
        "search",
        "--quiet",
        "--no-estimate",
        "--space",
        space,
        "--dataset",
        "synthetic",
        "--results",
        str(out),
    ]
    assert main([*argv, "--experiment", "g", "--scheduler", "halving", "--max-concurrent", "2"]) == 0
    rows = read_rows(str(out), "g")
    epochs = {task: sorted(group["epochs_run"]) for task, group in rows.groupby("task")}
    assert epochs == {"ae": [1, 1, 1, 1, 2, 2, 4, 4], "ar": [1, 1, 2, 4]}
    assert json.loads((out / "g" / "search.json").read_text())["asha"]["kind"] == "halving"
