"""Going on with a direction whose Tune state is gone (another machine, a removed ray-* folder) from the rows
its ended trials wrote, so that no ended trial is trained again.

A search folder as it is committed holds search.json and one row per ended trial, never Ray's state or a
checkpoint. A session's end that cuts a direction off mid-way on a machine that is then lost leaves exactly
that. A direction can go on from it where the rows hold everything its scheduler and sampler need:

- a grid direction runs only the points (times num_samples) that have no row yet;
- a sampled one (TPE or uniform) draws only the trials it still lacks, after its sampler was told each ended
  trial's configuration and value: TPE learns from them, and never draws one of them again
  (searcher.DistinctOptunaSearch);
- Ray's ASHA gets each ended trial's value at every rung it reached, rebuilt from the row's validation curve
  (the best value so far at that pass, what the trial reported), by ASHA's own bookkeeping: the trials still
  to run are cut against the same records they would have met had the earlier trials run first.

A trial that was running when the state was lost left no row: a grid point trains again from its start, a
sampled one is drawn afresh. Successive halving waits at each rung for every trial of the direction, and a
waiting trial writes no row, so a direction under it runs again from its start (tuner._set_aside_orphans).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pandas as pd

if TYPE_CHECKING:
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import Searcher

    from modsar.sweep.plan import Plan
    from modsar.sweep.spaces import SearchSpace


@dataclass(frozen=True)
class _RowTrial:
    """What ASHA's bookkeeping reads of a trial: its id."""

    trial_id: str


@dataclass
class Carried:
    """A direction's ended trials (their role=search rows), which a fresh Tuner goes on from."""

    task: str
    rows: pd.DataFrame

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def errors(self) -> int:
        """How many of the ended trials failed."""
        return int((self.rows["status"] == "error").sum()) if len(self.rows) else 0

    def trials_left(self, plan: Plan) -> int:
        """How many trials the direction still runs: its grid points (times num_samples) without a row, or
        its samples less the ended ones."""
        space, samples = plan.space.for_task(self.task), plan.samples_of(self.task)
        if plan.search_of(self.task) == "grid":
            return len(self.grid_left(space, samples))
        return max(0, samples - len(self))

    def points(self, space: SearchSpace) -> list[dict[str, Any]]:
        """Each ended trial's sampled values (the params active at its point, as its row holds them), in the
        order the trials were made."""
        return [_sampled(space, row) for row in self._in_order()]

    def _in_order(self) -> list[dict[str, Any]]:
        """The rows in the order their trials were made (their place in the search, then their id)."""
        by = [c for c in ("trial_index", "trial_id") if c in self.rows]
        return self.rows.sort_values(by, na_position="last").to_dict("records")

    def grid_left(self, space: SearchSpace, repeats: int) -> list[dict[str, Any]]:
        """The grid points still to train: each point `repeats` times (the Tuner's num_samples) less the
        ended trials of that point, in the grid's order."""
        done = Counter(_key(point) for point in self.points(space))
        left = []
        for point in space.grid_points():
            runs = repeats - done[_key(point)]
            left += [point] * max(0, runs)
        return left

    def tell_sampler(self, searcher: Searcher, space: SearchSpace, monitor: str) -> None:
        """Tell the sampler (a ConcurrencyLimiter's DistinctOptunaSearch) every ended trial's configuration
        and its value (the best validation value it reached, as Tune told the sampler when it ended)."""
        from modsar.sweep.searcher import DistinctOptunaSearch

        assert isinstance(searcher, DistinctOptunaSearch), "a sampled direction's searcher (sampled_search)"
        for row in self._in_order():
            value = pd.to_numeric(row.get(f"valid.{monitor}"), errors="coerce")
            searcher.tell_ended(_sampled(space, row), None if pd.isna(value) else float(value))

    def record_rungs(self, scheduler: ASHAScheduler, plan: Plan) -> None:
        """Put each ended trial's value at every ASHA rung it reached into the scheduler's records, by
        replaying its validation passes through ASHA's own bracket (whose decisions are ignored: the trial
        ended long ago)."""
        bracket = scheduler._brackets[0]  # one bracket: modsar makes ASHA with Ray's default of one
        for row in self.rows.to_dict("records"):
            trial = cast("Trial", _RowTrial(str(row["trial_id"])))
            for time, best in _passes(row, plan.unit):
                bracket.on_result(trial, time, best)


def carried_rows(rows: pd.DataFrame, task: str) -> Carried:
    """The ended trials of direction `task` among a search's rows (role search)."""
    if not len(rows):
        return Carried(task, rows)
    return Carried(task, rows[(rows["role"] == "search") & (rows["task"] == task)])


def can_carry_on(plan: Plan) -> bool:
    """Whether a direction of this plan can go on from its rows: not under successive halving, whose waiting
    trials wrote none (module docstring)."""
    return plan.scheduler != "halving"


def _sampled(space: SearchSpace, row: dict[str, Any]) -> dict[str, Any]:
    """The values a trial sampled, read from its row: the params active at its point, in the space's
    order (as SearchSpace.points builds a grid point)."""
    point: dict[str, Any] = {}
    for p in space.params:
        if p.active(point):
            value = row[p.key]
            point[p.key] = value.item() if hasattr(value, "item") else value
    return point


def _key(point: dict[str, Any]) -> str:
    """A point as a comparable key (its values as the row and the grid hold them)."""
    return json.dumps(point, sort_keys=True, default=str)


def _passes(row: dict[str, Any], unit: str) -> list[tuple[int, float]]:
    """(time in the scheduler's unit, best validation value so far) at each validation pass of a trial,
    from its row's curve: a pass is a report (Tune's training_iteration), and in steps a pass at epoch e is
    at e times the trial's steps per epoch."""
    curve = json.loads(row["curve"]) if isinstance(row.get("curve"), str) else []
    steps, epochs = pd.to_numeric(row.get("steps"), errors="coerce"), row.get("epochs_run")
    per_epoch = int(steps) // int(epochs) if unit == "steps" and not pd.isna(steps) and epochs else 0
    out, best = [], float("-inf")
    for k, (epoch, value) in enumerate(curve, start=1):
        best = max(best, float(value))  # a pass improves on a strictly better value (training.state)
        out.append((int(epoch) * per_epoch if unit == "steps" else k, best))
    return out
