"""Going on with a direction whose Tune state is gone (another machine, a removed ray-* folder) from the rows
its trials wrote, so that what a row holds is not trained again (but to go on past it).

A search folder as it is committed holds search.json and one row per trial, never Ray's state or a
checkpoint. A session's end that cuts a direction off mid-way on a machine that is then lost leaves exactly
that. The direction goes on from it:

- Under Ray's ASHA, a grid direction runs only the points (times num_samples) that have no row yet; a sampled
  one draws only the trials it still lacks, after its sampler was told each ended trial's configuration and
  value: TPE learns from them, and never draws one of them again (searcher.DistinctOptunaSearch). ASHA gets
  each ended trial's value at every rung it reached, rebuilt from the row's validation curve (the best value
  so far at that pass, what the trial reported), by ASHA's own bookkeeping: the trials left are cut against
  the records they would have met had the ended trials run first.
- Under successive halving, a rung waits for every trial of the direction, and a trial waiting there writes
  its row so far (status paused, sweep.rows.ResultRows). Every trial with a row is made again, in its order
  (the grid's points, or the sampler's queue), and replays its row's reports without training
  (replays_of; sweep.trial): the rungs decide on the values they decided on before, and TPE hears them at
  the first rung as it did. A replayed trial that a rung sends on trains its replayed epochs again,
  unreported (one config and seed give one curve), and goes on; its new row replaces the old one, kept as
  superseded.

A trial that was running when the state was lost, and had written no row, trains again from its start (a
grid point) or is drawn afresh (a sampled one); an errored trial's row is set aside and its point runs
again. A winner whose checkpoint is gone with the machine is tested by training it again on its seed
(sweep.selection).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pandas as pd

from modsar.records.rows import PROGRESS_FACTS, PROTOCOL_FACTS, SPEED_FACTS, TIME_FACTS

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
    replay: bool = False  # successive halving: its trials are made again from their rows (replays_of)

    def __len__(self) -> int:
        return len(self.rows)

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
        return [row_point(space, row) for row in self._in_order()]

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

    def all_ended(self, plan: Plan) -> bool:
        """Whether nothing is left to run: every trial wrote a row, and none waits at a rung."""
        waiting = bool((self.rows["status"] == "paused").any()) if len(self.rows) else False
        return self.trials_left(plan) == 0 and not waiting

    def replayable(self, unit: str) -> pd.DataFrame:
        """The rows a replay can make again: those with a validation pass, not an error, and, where the rungs
        count steps, with the steps they took (a row from before steps were recorded is trained again)."""
        rows = self.rows
        curves = pd.Series(
            [bool(row_curve(r)) for r in rows.to_dict("records")], index=rows.index, dtype=bool
        )
        ok = curves & (rows["status"] != "error")
        if unit == "steps":
            steps = rows["steps"] if "steps" in rows else pd.Series(index=rows.index, dtype=float)
            ok &= pd.to_numeric(steps, errors="coerce") > 0
        return rows[ok]

    def tell_sampler(self, searcher: Searcher, space: SearchSpace, monitor: str) -> None:
        """Tell the sampler (a ConcurrencyLimiter's DistinctOptunaSearch) every ended trial's configuration
        and its value (the best validation value it reached, as Tune told the sampler when it ended)."""
        from modsar.sweep.searcher import DistinctOptunaSearch

        assert isinstance(searcher, DistinctOptunaSearch), "a sampled direction's searcher (sampled_search)"
        if self.replay:  # its trials are drawn again in their order, and replayed
            searcher.queue(self.points(space))
            return
        for row in self._in_order():
            value = pd.to_numeric(row.get(f"valid.{monitor}"), errors="coerce")
            searcher.tell_ended(row_point(space, row), None if pd.isna(value) else float(value))

    def record_rungs(self, scheduler: ASHAScheduler, plan: Plan) -> None:
        """Put each ended trial's value at every ASHA rung it reached into the scheduler's records, by
        replaying its validation passes through ASHA's own bracket (whose decisions are ignored: the trial
        ended long ago)."""
        bracket = scheduler._brackets[0]  # one bracket: modsar makes ASHA with Ray's default of one
        for row in self.rows.to_dict("records"):
            trial = cast("Trial", _RowTrial(str(row["trial_id"])))
            for time, best in _passes(row, plan.unit):
                bracket.on_result(trial, time, best)


# a row's facts that the last replayed report gives back, so the trial's new row holds them as the old did
_REPLAYED_FACTS = (
    "epoch_time_s",
    "eval_time_s",
    "wall_time_s",
    "device",
    "num_parameters",
    "torch_threads",
    "host",
    "cpu",
    "node_id",
    "report_s",
    *SPEED_FACTS,
    *PROTOCOL_FACTS,
    *PROGRESS_FACTS,
    *TIME_FACTS,
)


def replays_of(carried: Carried, space: SearchSpace, monitor: str) -> dict[str, list[dict[str, Any]]]:
    """Successive halving's carry-on: each trial that wrote a row (not an error), by its point's key, as the
    reports its validation passes made, rebuilt from the row. A fresh trial of that point makes them again
    without training (modsar.sweep.trial), so the rungs and the sampler hear what they heard before; its last
    one carries the row's figures and facts, and `replayed_from` (the row it replaces, which every replayed
    report names in `replays`) says the replay is whole."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in carried._in_order():
        curve = row_curve(row)
        key = _key(row_point(space, row))
        if row["status"] == "error" or not curve:  # nothing to replay: the point trains again
            continue
        if len(out.get(key, ())) > len(curve):  # a point with two rows (a replay cut off): the longer
            continue
        steps = _pass_steps(row, curve)
        reports, best, best_epoch = [], float("-inf"), 0
        for k, ((epoch, value), at) in enumerate(zip(curve, steps, strict=True), start=1):
            if float(value) > best:
                best, best_epoch = float(value), int(epoch)
            reports.append(
                {
                    "epoch": int(epoch),
                    f"valid.{monitor}": float(value),
                    f"best.{monitor}": best,
                    "best_epoch": best_epoch,
                    "steps": at,
                    "passes": k,
                    "trial_done": False,
                    "monitor": monitor,
                    "replays": str(row["trial_id"]),  # the row this trial's row replaces (ResultRows)
                }
            )
        reports[-1].update(_last_report(row))
        out[key] = reports
    return out


