"""The paper spaces' default search and their full grid one flag away: TPE per direction with ASHA in
optimizer steps by default, `--full-grid` the paper's protocol (every point, ASHA in validation passes); a
sampled direction whose grid has at most num_samples points runs that grid; a busy machine is said so. No
Ray here."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from modsar.cli import main
from modsar.errors import ModsarError
from modsar.sweep import SearchRequest, make_plan
from modsar.sweep.cost import busy_cores, busy_note
from modsar.sweep.interrupt import planned_trials, resume_command
from modsar.sweep.spaces import grid_size_by_task, load_space

PAPER_SPACES = (
    "local_attn",
    "ssept",
    "loss_ce",
    "loss_bpr",
    "loss_bce",
    "hf_albert",
    "hf_llama",
    "hf_transfo_xl",
)
PAPER_PROTOCOL = {
    "scheduler": {"max_t": 40, "grace_period": 5, "reduction_factor": 2},
    "budget": {"search": "grid", "num_samples": 1, "max_epochs": 200, "eval_every": 5},
}


@pytest.mark.parametrize("name", PAPER_SPACES)
def test_each_paper_space_defaults_to_tpe_and_keeps_the_paper_grid_one_flag_away(name):
    default = make_plan(SearchRequest(space=name, dataset=""), check=False)
    assert (default.search, default.num_samples, default.unit) == ("optuna", 20, "steps")
    assert (default.grace_period, default.reduction_factor, default.max_t) == (2000, 3, 18000)
    full = make_plan(SearchRequest(space=name, dataset="", full_grid=True), check=False)
    assert load_space(name).full_grid == PAPER_PROTOCOL
    schedule = (full.unit, full.grace_period, full.reduction_factor, full.max_t)
    assert (full.search, full.num_samples, *schedule) == ("grid", 1, "passes", 5, 2, 40)
    assert full.base == default.base  # the same trials, only the search differs
    assert planned_trials(full) == sum(grid_size_by_task(load_space(name)).values())
    assert (
        full.request.experiment_name == f"{name}--full-grid"
    )  # no dataset here: "<space>-<dataset>-full-grid"


def test_a_sampled_direction_with_a_small_grid_runs_that_grid():
    """loss_ce: AE has 80 points (TPE samples 20 of them), AR 20 (all of them, once each, as a grid)."""
    plan = make_plan(SearchRequest(space="loss_ce", dataset=""), check=False)
    assert grid_size_by_task(plan.space) == {"ae": 80, "ar": 20}
    assert plan.per_task == {"ae": ["optuna", 20], "ar": ["grid", 1]}
    assert planned_trials(plan) == 40
    more = make_plan(SearchRequest(space="loss_ce", dataset="", num_samples=19), check=False)
    assert more.per_task == {"ae": ["optuna", 19], "ar": ["optuna", 19]} and planned_trials(more) == 38


def test_the_check_says_which_direction_runs_its_grid(capsys):
    assert main(["spaces", "loss_ce", "--check"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("space 'loss_ce' (optuna search: AE 20, AR 20 trials; AR runs its grid): all 100 ")


def test_a_continuous_direction_is_always_sampled(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "params:\n  task: {grid: [ae, ar]}\n  train.lr: {loguniform: [1.0e-4, 1.0e-2], when: {task: ar}}\n"
        "  model.dropout: {grid: [0.1, 0.2]}\nbudget: {search: random, num_samples: 4}\n"
    )
    plan = make_plan(SearchRequest(space=str(path), dataset=""), check=False)
    assert plan.per_task == {"ae": ["grid", 1], "ar": ["random", 4]}


def test_full_grid_is_refused_where_it_means_nothing(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("params:\n  task: {grid: [ae, ar]}\n")
    assert main(["spaces", str(path), "--check", "--full-grid"]) == 2
    assert f"space '{path}' has no full_grid section" in capsys.readouterr().err
    assert main(["spaces", "local_attn", "--check", "--full-grid", "--search", "optuna"]) == 2
    assert "--full-grid runs a grid search; drop --search optuna" in capsys.readouterr().err
    assert main(["spaces", "local_attn", "--full-grid"]) == 2  # describing takes no protocol flag
    assert "--full-grid" in capsys.readouterr().err


@pytest.mark.parametrize(
    "section,message",
    [
        ("full_grid: [1]\n", "full_grid: must be a mapping with scheduler and budget"),
        ("full_grid: {budget: {search: optuna}}\n", "full_grid: budget.search must be grid"),
        ("full_grid: {scheduler: {grace: 2}}\n", "full_grid: unknown scheduler key 'grace'"),
        ("full_grid: {budget: {max_epochs: 0}}\n", "full_grid: 'max_epochs' must be a positive integer"),
        ("full_grid: {sampler: {}}\n", "full_grid: unknown full_grid key 'sampler'"),
    ],
)
def test_a_malformed_full_grid_section_is_one_line(tmp_path, capsys, section, message):
    path = tmp_path / "s.yaml"
    path.write_text("params:\n  task: {grid: [ae, ar]}\n" + section)
    assert main(["spaces", str(path), "--check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_the_full_grid_is_described_and_resumed_with_its_flag(capsys):
    assert main(["spaces", "local_attn"]) == 0
    out = capsys.readouterr().out
    assert (
        "  --full-grid: ASHA: max_t=40, grace_period=5, reduction_factor=2; budget: {'search': 'grid'" in out
    )
    req = SearchRequest(space="local_attn", dataset="beauty", full_grid=True)
    assert req.experiment_name == "local_attn-beauty-full-grid"
    assert resume_command(req) == "modsar search --space local_attn --dataset beauty --full-grid --resume"


def test_a_busy_machine_is_said_so():
    assert busy_note(2, busy=0.2) == ""
    assert busy_note(2, busy=1.6).startswith(
        "this machine is busy (1.6 of its 2 CPUs in use by other processes): the probe timed it shared"
    )


def test_busy_cores_sees_a_spinning_process():
    """A process spinning on one core is seen as about one busy core (the test machine may add its own)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        busy = busy_cores(1.0)
    finally:
        spinner.kill()
    assert busy is not None and busy >= 0.8


