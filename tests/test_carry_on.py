"""A direction cut off mid-way goes on from its ended trials' rows (modsar.sweep.carry_on): the rung records
ASHA rebuilds from their curves, the sampler told their values, the grid points left. Known answers by hand;
the whole path with real Ray is in tests/test_search.py."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from ray.tune.schedulers import ASHAScheduler

from modsar.sweep.carry_on import Carried, carried_rows, point_key, repeated_rows, replays_of
from modsar.sweep.searcher import sampled_search
from modsar.sweep.spaces import load_space

SPACES = Path(__file__).parent / "spaces"


def _row(trial_id: str, curve: list[list[float]], index: int, **values) -> dict:
    epochs = int(curve[-1][0]) if curve else 0
    return {
        "trial_id": trial_id,
        "role": "search",
        "task": "ae",
        "status": "stopped",
        "curve": json.dumps(curve),
        "steps": 20 * epochs,  # 20 steps an epoch
        "epochs_run": epochs,
        "trial_index": index,
        **values,
    }


class _Plan:
    """What record_rungs reads of a plan: the scheduler's unit."""

    def __init__(self, unit: str) -> None:
        self.unit = unit


def _records(scheduler: ASHAScheduler) -> dict[int, dict[str, float]]:
    return {int(m): dict(r) for m, r in scheduler._brackets[0]._rungs if r}


def test_asha_rungs_rebuilt_from_the_rows_curves_in_passes_and_in_steps():
    """Validation every 5 epochs: a pass's value at a rung is the best so far (strictly better improves);
    a trial records each rung it reached, once, and none it did not reach."""
    rows = pd.DataFrame(
        [
            _row("a", [[5, 0.1], [10, 0.3], [15, 0.2], [20, 0.5]], 0),
            _row("b", [[5, 0.4], [10, 0.2]], 1),  # stopped at the second rung
            _row("c", [], 2),  # never validated: no record
        ]
    )
    carried = Carried("ae", rows)
    passes = ASHAScheduler(time_attr="training_iteration", grace_period=1, reduction_factor=2, max_t=8)
    carried.record_rungs(passes, _Plan("passes"))  # type: ignore[arg-type]
    assert _records(passes) == {1: {"a": 0.1, "b": 0.4}, 2: {"a": 0.3, "b": 0.4}, 4: {"a": 0.5}}
    # in steps: passes at 100, 200, 300, 400 steps; rungs at 100, 200, 400 (one record a report, as ASHA)
    steps = ASHAScheduler(time_attr="steps", grace_period=100, reduction_factor=2, max_t=800)
    carried.record_rungs(steps, _Plan("steps"))  # type: ignore[arg-type]
    assert _records(steps) == {100: {"a": 0.1, "b": 0.4}, 200: {"a": 0.3, "b": 0.4}, 400: {"a": 0.5}}


def test_the_grid_points_left_are_those_without_a_row_in_grid_order():
    """asha.yaml's AE grid: 8 points (mask_prob x dropout x lr); two ended, six left; twice as many runs
    of each (num_samples 2) leave two runs of every point but the two ended ones, which have one."""
    space = load_space(str(SPACES / "asha.yaml")).for_task("ae")
    grid = space.grid_points()
    assert len(grid) == 8
    ended = [grid[1], grid[6]]
    rows = pd.DataFrame([_row(f"t{i}", [[1, 0.1]], i, **point) for i, point in enumerate(ended)])
    carried = carried_rows(rows, "ae")
    assert carried.points(space) == ended
    assert carried.grid_left(space, 1) == [p for i, p in enumerate(grid) if i not in (1, 6)]
    twice = carried.grid_left(space, 2)
    assert len(twice) == 14 and twice.count(grid[1]) == 1 and twice.count(grid[0]) == 2
    assert not len(carried_rows(rows, "ar"))  # another direction's rows are not this one's


def test_the_sampler_is_told_the_ended_trials_and_never_draws_them_again():
    """A space of four points (2 x 2 categorical): three ended trials told with their values; the next
    draw can only be the fourth point, and the study holds the three told values."""
    space = load_space(str(SPACES / "asha.yaml")).for_task("ar")  # dropout x lr: 4 points
    grid = space.grid_points()
    assert len(grid) == 4
    rows = pd.DataFrame(
        [
            _row(f"t{i}", [[1, v]], i, **{**p, "valid.ndcg@10": v})
            for i, (p, v) in enumerate(zip(grid, (0.1, 0.3, 0.2), strict=False))
        ]
    )
    limiter = sampled_search(space.suggest, "optuna", "best.ndcg@10", seed=0, concurrent=2)
    carried_rows(rows.assign(task="ar"), "ar").tell_sampler(limiter.searcher, space, "ndcg@10")
    study = limiter.searcher._study
    assert [(t.params, t.value) for t in study.trials] == [
        (p, v) for p, v in zip(grid, (0.1, 0.3, 0.2), strict=False)
    ]
    drawn = limiter.suggest("new")
    assert drawn == grid[3]


def test_a_point_is_one_key_whatever_type_its_numbers_come_back_as(tmp_path):
    """A space's `0` comes back from a row as `0.0` (a config's float field): the same point, so a grid
    point with a row is not run again, and its replay is found."""
    path = tmp_path / "ints.yaml"
    path.write_text(
        "description: a grid with an integer value\nbase: {task: ar}\n"
        "params:\n  train.weight_decay: {grid: [0, 1.0e-4]}\n  train.lr: {grid: [0.001, 0.01]}\n"
        "budget: {search: grid, num_samples: 1, max_epochs: 1, eval_every: 1}\n"
    )
    space = load_space(str(path)).for_task("ar")
    grid = space.grid_points()
    assert grid[0] == {"train.weight_decay": 0, "train.lr": 0.001}
    rows = pd.DataFrame([_row("t0", [[1, 0.1]], 0, **{"train.weight_decay": 0.0, "train.lr": 0.001})])
    carried = carried_rows(rows.assign(task="ar"), "ar")
    assert point_key(grid[0]) == point_key(carried.points(space)[0])
    assert carried.grid_left(space, 1) == grid[1:]