def _last_report(row: dict[str, Any]) -> dict[str, Any]:
    """What a trial's last replayed report adds: its row's best figures and facts, how it ended."""
    last = {k: row[k] for k in _REPLAYED_FACTS if k in row and not _missing(row[k])}
    last.update({f"best.{k[6:]}": v for k, v in row.items() if k.startswith("valid.") and not _missing(v)})
    if not _missing(row.get("best_epoch")):
        last["best_epoch"] = int(row["best_epoch"])
    last["trial_done"] = row["status"] in ("finished", "diverged")
    if row["status"] == "diverged":
        last["diverged"] = row.get("error") or "diverged"
    last["replayed_from"] = str(row["trial_id"])
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in last.items()}


def _missing(value: Any) -> bool:
    """None, or the NaN Parquet gives a row's missing value."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def repeated_rows(carried: Carried, space: SearchSpace, keep: set[str]) -> list[dict[str, Any]]:
    """Rows of a point that has more than one (a replay cut off before it replaced its old row, or a row the
    driver wrote after a kill): all but one, to set aside as superseded. The one kept is in `keep` (the trials
    of the fit that just ran), else the one with the longest curve."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in carried._in_order():
        groups.setdefault(_key(row_point(space, row)), []).append(row)
    out = []
    for rows in groups.values():
        if len(rows) < 2:
            continue
        passes = [len(row_curve(r)) for r in rows]
        ranked = sorted(range(len(rows)), key=lambda i: (rows[i]["trial_id"] in keep, passes[i], i))
        out += [rows[i] for i in ranked[:-1]]
    return out