def test_the_bundled_paper_spaces_are_the_ones_listed():
    bundled = Path(__file__).parent.parent / "search_spaces"
    with_full = sorted(p.stem for p in bundled.glob("*.yaml") if load_space(str(p)).full_grid)
    assert with_full == sorted(PAPER_SPACES)


def test_seed_replicates_get_the_budget_asha_gave_their_search_trial():
    """The default's last rung (18,000 steps) comes before 200 epochs of a 176-step dataset: a replicate stops
    there too; on an 8-step dataset 200 epochs come first and nothing is added; the paper's ASHA (40 passes of
    5 epochs) ends at 200 epochs either way."""

    from modsar.sweep.selection import asha_budget as _asha_budget

    default = make_plan(SearchRequest(space="local_attn", dataset=""), check=False)
    assert _asha_budget(default, pd.Series({"steps_per_epoch": 176.0})) == {"train.max_steps": 18000}
    assert _asha_budget(default, pd.Series({"steps_per_epoch": 8.0})) == {}
    full = make_plan(SearchRequest(space="local_attn", dataset="", full_grid=True), check=False)
    assert _asha_budget(full, pd.Series({"steps_per_epoch": 176.0})) == {}
    short = make_plan(SearchRequest(space="local_attn", dataset="", full_grid=True, max_t=4), check=False)
    assert _asha_budget(short, pd.Series({"steps_per_epoch": 176.0})) == {"train.max_steps": 4 * 5 * 176}
    # a base that sets its own, smaller step budget: that budget ends the trial and its replicates alike
    own = make_plan(
        SearchRequest(space="local_attn", dataset="", overrides=["train.max_steps=5000"]), check=False
    )
    assert _asha_budget(own, pd.Series({"steps_per_epoch": 176.0})) == {}
    larger = make_plan(
        SearchRequest(space="local_attn", dataset="", overrides=["train.max_steps=30000"]), check=False
    )
    assert _asha_budget(larger, pd.Series({"steps_per_epoch": 176.0})) == {"train.max_steps": 18000}


