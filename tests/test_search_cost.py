"""The cost of a search, known before it starts (modsar.sweep.cost): ASHA's epochs against hand-counted cases,
steps per epoch against the batches a trial trains on, the probe's timings and the random state it leaves."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from modsar.cli import main
from modsar.config import Config
from modsar.data.batches import TrainBatches
from modsar.data.split import make_split
from modsar.data.store import load_dataset
from modsar.randomness import global_states, same_states
from modsar.sweep import SearchRequest, cost, make_plan
from modsar.sweep.cost import Resources, duration, estimate
from modsar.sweep.probe import Companions
from modsar.sweep.scheduler_replay import Schedule


@pytest.fixture(scope="module")
def shared_data(tmp_path_factory):
    """One prepared synthetic dataset for the module (a search's trials read it from other processes too)."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture
def data_dir(shared_data, monkeypatch):
    monkeypatch.setenv("MODSAR_DATA", str(shared_data))
    return shared_data


def space_file(
    tmp_path, params: str, scheduler: str, budget: str, base: str = "  model.hidden_size: 16\n"
) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(
        f"description: cost test\nbase:\n  model.num_layers: 1\n{base}params:\n{params}"
        f"scheduler: {scheduler}\nbudget: {budget}\n"
    )
    return str(path)


def test_first_decision_of_hand_counted_cases():
    """ASHA sees a trial at its validation passes only: its first decision comes at the first pass at or past
    the grace period (the replay's hand-counted cases are in test_scheduler_replay.py)."""
    passes = Schedule(grace=1, reduction_factor=2, max_t=4, unit="passes", eval_every=5, max_epochs=200)
    assert passes.first_decision(10) == (50, 5)  # grace x eval_every x steps/epoch
    # unit: steps, 16 steps an epoch, validation every 2 epochs (32 steps): a 40-step grace is seen at epoch 4
    steps = Schedule(grace=40, reduction_factor=2, max_t=2**62, unit="steps", eval_every=2, max_epochs=20)
    assert steps.first_decision(16) == (64, 4)
    capped = Schedule(grace=400, reduction_factor=2, max_t=2**62, unit="steps", eval_every=2, max_epochs=20)
    assert capped.first_decision(16) == (320, 20)  # past the budget: the last epoch


def test_a_plans_epochs_trials_and_steps_per_epoch(data_dir, tmp_path):
    """8 AR trials under the hand-counted schedule: 80 epochs; steps/epoch are the batches TrainBatches yields
    for an epoch of each data shape the space varies."""
    path = space_file(
        tmp_path,
        "  task: {grid: [ar]}\n  data.batch_size: {grid: [64, 100]}\n"
        "  model.dropout: {grid: [0.0, 0.1, 0.2, 0.3]}\n",
        "{max_t: 4, grace_period: 1, reduction_factor: 2}",
        "{search: grid, max_epochs: 200, eval_every: 5}",
    )
    plan = make_plan(SearchRequest(space=path, dataset="synthetic"))
    est = estimate(plan, Resources(cpus=2, gpus=0), probe=False)
    (ar,) = est.directions
    assert ar.trials == 8 and sum(g.trials for g in ar.groups) == 8 and len(ar.groups) == 2  # 2 batch sizes
    # async ASHA on 2 workers lets more through than the synchronous count (80 epochs, 16 passes), never more
    # than every trial to max_t (160 epochs)
    assert 80 < ar.epochs() < 160 and ar.passes() == ar.epochs() / 5
    dataset = load_dataset("synthetic")
    split = make_split(plan.space.base_config({"dataset": "synthetic"}), dataset)
    for g in ar.groups:
        cfg = g.cfg
        batches = TrainBatches(
            split,
            cfg.task,
            dataset.default_max_len,
            cfg.data.batch_size,
            cfg.mask_prob,
            cfg.data.padding_free,
            seed=cfg.seed,
            batching=cfg.data.batching,
        )
        assert g.steps_per_epoch == len(list(batches)) > 0
        assert ar.schedule.first_decision(g.steps_per_epoch) == (5 * g.steps_per_epoch, 5)
    assert sorted(ar.shapes()) == sorted(g.steps_per_epoch for g in ar.groups)
    assert est.to_dict()["directions"]["ar"]["epochs"] == ar.epochs()


def test_a_steps_space_decides_first_at_its_grace_steps(data_dir, tmp_path, capsys):
    path = space_file(
        tmp_path,
        "  task: {grid: [ae, ar]}\n  model.dropout: {grid: [0.0, 0.3]}\n",
        "{unit: steps, grace_period: 40, reduction_factor: 2}",
        "{search: grid, max_epochs: 20, eval_every: 2}",
        base="  model.hidden_size: 16\n  data.batch_size: 64\n",
    )
    est = estimate(make_plan(SearchRequest(space=path, dataset="synthetic")), probe=False)
    for direction in est.directions:
        (spe,) = direction.shapes()
        epochs = math.ceil(40 / (2 * spe)) * 2  # the first validation pass at or past 40 steps
        assert direction.decisions() == [(epochs * spe, epochs)]
    assert main(["spaces", path, "--dataset", "synthetic"]) == 0
    out = capsys.readouterr().out
    assert "ASHA in steps: grace 40" in out and f"first ASHA decision after {epochs * spe} steps" in out


def test_successive_halving_counts_what_its_rungs_keep(data_dir, capsys):
    """The quickstart under --scheduler halving (rung at 10 passes of 3 epochs, reduction factor 2, max_t
    20): AE's 8 trials all to 30 epochs, 4 on to 60, 360 epochs; AR's 4, then 2, 180; the same in every
    replay, where ASHA's count moves with the order."""
    req = SearchRequest(space="quickstart", dataset="synthetic", scheduler="halving")
    est = estimate(make_plan(req), probe=False)
    ae, ar = est.directions
    assert (ae.epochs(), ar.epochs()) == (8 * 30 + 4 * 30, 4 * 30 + 2 * 30)
    lines = est.lines()
    assert lines[0].startswith(
        "cost of 'quickstart' on synthetic (grid search; successive halving in passes: "
    )
    assert "rungs at 10, reduction factor 2, max_t 20" in lines[0]
    assert "first halving decision after 480 steps (30 epochs); its rungs keep 4; ~360 epochs" in lines[1]
    assert "its rungs keep 2; ~180 epochs" in lines[2]
    assert any("successive halving fixes how many trials train to each rung" in x for x in lines)
    assert main(["spaces", "quickstart", "--dataset", "synthetic", "--scheduler", "asha", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scheduler"] == "asha"


def test_seed_re_runs_are_bounded_by_the_slowest_size_to_the_end_of_the_budget(data_dir, tmp_path, capsys):
    """--seeds 3 on the quickstart (halving, max_t 20 passes of 3 epochs = 60 epochs): each direction's pick
    re-run on seeds 1 and 2 (seed 0's row stands), its slowest size timed by hand: 60 epochs, 20 validation
    passes and a test pass. AE's run 1 + 60 x 16 x 0.01 + 21 x 0.52 = 21.52 s, AR's 1 + 60 x 16 x 0.02 + 21 x
    1.02 = 41.62 s, each re-run 2 s more in an actor of its own (3 s to start, not a reused actor's 1 s):
    four runs on 2 slots end by (2 x 23.52 + 2 x 43.62) / 2 + 43.62 / 2 = 88.95 s, plus the Tuner's start."""
    req = SearchRequest(space="quickstart", dataset="synthetic", scheduler="halving", seeds=3)
    two = Resources(cpus=2, gpus=0)
    est = estimate(make_plan(req), two, probe=False)
    for d, slowest in zip(est.directions, [(0.01, 0.5), (0.02, 1.0)], strict=True):
        assert d.shapes() == [16] and d.picks == 1
        for i, g in enumerate(d.groups):
            g.step_s, g.eval_s = slowest if i == 0 else (0.001, 0.1)  # the first size the slowest
            g.probed = True
        d.forget()
    assert [d.longest_run_s() for d in est.directions] == pytest.approx([21.52, 41.62])
    assert est.replicates() == 2
    assert est.seeds_seconds() == pytest.approx(cost.TUNER_START_S + 88.95)
    assert any(x.startswith("  then --seeds 3: 4 seed re-runs of the picks, at most ~") for x in est.lines())
    assert est.to_dict()["seeds_seconds"] == pytest.approx(est.seeds_seconds())
    # a search seeded outside 0..K-1 re-runs all K; K = 1 on seed 0 re-runs nothing
    other = SearchRequest(**{**req.__dict__, "seed": 7})
    assert estimate(make_plan(other), two, probe=False).replicates() == 3
    once = SearchRequest(space="quickstart", dataset="synthetic", seeds=1)
    one = estimate(make_plan(once), two, probe=False)
    assert one.replicates() == 0 and one.seeds_seconds() == 0.0
    assert any(x.startswith("  then --seeds 1: no re-run") for x in one.lines())
    # a space with arms selects (and re-runs) one trial per arm value in each direction
    path = space_file(
        tmp_path,
        "  task: {grid: [ae, ar]}\n  model.positional: {grid: [learned, none]}\n"
        "  model.dropout: {grid: [0.0, 0.3]}\n",
        "{unit: steps, grace_period: 40, reduction_factor: 2}",
        "{search: grid, max_epochs: 20, eval_every: 2}",
    )
    Path(path).write_text(Path(path).read_text() + "arms: [model.positional]\n")
    armed = estimate(make_plan(SearchRequest(space=path, dataset="synthetic", seeds=3)), two, probe=False)
    assert [d.picks for d in armed.directions] == [2, 2]
    assert any(x.startswith("  then --seeds 3: 8 seed re-runs of the picks") for x in armed.lines())
    assert main(["spaces", "quickstart", "--dataset", "synthetic", "--seeds", "2", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["seeds"] == 2 and printed["seeds_seconds"] > 0


def test_probes_time_each_size_and_interpolate_the_rest(data_dir, tmp_path):
    path = space_file(
        tmp_path,
        "  task: {grid: [ar]}\n  model.hidden_size: {grid: [16, 32, 64]}\n",
        "{max_t: 2, grace_period: 1}",
        "{search: grid, max_epochs: 2, eval_every: 1}",
        base="",
    )
    est = estimate(make_plan(SearchRequest(space=path, dataset="synthetic")), max_probes=2)
    groups = sorted(est.directions[0].groups, key=lambda g: g.flops)
    assert [g.probed for g in groups] == [True, False, True]  # the smallest and the largest size
    assert all(g.step_s > 0 and g.eval_s > 0 for g in groups)
    low, middle, high = (g.step_s for g in groups)
    assert min(low, high) <= middle <= max(low, high)
    (line,) = [x for x in est.lines() if x.startswith("  AR:")]
    assert "1 of 3 sizes estimated from the nearest probed size" in line and " s/epoch and " in line


def test_the_probe_leaves_the_global_random_state_and_threads(data_dir):
    """The probe builds models (their initialisation draws from torch's generator) and trains them (dropout):
    none of it may reach the caller's streams; it runs with a trial's threads (1 CPU: 1) and restores ours."""
    plan = make_plan(SearchRequest(space="quickstart", dataset="synthetic", cpus_per_trial=1))
    torch.manual_seed(3)
    torch.set_num_threads(2)
    before = global_states()
    est = estimate(plan)
    assert same_states(before, global_states()) and torch.get_num_threads() == 2
    assert all(g.probed and g.step_s > 0 and g.eval_s > 0 for d in est.directions for g in d.groups)


def test_modsar_spaces_prints_the_estimate(data_dir, capsys):
    assert main(["spaces", "quickstart", "--dataset", "synthetic"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("cost of 'quickstart' on synthetic (grid search; ASHA in passes: grace 10")
    ae, ar = (next(x for x in lines if x.startswith(f"  {t}: ")) for t in ("AE", "AR"))
    # 8 AE trials to 30 epochs, 4 on to max_t (60): 360 epochs if ASHA were synchronous; async ASHA lets more
    # through (the first trial at a rung always goes on), never more than 8 x 60
    head = "  AE: 8 trials, 16 steps/epoch, first ASHA decision after 480 steps (30 epochs); ~"
    assert ae.startswith(head) and "(1 CPU per trial, " in ae and " s/epoch and " in ae
    assert 360 < int(ae[len(head) :].split()[0].replace(",", "")) <= 480
    head = "  AR: 4 trials, 16 steps/epoch, first ASHA decision after 480 steps (30 epochs); ~"
    assert ar.startswith(head) and 180 < int(ar[len(head) :].split()[0]) <= 240
    assert any(
        "an estimate: the mean of replays of Ray's ASHA on the trials that run at once" in x for x in lines
    )
    (total,) = [x for x in lines if x.startswith("  in all: ~")]
    assert re.search(
        r", ~[0-9.]+ \w+ \([0-9.]+ \w+ to [0-9.]+ \w+ in 8 of 10 replays\) \(one direction", total
    )
    assert main(["spaces", "quickstart", "--dataset", "synthetic", "--json", "--max-concurrent", "1"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (
        document["directions"]["ae"]["trials"] == 8 and 180 <= document["directions"]["ar"]["epochs"] <= 240
    )
    assert document["resources"]["parallel"] == 1 and document["seconds"] > 0
    low, high = document["seconds_range"]  # the order of trials alone moves a search: a range about the mean
    assert 0 < low <= high and low < document["seconds"] * 1.5 and high > document["seconds"] / 1.5


def test_an_unknown_dataset_is_one_clear_error(data_dir, capsys):
    assert main(["spaces", "quickstart", "--dataset", "nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("modsar: error: dataset 'nosuch' is not prepared")
    assert main(["spaces", "quickstart", "--cpus-per-trial", "2"]) == 2  # the estimate's flags need --dataset
    assert "--cpus-per-trial goes with --dataset" in capsys.readouterr().err


def test_a_count_of_0_is_a_value_given_and_refused_like_any_other(data_dir, capsys):
    """`--max-epochs 0` and `--num-samples 0` are given, not left out: without --check or --dataset they are
    refused as 5 is (not the space described, exit 0); with either, by the bounds. A negative --seeds says
    what leaving it out gives (no re-runs): a space has no seeds setting to fall back on."""
    refused = (
        "modsar: error: --search, --full-grid, --num-samples, --max-epochs and KEY=VALUE go with --check"
    )
    for flag in ("--max-epochs", "--num-samples"):
        for value in ("0", "5"):
            assert main(["spaces", "quickstart", flag, value]) == 2, (flag, value)
            out, err = capsys.readouterr()
            assert out == "" and err.startswith(refused) and len(err.splitlines()) == 1, (flag, value, err)
        for mode in (["--check"], ["--dataset", "synthetic"]):
            assert main(["spaces", "quickstart", *mode, flag, "0"]) == 2, (flag, mode)
            assert f"modsar: error: {flag} must be >= 1; got 0" in capsys.readouterr().err
    assert main(["spaces", "quickstart", "--dataset", "synthetic", "--seeds", "-2"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "modsar: error: --seeds must be >= 0; got -2 (leave it out for no seed re-runs; with --resume, those "
        "the search was started with)"
    ]


def test_human_durations():
    assert [duration(s) for s in (4.25, 45, 720, 9000, 3 * 86400)] == [
        "4.2 s",
        "45 s",
        "12 min",
        "2.5 h",
        "3.0 days",
    ]


@pytest.mark.slow
def test_a_real_search_prints_its_estimate_first(data_dir, tmp_path, capsys):
    import ray

    path = space_file(
        tmp_path,
        "  task: {grid: [ar]}\n",
        "{max_t: 1, grace_period: 1}",
        "{search: grid, max_epochs: 1, eval_every: 1}",
        base="  model.hidden_size: 8\n",
    )
    out = tmp_path / "results"
    try:
        assert (
            main(
                [
                    "search",
                    "--space",
                    path,
                    "--dataset",
                    "synthetic",
                    "--results",
                    str(out),
                    "--quiet",
                    "--experiment",
                    "one",
                    "--max-concurrent",
                    "1",
                ]
            )
            == 0
        )
        printed = capsys.readouterr().out.splitlines()
        assert printed[0].startswith("cost of 'space' on synthetic")
        assert printed[1].startswith("  AR: 1 trial, ") and "measured" in printed[1]
        assert any(x.startswith("search one: 1 trials") for x in printed)
        # and ends with the time it took against that estimate (timing.against_estimate's known answers)
        after = printed[next(i for i, x in enumerate(printed) if x.startswith("search one: 1 trials")) + 1]
        assert after.startswith("  time: the search took ") and "s its estimate printed (" in after
    finally:
        ray.shutdown()


def test_no_estimate_skips_the_probe(data_dir, tmp_path, capsys, monkeypatch):
    import modsar.sweep
    import modsar.sweep.cost

    ran = []
    monkeypatch.setattr(
        modsar.sweep,
        "run_search",
        lambda req, plan=None, predicted=None: (
            ran.append(req)
            or {
                "experiment": "x",
                "trials": 0,
                "errors": 0,
                "diverged": 0,
                "wall_time_s": 0.0,
                "results": "r",
                "selected": {},
                "problem": None,
            }
        ),
    )
    monkeypatch.setattr(
        modsar.sweep.cost, "estimate", lambda *a, **k: pytest.fail("probed under --no-estimate")
    )
    assert (
        main(
            [
                "search",
                "--space",
                "quickstart",
                "--dataset",
                "synthetic",
                "--results",
                str(tmp_path),
                "--no-estimate",
            ]
        )
        == 0
    )
    assert len(ran) == 1 and "cost of" not in capsys.readouterr().out


def test_a_rung_past_the_run_is_named_in_steps_and_impossible_requests_are_refused(
    data_dir, tmp_path, capsys
):
    """A 100-step grace on 3 epochs of synthetic (16 steps each at batch 64) is never reached: the line names
    the rung (100 steps) beside the run's 48. A grace past max_t, or a NaN share of CPUs, is refused."""
    path = space_file(
        tmp_path,
        "  task: {grid: [ar]}\n",
        "{unit: steps, grace_period: 100}",
        "{search: grid, max_epochs: 3, eval_every: 1}",
        base="  model.hidden_size: 16\n  data.batch_size: 64\n",
    )
    assert main(["spaces", path, "--dataset", "synthetic"]) == 0
    assert (
        "no ASHA decision: its first rung (100 steps) is at or past the last epoch (48 steps)"
        in capsys.readouterr().out
    )
    (tmp_path / "past").mkdir()
    past = space_file(
        tmp_path / "past",
        "  task: {grid: [ar]}\n",
        "{unit: steps, grace_period: 100, max_t: 5}",
        "{search: grid, max_epochs: 3, eval_every: 1}",
    )
    assert main(["spaces", past, "--dataset", "synthetic"]) == 2
    assert "grace period (100 steps) is past its max_t (5 steps)" in capsys.readouterr().err
    assert main(["spaces", path, "--dataset", "synthetic", "--cpus-per-trial", "nan"]) == 2
    assert "--cpus-per-trial must be at least 0.01; got nan" in capsys.readouterr().err
    assert main(["spaces", path, "--dataset", "synthetic", "--cpus-per-trial", "1e-300"]) == 2
    assert "--cpus-per-trial must be at least 0.01; got 1e-300" in capsys.readouterr().err  # Ray's assert
    assert main(["spaces", path, "--dataset", "synthetic", "--seeds", "100000000"]) == 2  # once a MemoryError
    assert "--seeds must be at most 1000: each is one more training of every pick; got 100000000" in (
        capsys.readouterr().err
    )


def test_an_ae_mask_rate_changes_the_cost_of_a_step(data_dir, tmp_path):
    """An AE step scores every masked position against every item: four times the mask rate, four times the
    output layer's FLOPs (on synthetic's few items the encoder's share keeps the whole step's ratio lower), so
    each rate is its own size, never one that copies the first rate's count of labelled targets."""
    path = space_file(
        tmp_path,
        "  task: {grid: [ae]}\n  mask_prob: {grid: [0.2, 0.8]}\n",
        "{max_t: 2, grace_period: 1}",
        "{search: grid, max_epochs: 2, eval_every: 1}",
    )
    (ae,) = estimate(make_plan(SearchRequest(space=path, dataset="synthetic")), probe=False).directions
    low, high = sorted(ae.groups, key=lambda g: g.key["mask_prob"])
    assert (low.key["mask_prob"], high.key["mask_prob"]) == (0.2, 0.8)
    assert 1.5 < high.flops / low.flops < 4


def _cpu_ticks(pid: int) -> int:
    """A process's user + system CPU time so far, in clock ticks (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


def test_companions_train_while_the_block_runs_and_are_gone_after(data_dir):
    """The probe's companions: spawned processes that train the probed size (CPU time used) while the probe
    is timed, idle between probes, and end with the estimate."""
    plan = make_plan(SearchRequest(space="quickstart", dataset="synthetic"))
    main(["data", "prepare", "synthetic"])
    base = Config.from_dict(plan.base)
    with Companions(1, "synthetic", None, base) as companions:
        (process,) = companions.processes
        with companions.training(base, 20) as training:
            assert training == 1
            before = _cpu_ticks(process.pid)
            time.sleep(1.0)
            trained = _cpu_ticks(process.pid) - before  # most of a core idle; a tenth or more when loaded
        idle = _cpu_ticks(process.pid)
        time.sleep(1.0)
        waited = _cpu_ticks(process.pid) - idle  # between probes it waits
        assert trained >= 10 and waited <= 10 and trained > 2 * waited
    assert process.poll() is not None  # ended


def test_each_size_is_timed_beside_the_other_trials_that_run_at_once(data_dir, monkeypatch):
    """2 trials at once on 2 CPUs: each probe runs beside 1 companion; 1 at a time (--max-concurrent 1):
    alone. The estimate's line says the timings were taken side by side."""
    seen = []
    real = cost.time_size
    monkeypatch.setattr(cost, "time_size", lambda *a: seen.append(a[-1] and len(a[-1].live)) or real(*a))
    plan = make_plan(SearchRequest(space="quickstart", dataset="synthetic", cpus_per_trial=1))
    est = estimate(plan, Resources(cpus=2, gpus=0))
    assert set(seen) == {1} and all("measured side by side" in x for x in est.lines()[1:3])
    assert not any("companions did not run" in note for note in est.notes)
    seen.clear()
    est = estimate(plan, Resources(cpus=2, gpus=0, max_concurrent=1))
    assert set(seen) == {None} and not any("side by side" in x for x in est.lines())


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat: only a load average")
def test_a_load_that_starts_while_the_probe_runs_is_said_and_recorded(data_dir, monkeypatch):
    """A process that starts spinning on a core once the probe has begun (a glance before the probe missed
    such loads): the estimate says the machine is busy, and records how busy in its JSON."""
    spinners = []
    real = cost.time_size

    def beside_a_spinner(*args):
        if not spinners:  # from the first size's probe on
            spinners.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
            time.sleep(1.0)
        return real(*args)

    monkeypatch.setattr(cost, "time_size", beside_a_spinner)
    plan = make_plan(SearchRequest(space="quickstart", dataset="synthetic", cpus_per_trial=1))
    try:
        est = estimate(plan, Resources(cpus=2, gpus=0, max_concurrent=1))  # no companions: 1 spinner
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert spinners and est.busy_cores is not None and est.busy_cores >= 0.5
    assert any(note.startswith("this machine is busy (") for note in est.notes)
    assert est.to_dict()["busy_cores"] == round(est.busy_cores, 2)


def test_the_load_of_other_processes_is_the_machines_less_the_probes_own(monkeypatch):
    """30 s of the machine's CPU over 10 s, 15 of them the probe's own (and its companions'): 1.5 cores."""
    samples = iter([(100.0, 10.0, 0.0), (130.0, 25.0, 10.0)])
    monkeypatch.setattr(cost, "_cpu_times", lambda: next(samples))
    with cost.OtherLoad() as load:
        pass
    assert load.cores == 1.5
    samples = iter([(None, 10.0, 0.0), (None, 25.0, 10.0)])  # no /proc/stat: the load average
    monkeypatch.setattr(cost, "_load_average", lambda: 0.7)
    with cost.OtherLoad() as load:
        pass
    assert load.cores == 0.7


def test_a_script_without_a_main_guard_runs_once_with_its_companions(data_dir, tmp_path):
    """The companions are processes of their own: a user's script that estimates at its top level, with no
    `if __name__ == "__main__":`, is not run again by them (a spawned copy of the caller would run it)."""
    script = tmp_path / "estimate.py"
    runs = tmp_path / "runs.txt"
    script.write_text(
        "from modsar.sweep import SearchRequest, make_plan\n"
        "from modsar.sweep.cost import Resources, estimate\n"
        f"open({str(runs)!r}, 'a').write('ran\\n')\n"
        "est = estimate(make_plan(SearchRequest(space='quickstart', dataset='synthetic')), "
        "Resources(cpus=2, gpus=0))\n"
        "print(*est.notes, sep='\\n')\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert runs.read_text() == "ran\n" and "companions did not run" not in done.stdout


@pytest.mark.parametrize(
    ("patience", "searched", "said"),
    [
        (
            10,
            "",
            "patience cannot end a trial before its last epoch: 10 validation passes without a better "
            "one, one every 2 epochs, outlast 20 epochs",
        ),
        (
            9,
            "",
            "patience cannot end a trial before its last epoch: 9 validation passes",
        ),  # stops at 20 at best
        (8, "", "patience may end a trial sooner"),  # the first pass at 2, 8 more: a stop at epoch 18
        (0, "", "patience is off (train.patience 0)"),
        (10, "  train.patience: {grid: [2, 10]}\n", "patience may end a trial sooner"),
    ],
)
def test_the_estimate_says_whether_patience_can_end_a_trial(data_dir, tmp_path, patience, searched, said):
    """20 epochs, a validation pass every 2: the first pass always improves, so patience P stops a trial at
    epoch 2 (P + 1) at the earliest, before its last epoch only where that is under 20. Under a cap that
    patience cannot reach (LastFM's proof at 50 epochs) the estimate's epochs are exact but for the rungs,
    and it once said patience may end a trial sooner, of the search and of its seed re-runs alike."""
    path = space_file(
        tmp_path,
        "  task: {grid: [ae, ar]}\n" + searched,
        "{unit: steps, grace_period: 40, reduction_factor: 2}",
        "{search: grid, max_epochs: 20, eval_every: 2}",
        base="  model.hidden_size: 16\n" + ("" if searched else f"  train.patience: {patience}\n"),
    )
    lines = estimate(make_plan(SearchRequest(space=path, dataset="synthetic", seeds=3)), probe=False).lines()
    (note,) = [x for x in lines if x.startswith("  (an estimate:")]
    assert f"and {said}" in note and note.endswith(")"), note
    (seeds,) = [x for x in lines if x.startswith("  then --seeds 3:")]
    sooner = said == "patience may end a trial sooner"
    assert seeds.endswith("patience usually ends them well before)" if sooner else "cannot end them sooner)")