def point_key(point: dict[str, Any]) -> str:
    """A trial's sampled point as the key of its replay (its values as the row and Tune hold them)."""
    return _key(point)


def carried_rows(rows: pd.DataFrame, task: str, replay: bool = False) -> Carried:
    """The trials of direction `task` that wrote rows (role search), among a search's rows; `replay`: under
    successive halving, where they are made again from their rows (replays_of)."""
    if not len(rows):
        return Carried(task, rows, replay)
    return Carried(task, rows[(rows["role"] == "search") & (rows["task"] == task)], replay)


def row_point(space: SearchSpace, row: Mapping[str, Any]) -> dict[str, Any]:
    """The values a trial sampled, read from its row: the params active at its point, in the space's
    order (as SearchSpace.points builds a grid point)."""
    point: dict[str, Any] = {}
    for p in space.params:
        if p.active(point):
            value = row[p.key]
            point[p.key] = value.item() if hasattr(value, "item") else value
    return point


def _key(point: dict[str, Any]) -> str:
    """A point as a comparable key: a number as a float, since a space's `0` comes back from a row as `0.0`
    (a config's float field), and both are one point."""
    canonical = {
        k: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
        for k, v in point.items()
    }
    return json.dumps(canonical, sort_keys=True, default=str)


def _passes(row: dict[str, Any], unit: str) -> list[tuple[int, float]]:
    """(time in the scheduler's unit, best validation value so far) at each validation pass of a trial,
    from its row's curve: a pass is a report (Tune's training_iteration), and in steps a pass is at the
    steps it had taken (_pass_steps)."""
    curve = row_curve(row)
    steps = _pass_steps(row, curve) if unit == "steps" else list(range(1, len(curve) + 1))
    out, best = [], float("-inf")
    for (_, value), at in zip(curve, steps, strict=True):
        best = max(best, float(value))  # a pass improves on a strictly better value (training.state)
        out.append((at, best))
    return out


def row_curve(row: dict[str, Any]) -> list[tuple[int, float]]:
    """A row's validation curve, [(epoch, value), ...]; none where the row's `curve` is not one (missing,
    or a row edited by hand into something else): such a trial is not replayed, and records no rung."""
    try:
        points = json.loads(row["curve"]) if isinstance(row.get("curve"), str) else []
        return [(int(epoch), float(value)) for epoch, value in points]
    except (ValueError, TypeError):
        return []


def _pass_steps(row: dict[str, Any], curve: list[tuple[int, float]]) -> list[int]:
    """The optimizer steps a trial had taken at each pass of its curve, as its row recorded them
    (`curve_steps`, [[epoch, steps], ...]): batches of tokens vary an epoch's steps, so a rung in steps is
    crossed at the pass it was. A row written before rows recorded them (or edited by hand) gives each pass's
    epoch times the row's steps per epoch (exact for batches of users), and its last epoch's pass the row's
    own steps."""
    try:
        recorded = json.loads(row["curve_steps"]) if isinstance(row.get("curve_steps"), str) else []
        at = {int(epoch): int(steps) for epoch, steps in recorded}
    except (ValueError, TypeError):
        at = {}
    if all(epoch in at for epoch, _ in curve):
        return [at[epoch] for epoch, _ in curve]
    per_epoch, steps, epochs = _steps_per_epoch(row), *_counts(row)
    return [steps if epoch == epochs and per_epoch else epoch * per_epoch for epoch, _ in curve]


def _steps_per_epoch(row: dict[str, Any]) -> int:
    """The trial's optimizer steps per epoch from its row (steps over epochs run); 0 where either is
    missing."""
    steps, epochs = _counts(row)
    return steps // epochs if epochs > 0 else 0


def _counts(row: dict[str, Any]) -> tuple[int, int]:
    """The row's optimizer steps and epochs run; 0 for either where it is missing."""
    steps, epochs = (pd.to_numeric(row.get(k), errors="coerce") for k in ("steps", "epochs_run"))
    return (int(steps) if pd.notna(steps) else 0), (int(epochs) if pd.notna(epochs) else 0)