def test_a_replicate_with_the_asha_budget_is_still_a_replica_of_its_winner():
    """The search trial's row says train.max_steps 0 (ASHA stopped it); its replicate's says 18,000 (the
    budget it was given): the same config. A replicate of another learning rate, or one given another
    budget, is not."""

    from modsar.config import Config
    from modsar.sweep.selection import is_replica

    default = make_plan(SearchRequest(space="local_attn", dataset=""), check=False)
    flat = {**Config().flat(), "steps_per_epoch": 176.0}
    winner = pd.DataFrame([{**flat, "train.max_steps": 0}])
    replicate = {**flat, "train.max_steps": 18000, "seed": 1}
    assert is_replica(default, winner, replicate)
    assert not is_replica(default, winner, {**replicate, "train.lr": 0.5})
    assert not is_replica(default, winner, {**replicate, "train.max_steps": 9000})
    full = make_plan(SearchRequest(space="local_attn", dataset="", full_grid=True), check=False)
    assert not is_replica(full, winner, replicate)  # the paper's ASHA ends at max_epochs: no budget added
    assert is_replica(full, winner, {**replicate, "train.max_steps": 0})


def test_the_search_trial_is_its_own_seeds_replicate_only_where_the_budget_ends_it_alike():
    """A replicate on the search's own seed is the trial's own run where the replicate's budget would end it
    where the trial ended: patience or its epochs first (finished under the budget), or the last rung at that
    budget (stopped at max_t, in steps). A trial an earlier rung stopped, a rung in validation passes (whose
    budget in steps may end a replicate a pass later), or a row without its step count is re-trained."""

    from modsar.sweep.selection import _own_replicate, _ran_its_replicate

    default = make_plan(SearchRequest(space="local_attn", dataset=""), check=False)
    full = make_plan(SearchRequest(space="local_attn", dataset="", full_grid=True), check=False)
    cap = {"train.max_steps": 18000}

    def row(status: str, steps: float) -> pd.Series:
        return pd.Series({"trial_id": "t1", "status": status, "steps": steps, "seed": 0, "selected": True})

    assert _ran_its_replicate(default, row("finished", 12331), cap)  # patience ended it first
    assert _ran_its_replicate(default, row("finished", 1600), {})  # no budget: its epochs end both
    assert not _ran_its_replicate(default, row("finished", 18500), cap)  # the budget would end it sooner
    assert _ran_its_replicate(default, row("stopped", 18507), cap)  # the last rung: the budget's own pass
    assert not _ran_its_replicate(default, row("stopped", 6020), cap)  # an earlier rung: trains on
    assert not _ran_its_replicate(full, row("stopped", 18507), cap)  # rungs in passes
    assert not _ran_its_replicate(default, row("finished", float("nan")), cap)
    assert not _ran_its_replicate(default, row("error", 12331), cap)
    own = _own_replicate(row("stopped", 18507), cap)  # a replicate ends at its budget on its own
    assert own["role"] == "seed" and own["selected"] is False and own["replica_of"] == "t1"
    assert own["status"] == "finished" and own["steps"] == 18507
    assert own["trial_id"] == "t1-seed0" and own["train.max_steps"] == 18000


def test_an_interrupted_seed_rerun_goes_on_only_with_the_replicates_still_wanted():
    """The seeds' Tuner a cut-off re-run left goes on where what it would run (or record) is what is wanted:
    seeds 0-2 of the selected config, seed 0 done (its row written), 1 mid-run, 2 not started."""
    from types import SimpleNamespace

    from modsar.sweep.selection import _goes_on_with

    def point(seed: int, lr: float = 0.001) -> dict:
        return {"train.lr": lr, "train.max_steps": 18000, "seed": seed}

    def trial(seed: int, status: str, lr: float = 0.001) -> SimpleNamespace:
        return SimpleNamespace(config={"point": point(seed, lr)}, status=status, trial_id=f"t{seed}{lr}")

    rows = pd.DataFrame({"trial_id": ["t00.001"]})
    every, wanted = [point(0), point(1), point(2)], [point(1), point(2)]
    left = [trial(0, "TERMINATED"), trial(1, "RUNNING"), trial(2, "PENDING")]
    assert _goes_on_with(every, wanted, rows)(left)
    # a trial that ended without its row (the driver was killed first, or the disk refused it) is recorded
    assert _goes_on_with(every, wanted, rows)([trial(0, "TERMINATED"), trial(1, "TERMINATED"), left[2]])
    # an errored replicate is retried from its checkpoint
    assert _goes_on_with(every, wanted, rows)([left[0], trial(1, "ERROR"), left[2]])
    # --seeds 2 now: seed 2 is no longer asked for, and a fresh Tuner runs seed 1
    assert not _goes_on_with(every[:2], wanted[:1], rows)(left)
    # --seeds 4 now: seed 3 is not among its trials
    assert not _goes_on_with([*every, point(3)], [*wanted, point(3)], rows)(left)
    # a selection redone since: its trials replicate another learning rate
    assert not _goes_on_with(every, wanted, rows)([trial(s, "PENDING", lr=0.01) for s in range(3)])
    # seed 1 ended with a row the re-run set aside (an error Tune never saw): trained again, afresh
    ended = pd.DataFrame({"trial_id": ["t00.001", "t10.001"]})
    assert not _goes_on_with(every, wanted, ended)([left[0], trial(1, "TERMINATED"), left[2]])


