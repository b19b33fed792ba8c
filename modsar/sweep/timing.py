"""Where a search's time goes: Ray's start-up, each direction's Tuner, selection and seed re-runs, and within
the trials their set-up, training epochs, validation passes, checkpoints and reports, with the cores the
search held but left idle.

The driver times what it runs (`SearchClock`); the trials time their own parts and report them in their rows
(setup_s, epoch_time_s x epochs_run, eval_time_s x validation passes, checkpoint_s, report_s). search.json
keeps one clock per run of the search (a resumed search adds one), written as the run goes (sweep.tuner), so a
driver killed without warning (a session's end, the OOM killer) loses at most the last half minute; and
`breakdown` joins them with the rows. A run killed before its clock was kept as it went (earlier searches
wrote it only after each direction) lost its seconds; `clock_lost` and `trials_span_s` tell and bound what
is missing.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import pandas as pd

_NOT_KEPT = ("started", "recorded", "running", "loads")  # the clock's working state, not search.json's


@dataclass
class SearchClock:
    """Seconds the driver spent on each part of one run of a search (one per --resume)."""

    slots: int = 1  # trials the search can run at once
    connect_s: float = 0.0  # starting (or joining) Ray
    directions: dict[str, float] = field(default_factory=dict)  # task -> its Tuner's wall-clock
    select_test_s: float = 0.0  # selecting and testing the best trial of each model
    seeds_s: float = 0.0  # re-running the selected configs on other seeds
    started_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    started: float = field(default_factory=time.perf_counter, repr=False)
    recorded: bool = field(default=False, repr=False)  # search.json holds this run's entry already
    running: dict[str, float] = field(default_factory=dict, repr=False)  # part in progress -> its start
    loads: list[float] = field(default_factory=list, repr=False)  # the machine's 1-minute load, as it went

    def sample_load(self, settle_s: float = 60.0) -> None:
        """Note the machine's load average now (sampled as the clock is kept): with the run's own trials
        counted in it, what is left over says whether other processes competed with them. Not in the run's
        first `settle_s` seconds, while the 1-minute average still holds what ran before (the probe)."""
        if time.perf_counter() - self.started < settle_s:
            return
        with contextlib.suppress(OSError, AttributeError):  # no load average on this platform
            self.loads.append(os.getloadavg()[0])

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Add the block's wall-clock to `name` (an attribute, or "direction:<task>"); while it runs, record()
        counts it so far."""
        tick = self.running[name] = time.perf_counter()
        try:
            yield
        finally:
            del self.running[name]
            self._add(name, time.perf_counter() - tick)

    def _add(self, name: str, spent: float) -> None:
        if name.startswith("direction:"):
            task = name.partition(":")[2]
            self.directions[task] = self.directions.get(task, 0.0) + spent
        else:
            setattr(self, name, getattr(self, name) + spent)

    def record(self) -> dict[str, Any]:
        """This run as search.json keeps it, with its whole wall-clock so far, parts in progress included."""
        now = time.perf_counter()
        so_far = replace(self, directions=dict(self.directions), running={})
        for name, tick in list(self.running.items()):
            so_far._add(name, now - tick)
        out = {k: v for k, v in asdict(so_far).items() if k not in _NOT_KEPT}
        load = {"load_mean": sum(self.loads) / len(self.loads)} if self.loads else {}
        return {**out, **load, "wall_s": now - self.started}


def against_estimate(stored: dict[str, Any], rows: pd.DataFrame | None = None) -> str:
    """A line comparing a search's time (its directions, over every run) with the estimate search.json keeps,
    and its seed re-runs with the estimate's ceiling for them where it printed one (`--seeds`; an older
    estimate did not), and saying when the machine was shared: its mean load beyond the search's own trials,
    half a core or more, as it went (not only while the probe ran). Empty without an estimate or a clock.
    With the search's `rows`, no comparison where its clock misses some of its trials' time (clock_lost: a run
    killed before its clock was written): the clock's seconds would read as a search faster than it was."""
    kept = stored.get("estimate") or {}
    estimate = kept.get("seconds")
    runs = [run for run in stored.get("timing") or [] if isinstance(run, dict)]
    spent = sum(sum(run.get("directions", {}).values()) for run in runs)
    if not estimate or not spent:
        return ""
    if rows is not None and len(rows) and clock_lost(runs, rows):
        return (
            f"time: not compared with the {estimate:,.0f} s its estimate printed: a run of this search was "
            f"stopped before its clock was written, so the {spent:,.0f} s its clock kept miss some of the "
            "time its trials ran"
        )
    line = f"time: the search took {spent:,.0f} s against the {estimate:,.0f} s its estimate printed"
    line += f" ({(spent / estimate - 1) * 100:+.0f}%"
    ceiling, seeds = kept.get("seeds_seconds"), sum(run.get("seeds_s") or 0.0 for run in runs)
    asked = (stored.get("request") or {}).get("seeds")  # a resume may ask more seeds than the estimate costed
    if ceiling and seeds and kept.get("seeds") == asked:
        line += f"), its seed re-runs {seeds:,.0f} s against a ceiling of {ceiling:,.0f} s"
    else:
        line += "; seed re-runs aside, which it does not cover)" if seeds else ")"
    loaded = [run for run in runs if run.get("load_mean") is not None and run.get("wall_s")]
    if loaded:
        wall = sum(run["wall_s"] for run in loaded)
        load = sum(run["load_mean"] * run["wall_s"] for run in loaded) / wall
        slots = max(run.get("slots", 1) for run in loaded)
        if load - slots >= 0.5:
            line += (
                f"; the machine was shared: its load averaged {load:.1f} beside the search's {slots} trials "
                "at a time, so this is not an idle machine's time"
            )
    return line