def test_of_two_rows_of_one_point_the_longer_or_the_one_kept_stays():
    """A replay cut off before it replaced its old row leaves two rows of one point: all but one are set
    aside, the longer curve staying, or the row of the fit that just ran."""
    space = load_space(str(SPACES / "asha.yaml")).for_task("ar")
    point = space.grid_points()[0]
    rows = pd.DataFrame(
        [
            _row("old", [[1, 0.1], [2, 0.2], [3, 0.3]], 0, **point),
            _row("new", [[1, 0.1]], 5, **point),
            _row("other", [[1, 0.1]], 1, **space.grid_points()[1]),
        ]
    ).assign(task="ar")
    carried = carried_rows(rows, "ar")
    assert [r["trial_id"] for r in repeated_rows(carried, space, keep=set())] == ["new"]
    assert [r["trial_id"] for r in repeated_rows(carried, space, keep={"new"})] == ["old"]


def test_a_row_whose_curve_or_counts_are_not_what_a_search_writes_is_not_replayed():
    """A row edited by hand (its curve no JSON list of pairs, its epochs missing) breaks nothing: it records
    no rung and is not replayed (its point trains again), and the well-formed row beside it still is."""
    space = load_space(str(SPACES / "asha.yaml")).for_task("ar")
    grid = space.grid_points()
    rows = pd.DataFrame(
        [
            _row("bad", [], 0, **grid[0]) | {"curve": "not json", "epochs_run": float("nan")},
            _row("odd", [], 1, **grid[1]) | {"curve": '[["x", 1]]'},
            _row("good", [[1, 0.2], [2, 0.3]], 2, **grid[2]),
        ]
    ).assign(task="ar")
    carried = carried_rows(rows, "ar", replay=True)
    assert list(carried.replayable("steps")["trial_id"]) == ["good"]
    scheduler = ASHAScheduler(time_attr="training_iteration", grace_period=1, reduction_factor=2, max_t=4)
    carried.record_rungs(scheduler, _Plan("passes"))  # type: ignore[arg-type]
    assert _records(scheduler) == {1: {"good": 0.2}, 2: {"good": 0.3}}
    assert list(replays_of(Carried("ar", carried.replayable("passes"), True), space, "ndcg@10")) == [
        point_key(grid[2])
    ]


def test_rung_times_in_steps_are_the_steps_each_pass_recorded():
    """Batches of tokens vary an epoch's steps: passes at epochs 5, 10, 15 that took 98, 203, 297 steps (a
    steps-per-epoch estimate, 297 // 15 = 19, would put the first two at 95, 190). A rung at 200 steps is
    crossed at the second pass as recorded, where the estimate would put it at the third, so the rungs
    record other values; the replayed reports carry the recorded steps. A row without `curve_steps`
    (written before rows recorded them) falls back to the estimate, and so does one whose recorded steps
    miss a pass of its curve."""
    space = load_space(str(SPACES / "asha.yaml")).for_task("ae")
    grid = space.grid_points()
    curve = [[5, 0.1], [10, 0.3], [15, 0.5]]
    recorded = _row("tok", curve, 0, **grid[0]) | {
        "steps": 297,
        "curve_steps": json.dumps([[5, 98], [10, 203], [15, 297]]),
    }
    estimated = _row("old", curve, 1, **grid[1]) | {"steps": 297}
    partial = _row("part", curve, 2, **grid[2]) | {"steps": 297, "curve_steps": json.dumps([[5, 98]])}
    carried = Carried("ae", pd.DataFrame([recorded, estimated, partial]))
    scheduler = ASHAScheduler(time_attr="steps", grace_period=100, reduction_factor=2, max_t=400)
    carried.record_rungs(scheduler, _Plan("steps"))  # type: ignore[arg-type]
    # ASHA records a report at the highest rung it reached and has no record at: "tok" at 203 steps records
    # .3 at rung 200, then at 297 its .5 at rung 100; the others record .3 at rung 100 (190), .5 at 200 (285)
    assert _records(scheduler) == {
        100: {"tok": 0.5, "old": 0.3, "part": 0.3},
        200: {"tok": 0.3, "old": 0.5, "part": 0.5},
    }
    # the estimate's last pass is the row's own steps, 297, not 15 x 19 = 285: past a rung at 290
    late = ASHAScheduler(time_attr="steps", grace_period=145, reduction_factor=2, max_t=580)
    Carried("ae", pd.DataFrame([estimated])).record_rungs(late, _Plan("steps"))  # type: ignore[arg-type]
    assert _records(late) == {145: {"old": 0.3}, 290: {"old": 0.5}}
    replays = replays_of(Carried("ae", carried.rows, True), space, "ndcg@10")
    assert [r["steps"] for r in replays[point_key(grid[0])]] == [98, 203, 297]
    # the estimate's last pass is at the row's own steps (the row's facts come with the last report)
    assert [r["steps"] for r in replays[point_key(grid[1])]] == [95, 190, 297]
    assert [r["steps"] for r in replays[point_key(grid[2])]] == [95, 190, 297]