def test_the_time_breakdown_of_hand_made_runs_and_rows():
    """Two runs of a search (one resumed): the driver's parts add up over runs, the slot-seconds are each
    Tuner's wall-clock times its slots, and the trials' parts come from their rows."""

    from modsar.sweep.timing import breakdown

    runs = [
        {
            "slots": 2,
            "connect_s": 4.0,
            "directions": {"ae": 100.0},
            "select_test_s": 0.0,
            "seeds_s": 0.0,
            "wall_s": 105.0,
        },
        {
            "slots": 2,
            "connect_s": 3.0,
            "directions": {"ae": 20.0, "ar": 50.0},
            "select_test_s": 2.0,
            "seeds_s": 0.0,
            "wall_s": 76.0,
        },
    ]
    rows = pd.DataFrame(
        {
            "role": ["search"] * 3 + ["seed"],
            "task": ["ae", "ae", "ar", "ar"],
            "epochs_run": [10, 20, 10, 99],
            "passes": [2, 4, 2, 99],
            "wall_time_s": [60.0, 150.0, 80.0, 999.0],
            "setup_s": [1.0, 2.0, 1.0, 9.0],
            "epoch_time_s": [5.0, 6.0, 7.0, 9.0],
            "eval_time_s": [1.0, 1.0, 2.0, 9.0],
            "checkpoint_s": [0.5, 0.5, 0.5, 9.0],
            "report_s": [0.5, 0.5, 0.5, 9.0],
        }
    )
    table = breakdown(runs, rows).set_index("part")
    assert table.loc["ae", "wall_s"] == 120.0 and table.loc["ae", "slot_s"] == 240.0
    assert table.loc["ae", "trial_s"] == 210.0 and table.loc["ae", "idle_s"] == 30.0
    assert table.loc["ae", "train_s"] == 5 * 10 + 6 * 20 and table.loc["ae", "valid_s"] == 2 + 4
    assert table.loc["ar", "other_s"] == 80.0 - (1.0 + 70.0 + 4.0 + 0.5 + 0.5)
    whole = table.loc["search"]
    assert (whole["wall_s"], whole["connect_s"], whole["select_test_s"], whole["trials"]) == (
        181.0,
        7.0,
        2.0,
        3,
    )
    assert whole["busy"] == (210.0 + 80.0) / (240.0 + 100.0)  # the seed re-run is no search trial


def test_a_malformed_search_json_never_fails_the_clock(tmp_path):
    """The clock is a fact about the search: a search.json that is no JSON object, or unreadable, is left as
    it is; a readable one gets this run's entry once, replaced as the run goes on."""
    from modsar.sweep.timing import SearchClock
    from modsar.sweep.tuner import _record_clock

    path = tmp_path / "search.json"
    path.write_text("[1, 2]")
    _record_clock(str(path), SearchClock())
    assert path.read_text() == "[1, 2]"
    _record_clock(str(tmp_path / "missing.json"), SearchClock())
    path.write_text('{"status": "running", "timing": [{"wall_s": 5.0}, "junk"]}')
    clock = SearchClock(slots=2)
    _record_clock(str(path), clock)
    _record_clock(str(path), clock)
    stored = json.loads(path.read_text())
    assert stored["status"] == "running" and len(stored["timing"]) == 2
    assert stored["timing"][0] == {"wall_s": 5.0} and stored["timing"][1]["slots"] == 2