def breakdown(runs: list[dict[str, Any]], rows: pd.DataFrame) -> pd.DataFrame:
    """One line per direction and one for the whole search: the driver's parts summed over the search's runs
    (`runs`: the clocks search.json keeps), and the trial parts summed over its rows (role search). Seconds,
    and `idle_s`: slot-seconds of the Tuners' wall-clock no trial used (starting actors, waiting on the
    last trials, Tune's own work)."""
    trials = rows[rows["role"] == "search"] if "role" in rows else rows
    lines = []
    tasks = sorted({t for run in runs for t in run.get("directions", {})})
    for task in tasks:
        wall = sum(run.get("directions", {}).get(task, 0.0) for run in runs)
        slot_s = sum(run.get("directions", {}).get(task, 0.0) * run.get("slots", 1) for run in runs)
        lines.append(
            {"part": task, "wall_s": wall, "slot_s": slot_s, **_trial_parts(trials[trials["task"] == task])}
        )
    total = {
        "part": "search",
        "wall_s": sum(run.get("wall_s", 0.0) for run in runs),
        "slot_s": sum(line["slot_s"] for line in lines),
        **_trial_parts(trials),
        **{k: sum(run.get(k, 0.0) for run in runs) for k in ("connect_s", "select_test_s", "seeds_s")},
    }
    table = pd.DataFrame([*lines, total])
    table["idle_s"] = table["slot_s"] - table["trial_s"]
    table["busy"] = table["trial_s"] / table["slot_s"].where(table["slot_s"] > 0)
    return table


def trials_span_s(rows: pd.DataFrame, scheduler: str = "asha") -> float:
    """Seconds in which at least one of `rows`' trials ran: the union of each trial's [finished_at -
    wall_time_s, finished_at]. A trial restored from a checkpoint (fewer reports than validation passes: its
    first passes ran in an earlier run) is left out: its row does not date the stretches its seconds were
    spent in. So it is a lower bound on the wall-clock of the runs that trained them, for runs whose clock
    was lost (0 where no trial can be dated); NaN without the columns, and NaN under successive halving
    (`scheduler` "halving", search.json's asha.kind), where a trial's row ends when its rung decides, not
    when it stopped training."""
    if scheduler == "halving" or "finished_at" not in rows or "wall_time_s" not in rows:
        return math.nan
    if "reports" in rows and "passes" in rows:
        rows = rows[~(pd.to_numeric(rows["reports"]) < pd.to_numeric(rows["passes"]))]
    end = pd.to_datetime(rows["finished_at"], utc=True, errors="coerce")
    start = end - pd.to_timedelta(pd.to_numeric(rows["wall_time_s"], errors="coerce"), unit="s")
    spans = pd.DataFrame({"start": start, "end": end}).dropna().sort_values("start")
    if not len(spans):
        return 0.0
    reached = spans["end"].cummax().shift()  # the latest end of the trials that started earlier
    stretch = (spans["start"] > reached).cumsum()  # a new stretch where a trial starts after all of them end
    ends = spans.groupby(stretch).agg(start=("start", "min"), end=("end", "max"))
    return float((ends["end"] - ends["start"]).dt.total_seconds().sum())


def clock_lost(runs: list[dict[str, Any]], rows: pd.DataFrame) -> bool:
    """Whether the search's recorded clock misses time: its trials ran more seconds than the slot-seconds its
    runs recorded (a run killed before its clock was written: searches run before the clock was kept as they
    went wrote it only after each direction)."""
    trials = rows[rows["role"] == "search"] if "role" in rows else rows
    used = _trial_parts(trials)["trial_s"]
    held = sum(sum(run.get("directions", {}).values()) * run.get("slots", 1) for run in runs)
    return used > held * 1.02 + 5.0  # slack: a trial's clock and the driver's are read at different moments


def _trial_parts(rows: pd.DataFrame) -> dict[str, float]:
    """The trials' seconds summed: in all (their wall-clock), set-up, training epochs, validation passes,
    checkpoints, reports to Tune, and what is left (the trial function's own start, Python between parts)."""

    def total(column: str, times: str | None = None) -> float:
        if column not in rows or not len(rows):
            return 0.0
        values = pd.to_numeric(rows[column], errors="coerce")
        if times is not None:
            values = values * pd.to_numeric(rows[times], errors="coerce")
        return float(values.fillna(0.0).sum())

    parts = {
        "trials": float(len(rows)),
        "epochs": total("epochs_run"),
        "passes": total("passes" if "passes" in rows else "reports"),  # rows before `passes` count reports
        "trial_s": total("wall_time_s"),
        "setup_s": total("setup_s"),
        "train_s": total("epoch_time_s", "epochs_run"),
        "valid_s": total("eval_time_s", "passes" if "passes" in rows else "reports"),
        "checkpoint_s": total("checkpoint_s"),
        "report_s": total("report_s"),
    }
    named = sum(parts[k] for k in ("setup_s", "train_s", "valid_s", "checkpoint_s", "report_s"))
    parts["other_s"] = parts["trial_s"] - named if math.isfinite(named) else math.nan
    return parts