def test_a_running_search_keeps_its_clock_in_search_json_as_it_goes(tmp_path):
    """A driver killed without warning keeps its run's seconds: clock_kept writes the clock at once and then
    every few seconds, with the part in progress counted so far, into one entry replaced each time (and
    another thread's status change is never written back over)."""
    from modsar.sweep.interrupt import record_state
    from modsar.sweep.timing import SearchClock
    from modsar.sweep.tuner import clock_kept

    path = tmp_path / "search.json"
    path.write_text('{"status": "running", "timing": [{"wall_s": 5.0}]}')
    clock = SearchClock(slots=2)
    with clock_kept(str(path), clock, every_s=0.02), clock.part("direction:ae"):
        time.sleep(0.3)
        mid = json.loads(path.read_text())
        record_state(str(path), "interrupted")
        time.sleep(0.1)
        late = json.loads(path.read_text())
    assert len(mid["timing"]) == 2 and mid["timing"][0] == {"wall_s": 5.0}
    run = mid["timing"][1]
    assert run["slots"] == 2 and 0.1 < run["directions"]["ae"] <= run["wall_s"] < 0.3 + 0.5
    assert late["status"] == "interrupted" and late["timing"][1]["directions"]["ae"] > run["directions"]["ae"]
    assert datetime.fromisoformat(run["started_at"]).tzinfo is not None
    assert "load_mean" not in run  # not sampled in a run's first minute, while the average still settles
    final = json.loads(path.read_text())["timing"]
    assert len(final) == 2 and final[1]["directions"]["ae"] == clock.directions["ae"] >= 0.4


def test_the_clock_samples_the_machines_load_once_the_average_has_settled():
    from modsar.sweep.timing import SearchClock

    clock = SearchClock(slots=2)
    clock.sample_load()  # the run's first minute: the average still holds what ran before it
    assert "load_mean" not in clock.record()
    clock.sample_load(settle_s=0.0)
    clock.sample_load(settle_s=0.0)
    assert len(clock.loads) == 2 and clock.record()["load_mean"] == sum(clock.loads) / 2 >= 0.0


def test_a_search_ends_with_its_time_against_its_estimate_and_says_when_the_machine_was_shared():
    """The directions' seconds over every run against the estimate's; a mean load (weighted by each run's
    wall-clock) half a core or more beyond the search's trials says the machine was shared, as it went."""
    from modsar.sweep.timing import against_estimate

    idle = {"directions": {"ae": 600.0, "ar": 500.0}, "slots": 2, "wall_s": 1200.0, "load_mean": 2.1}
    assert against_estimate({"estimate": {"seconds": 1000.0}, "timing": [idle]}) == (
        "time: the search took 1,100 s against the 1,000 s its estimate printed (+10%)"
    )
    # seed re-runs an older estimate (no ceiling) did not cover, then one that did
    seeded = {**idle, "seeds_s": 700.0}
    assert against_estimate({"estimate": {"seconds": 1000.0}, "timing": [seeded]}) == (
        "time: the search took 1,100 s against the 1,000 s its estimate printed (+10%; seed re-runs aside, "
        "which it does not cover)"
    )
    covered = {"seconds": 1000.0, "seeds": 3, "seeds_seconds": 900.0}
    assert against_estimate({"estimate": covered, "timing": [seeded], "request": {"seeds": 3}}) == (
        "time: the search took 1,100 s against the 1,000 s its estimate printed (+10%), its seed re-runs "
        "700 s against a ceiling of 900 s"
    )
    # resumed with more seeds than the estimate costed: its ceiling is not theirs
    more = against_estimate({"estimate": covered, "timing": [seeded], "request": {"seeds": 5}})
    assert more.endswith("(+10%; seed re-runs aside, which it does not cover)")
    first = {"directions": {"ae": 600.0}, "slots": 2, "wall_s": 600.0, "load_mean": 2.0}
    shared = {"directions": {"ar": 1200.0}, "slots": 2, "wall_s": 1800.0, "load_mean": 3.2}
    line = against_estimate({"estimate": {"seconds": 2400.0}, "timing": [first, shared]})
    assert line.startswith("time: the search took 1,800 s against the 2,400 s its estimate printed (-25%);")
    assert line.endswith(
        "the machine was shared: its load averaged 2.9 beside the search's 2 trials at a "
        "time, so this is not an idle machine's time"
    )
    older = {k: v for k, v in shared.items() if k != "load_mean"}  # a clock kept before loads were sampled
    assert "shared" not in against_estimate({"estimate": {"seconds": 2400.0}, "timing": [older]})
    assert (
        against_estimate({"timing": [idle]}) == "" and against_estimate({"estimate": {"seconds": 9.0}}) == ""
    )
    # a run killed before its clock was written (AE's 900 trial-seconds ran then): no comparison, which
    # would read as a search 90% faster than it was; with its trials' time all counted, the comparison
    killed = {"directions": {"ar": 100.0}, "slots": 1, "wall_s": 110.0}
    rows = pd.DataFrame({"role": ["search", "search"], "task": ["ae", "ar"], "wall_time_s": [900.0, 95.0]})
    assert against_estimate({"estimate": {"seconds": 1000.0}, "timing": [killed]}, rows) == (
        "time: not compared with the 1,000 s its estimate printed: a run of this search was stopped before "
        "its clock was written, so the 100 s its clock kept miss some of the time its trials ran"
    )
    whole = {"directions": {"ae": 910.0, "ar": 100.0}, "slots": 1, "wall_s": 1020.0}
    assert against_estimate({"estimate": {"seconds": 1000.0}, "timing": [whole]}, rows) == (
        "time: the search took 1,010 s against the 1,000 s its estimate printed (+1%)"
    )


def test_the_span_of_trials_and_a_clock_that_lost_a_killed_run():
    """trials_span_s is the union of the trials' stretches ([0, 100], [50, 150], [200, 250]: 200 s);
    clock_lost says when the trials ran more seconds than the runs' recorded slots held (a run killed before
    its clock was kept)."""

    from modsar.sweep.timing import clock_lost, trials_span_s

    t0 = pd.Timestamp("2026-12-05T10:00:00Z")
    rows = pd.DataFrame(
        {
            "role": ["search", "search", "search", "seed"],
            "finished_at": [str(t0 + pd.Timedelta(seconds=s)) for s in (100, 150, 250, 900)],
            "wall_time_s": [100.0, 100.0, 50.0, 400.0],
        }
    )
    assert trials_span_s(rows[rows["role"] == "search"]) == 200.0
    assert trials_span_s(rows.iloc[[2, 0]]) == 150.0
    assert math.isnan(trials_span_s(rows.drop(columns="finished_at")))
    assert math.isnan(trials_span_s(rows, "halving"))  # a waiting trial's row ends when its rung decides
    # a trial restored from a checkpoint ran part of its seconds in an earlier run: left out, not dated
    restored = rows.assign(reports=[2, 2, 1, 2], passes=[2, 2, 1, 5])
    assert trials_span_s(restored) == 200.0 and trials_span_s(restored.iloc[[3]]) == 0.0
    runs = [{"slots": 2, "directions": {"ae": 100.0}}]  # 200 slot-seconds held; the search trials used 250
    assert clock_lost(runs, rows)
    assert not clock_lost([{"slots": 2, "directions": {"ae": 100.0, "ar": 30.0}}], rows)  # 260 held


def test_a_sampled_continuous_direction_beside_a_gridded_one_plans_and_checks(tmp_path, capsys):
    """AE samples a continuous mask rate; AR's two points run as a grid: the plan, its check and its count
    never treat AE as a grid."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "params:\n  task: {grid: [ae, ar]}\n  mask_prob: {uniform: [0.1, 0.5], when: {task: ae}}\n"
        "  model.dropout: {grid: [0.1, 0.2]}\nbudget: {search: optuna, num_samples: 4}\n"
    )
    plan = make_plan(SearchRequest(space=str(path), dataset=""), check=False)
    assert plan.per_task == {"ae": ["optuna", 4], "ar": ["grid", 1]} and plan.trials == {"ae": 4, "ar": 2}
    assert planned_trials(plan) == 6
    assert main(["spaces", str(path), "--check"]) == 0
    assert "(optuna search: AE 4, AR 2 trials; AR runs its grid)" in capsys.readouterr().out


def test_switches_are_bools_and_an_old_grid_search_is_told_how_to_resume():
    from modsar.errors import ModsarError
    from modsar.sweep.restore import check_same_search as _check_same_search
    from modsar.sweep.restore import search_settings as _search_settings

    with pytest.raises(ModsarError, match="full_grid must be True or False; got 'yes'"):
        SearchRequest(space="local_attn", dataset="beauty", full_grid="yes")  # type: ignore[arg-type]
    default = make_plan(SearchRequest(space="local_attn", dataset="", experiment="e"), check=False)
    full = make_plan(SearchRequest(space="local_attn", dataset="", full_grid=True), check=False)
    stored = _search_settings(full)  # what a grid search started before this default wrote, more or less
    with pytest.raises(ModsarError) as refused:
        _check_same_search(default, stored, _search_settings(default))
    assert str(refused.value).endswith("a full-grid search resumes with --full-grid --experiment e --resume")


def test_every_search_request_field_is_one_option_of_modsar_search():
    """The request is declared once: each SearchRequest field is read from the `modsar search` option of its
    name (OPTION_DEST where the names differ), and resume_command gives it back under that option."""
    import argparse
    import dataclasses

    from modsar.cli import search as search_cli
    from modsar.sweep.plan import OPTION_DEST

    parser = argparse.ArgumentParser()
    search_cli.add_parser(parser.add_subparsers())
    sub = parser._subparsers._group_actions[0].choices["search"]  # type: ignore[union-attr]
    dests = {a.dest for a in sub._actions}
    fields = {f.name for f in dataclasses.fields(SearchRequest)}
    assert {OPTION_DEST.get(f, f) for f in fields} <= dests
    assert dests - {OPTION_DEST.get(f, f) for f in fields} == {"help", "no_estimate", "json"}
    args = sub.parse_args(
        ["--space", "local_attn", "--dataset", "beauty", "--time-budget", "60", "--full-grid", "a=1"]
    )
    req = search_cli._request(args)
    assert (req.time_budget_s, req.full_grid, req.overrides) == (60.0, True, ["a=1"])
    assert "--time-budget 60 --full-grid" in resume_command(
        req
    ) or "--full-grid --time-budget 60" in resume_command(req)
    # the option's default and help are the field's own: said once, in modsar.sweep.request
    plain = search_cli._request(sub.parse_args(["--space", "s", "--dataset", "d"]))
    assert plain == SearchRequest(space="s", dataset="d")
    by_dest = {a.dest: a for a in sub._actions}
    for f in dataclasses.fields(SearchRequest):
        if f.name != "data_dir":  # --data-dir: every command's own (cli.common)
            assert by_dest[OPTION_DEST.get(f.name, f.name)].help == f.metadata["help"], f.name


def test_a_plan_pickled_before_directions_existed_still_answers():
    """A resumed search's Tune state holds plans pickled by the ModSAR that started it: one from before
    per-direction searches answers with the search's own algorithm and samples."""
    import pickle

    plan = make_plan(SearchRequest(space="loss_ce", dataset=""), check=False)
    old = pickle.loads(pickle.dumps(plan))
    del old.__dict__["per_task"]
    assert (old.search_of("ar"), old.samples_of("ar")) == ("optuna", 20)


def test_a_request_takes_each_field_of_its_type_only():
    """The API passes anything: each SearchRequest value is of its field's type, or one line names it."""
    for wrong, message in [
        ({"cpus_per_trial": "abc"}, "cpus_per_trial must be a number; got 'abc'"),
        ({"seeds": 2.5}, "seeds must be a whole number; got 2.5"),
        ({"max_t": True}, "max_t must be a whole number or None; got True"),
        ({"quiet": "yes"}, "quiet must be True or False; got 'yes'"),
        ({"overrides": [5]}, "overrides must be a list of texts; got [5]"),
    ]:
        with pytest.raises(ModsarError, match=re.escape(message)):
            SearchRequest(space="quickstart", dataset="synthetic", **wrong)


def test_a_value_given_both_as_an_option_and_as_an_override_is_refused():
    with pytest.raises(ModsarError, match=r"override 'seed=5' repeats --seed, which sets it for the search"):
        make_plan(SearchRequest(space="quickstart", dataset="", overrides=["seed=5"]), check=False)
    with pytest.raises(ModsarError, match=r"override 'train.max_epochs=7' repeats --max-epochs"):
        make_plan(
            SearchRequest(space="quickstart", dataset="", max_epochs=3, overrides=["train.max_epochs=7"]),
            check=False,
        )
    for factor in (0, 99999999999999999999):  # the second once a numpy overflow, an "internal error"
        with pytest.raises(ModsarError, match=rf"--reduction-factor must be from 2 to 1000 .*; got {factor}"):
            make_plan(SearchRequest(space="quickstart", dataset="", reduction_factor=factor), check=False)
