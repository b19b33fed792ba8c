"""Result rows: one Parquet row per trial, written by the driver as trials end and reconciled from the
ResultGrid after the run."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.schedulers import TrialScheduler

from modsar.config import Config
from modsar.errors import ModsarError
from modsar.records.rows import (
    PROGRESS_FACTS,
    PROTOCOL_FACTS,
    SPEED_FACTS,
    TIME_FACTS,
    read_rows,
    result_row,
    write_row,
)
from modsar.sweep.pickled import pickled
from modsar.sweep.plan import Plan, sampled_values, trial_config


def _missing(value: Any) -> bool:
    """None, or the NaN a metrics DataFrame puts where a report lacked the key."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _plain(value: Any) -> Any:
    """numpy scalars (from a metrics DataFrame) as Python values."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def _count(value: Any) -> int | None:
    """An integral fact as int: a DataFrame column with gaps holds 7 as 7.0, and Parquet types must agree."""
    return None if value is None else int(value)


def row_from_results(
    plan: Plan,
    trial_id: str,
    config: dict,
    results: list[dict],
    error: str | None,
    checkpoint: str | None,
    role: str = "search",
    tag: str = "",
    waiting: bool = False,
) -> dict[str, Any]:
    """The Parquet row of one trial, from what Tune recorded of it: its config, its reports in order, its
    error and its best checkpoint. The config is the one its worker reported running (a GPU trial's device
    is set there); a trial that never reported gets the plan's. `waiting`: it waits at a rung, status
    "paused" (its row is written again when it ends)."""
    sampled = plan.space.expand(sampled_values(config))
    last: dict[str, Any] = {}
    for reported in results:  # later reports win; a final test-only report keeps the earlier facts
        last.update({k: _plain(v) for k, v in reported.items() if not _missing(v)})
    cfg = _config_ran(plan, sampled, last.pop("ran_config", None))
    if last.get("diverged"):
        status, error = "diverged", error or last["diverged"]
    else:
        ended = "finished" if last.get("trial_done") else ("paused" if waiting else "stopped")
        status = "error" if error else ended
    # best.* without a best epoch is the 0.0 floor a trial that diverged before validating reports to Tune
    valid = {k[5:]: v for k, v in last.items() if k.startswith("best.")} if "best_epoch" in last else {}
    test = {k[5:]: v for k, v in last.items() if k.startswith("test.")}
    facts = _trial_facts(plan, last, results, checkpoint, tag, cfg.task.value)
    row = result_row(
        cfg,
        experiment=plan.request.experiment_name,
        trial_id=trial_id,
        status=status,
        valid=valid,
        test=test,
        facts=facts,
        error=error,
        space=plan.space.name,
        dataset_manifest=plan.manifest,
    )
    row["role"] = role
    row.update({k: v for k, v in last.items() if k.startswith("generate.")})  # a seed re-run's rollouts
    row.update({k: v for k, v in sampled.items() if row.get(k) != v})
    if last.get("host"):
        row["host"] = last["host"]
    # the CPU that trained the trial, as its reports say (a replayed row's: the machine it trained on), never
    # the driver's: unknown (None) for a trial that never reported, or replayed from a row that did not say
    row["cpu"] = last["cpu"] if isinstance(last.get("cpu"), str) else None
    return row


def _config_ran(plan: Plan, sampled: dict[str, Any], ran: str | None) -> Config:
    """The trial's config as its worker ran it, else as the plan makes it (the trial never reported), else
    the plan's base (an invalid combination the trial failed on: the row records the values as sampled)."""
    if ran is not None:
        return Config.from_dict(json.loads(ran), "a trial's reported config")
    try:
        return trial_config(plan.base, plan.space, sampled)
    except ModsarError:
        return Config.from_dict(plan.base)


def _trial_facts(
    plan: Plan, last: dict[str, Any], results: list[dict], checkpoint: str | None, tag: str, task: str
) -> dict[str, Any]:
    """The row's facts of a trial (in the order rows have always had them): its epochs, times, device and
    sizes as last reported, its validation curve, checkpoint and place in the search."""
    curve, curve_steps = _validation_curves(results, plan.monitor)
    return {
        "best_epoch": _count(last.get("best_epoch")),
        "epochs_run": _count(last.get("epoch")),
        "wall_time_s": last.get("wall_time_s"),
        "epoch_time_s": last.get("epoch_time_s"),
        "eval_time_s": last.get("eval_time_s"),
        "device": last.get("device"),
        **{k: last.get(k) for k in (*SPEED_FACTS, *PROGRESS_FACTS, *TIME_FACTS)},
        "report_s": last.get("report_s"),
        **{k: last[k] for k in PROTOCOL_FACTS if k in last},
        "num_parameters": _count(last.get("num_parameters")),
        "node_id": last.get("node_id"),
        "torch_threads": _count(last.get("torch_threads")),
        "checkpoint": checkpoint,
        "curve": json.dumps(curve),
        "curve_steps": json.dumps(curve_steps),
        # a resumed trial's repeat is no pass (`is not True`: Tune's record after a fit gives NaN where a
        # report had no repeat key)
        "reports": sum(1 for r in results if r.get("repeat") is not True),
        "search_algorithm": plan.search_of(task),
        "space_arms": json.dumps(plan.space.arms) if plan.space.arms else None,
        "trial_index": int(tag.split("_")[0]) if tag.split("_")[0].isdigit() else None,
    }


def _validation_curves(results: list[dict], monitor: str) -> tuple[list[list], list[list[int]]]:
    """The row's `curve`, [[epoch, monitored validation value], ...] in epoch order, and `curve_steps`,
    [[epoch, optimizer steps taken], ...] at those passes (a carry-on places each pass against rungs counted
    in steps by it): a resumed trial's earlier passes come back in its first report, and its redone epochs
    report again (the later report wins)."""
    points: dict[int, float] = {}
    steps: dict[int, int] = {}
    for reported in results:
        if isinstance(reported.get("restored_curve"), str):
            points.update({int(e): v for e, v in json.loads(reported["restored_curve"])})
        if isinstance(reported.get("restored_steps"), str):
            steps.update({int(e): int(s) for e, s in json.loads(reported["restored_steps"])})
        if not _missing(reported.get(f"valid.{monitor}")):
            points[int(reported["epoch"])] = _plain(reported[f"valid.{monitor}"])
            if not _missing(reported.get("steps")):
                steps[int(reported["epoch"])] = int(reported["steps"])
    return [[e, points[e]] for e in sorted(points)], [[e, steps[e]] for e in sorted(steps)]


def _error_message(trial) -> str:
    """The trial's exception as one line ("ModsarError: ..."), read from the files Tune just wrote."""
    from ray import cloudpickle

    err, path = None, trial.pickled_error_file  # written locally by Trial.handle_error before callbacks run
    if path and os.path.exists(path):
        with open(path, "rb") as fh:
            err = cloudpickle.load(fh)
    if err is not None:
        cause = getattr(err, "cause", None) or err
        return f"{type(cause).__name__}: {cause}".strip().splitlines()[0][:500]
    text = ""
    if trial.error_file and os.path.exists(trial.error_file):
        text = Path(trial.error_file).read_text()
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "unknown error")[:500]


def rows_dir(plan: Plan) -> str:
    """The results root a plan's rows are written under (a path or URI, without a trailing slash)."""
    return plan.request.results.rstrip("/")


class RowWriteFault(ModsarError):
    """A search row the disk refused (a full disk, a read-only folder: outputs.write_error's line). It ends
    the search resumable: interrupt.stops_on_ctrl_c records the search as interrupted and ends the line with
    the command that resumes it: the same command without --resume is refused (the experiment exists)."""

    def __init__(self, fault: ModsarError) -> None:
        text = str(fault)
        # write_error's line without its advice ("... and run the command again"), which --resume replaces
        self.what = text.split(". Free some space", 1)[0]
        super().__init__(text)


def write_search_row(plan: Plan, row: dict[str, Any]) -> None:
    """Write one row of the search; a write fault is a RowWriteFault (write_row raises a ModsarError for a
    write fault only: atomic_write's one line)."""
    try:
        write_row(rows_dir(plan), row)
    except ModsarError as fault:
        raise RowWriteFault(fault) from None


# rows folder -> the write fault (a full disk, a read-only folder: outputs.write_error) that stopped the fit
# writing there; held by the driver, which runs every callback, and raised after the fit (`raise_row_fault`)
_ROW_FAULTS: dict[str, RowWriteFault] = {}


@pickled
class ResultRows(tune.Callback):
    """Writes a trial's Parquet row the moment it ends, so a killed driver loses nothing finished.

    A row that cannot be written (a full disk, a read-only folder) ends the fit the way Ctrl-C does (Tune's
    SIGUSR1 handler: its state is saved, the unfinished trials resume with --resume), and the fault is raised
    in one line after the fit (`raise_row_fault`): raised here, Tune would print its traceback, retry the
    trial as failed, and raise its own error with the traceback as message."""

    def __init__(self, plan: Plan, role: str) -> None:
        self.plan, self.role = plan, role
        self.results: dict[str, list[dict]] = {}

    def setup(self, **info):
        """Forget a row fault an earlier fit raised and never handed on: each fit starts clean."""
        _ROW_FAULTS.pop(rows_dir(self.plan), None)  # one a fit that raised never handed on

    def on_trial_result(self, iteration, trials, trial, result, **info):
        """Keep every report of the trial: its row is built from them all when it ends. A report at a rung
        of successive halving, where the trial waits, writes its row so far (status paused): a direction cut
        off on a machine then lost goes on from its rows (carry_on)."""
        self.results.setdefault(trial.trial_id, []).append(dict(result))
        if result.get("at_rung") is True and not result.get("trial_done") and self.role == "search":
            self._write(trial, None, waiting=True)

    def _write(self, trial, error: str | None, waiting: bool = False) -> None:
        if rows_dir(self.plan) in _ROW_FAULTS:  # the fit is ending on a write fault: no row is tried again
            return
        checkpoint = trial.checkpoint.path if trial.checkpoint else None
        row = row_from_results(
            self.plan,
            trial.trial_id,
            trial.config,
            self.results.get(trial.trial_id, []),
            error,
            checkpoint,
            self.role,
            trial.experiment_tag,
            waiting,
        )
        try:
            write_search_row(self.plan, row)
            self._replace_replayed(self.results.get(trial.trial_id, []), ended=not waiting)
        except RowWriteFault as fault:  # atomic_write's one line for a write fault; any other error as raised
            _ROW_FAULTS[rows_dir(self.plan)] = fault
            tune_stop = signal.getsignal(signal.SIGUSR1)  # Tune's, installed for a fit in the main thread
            if callable(tune_stop):
                tune_stop(signal.SIGUSR1, None)

    def _replace_replayed(self, results: list[dict], ended: bool) -> None:
        """The row a replayed trial's row replaces (its replayed reports name it: carry_on) is kept as
        superseded, once, when the new row holds the whole replay or the trial ended short of it (a rung
        stopped it sooner than before): a selection never sees one trial twice. A row written while the replay
        is partway leaves the old one as it is, whose later passes a further carry-on still needs."""
        replaced = self.__dict__.setdefault("replaced", set())  # none in a callback an earlier ModSAR pickled
        old = next((r["replays"] for r in results if isinstance(r.get("replays"), str)), None)
        whole = any(isinstance(r.get("replayed_from"), str) for r in results)
        if old is None or old in replaced or not (whole or ended):
            return
        rows = read_rows(rows_dir(self.plan), self.plan.request.experiment_name)
        for row in rows[rows["trial_id"] == old].to_dict("records") if len(rows) else []:
            rewrite_row(self.plan, {**row, "role": "superseded"})
        replaced.add(old)

    def on_trial_complete(self, iteration, trials, trial, **info):
        """A finished (or early-stopped) trial: write its row. One that reported nothing in this fit (a
        resumed search's scheduler stopped it before it ran) keeps the row an earlier fit wrote, or gets one
        from Tune's record after the fit (reconcile_rows)."""
        if trial.trial_id in self.results:
            self._write(trial, None)

    def on_trial_error(self, iteration, trials, trial, **info):
        """An errored trial: write its row with the error's last line."""
        self._write(trial, _error_message(trial))


@pickled
class LiveTable(tune.Callback):
    """A compact live table of trials (status, epoch, best validation metric), at most every 5 s."""

    def __init__(self, plan: Plan) -> None:
        self.plan, self.shown = plan, 0.0

    def _show(self, trials, force: bool = False) -> None:
        if not force and time.time() - self.shown < 5:
            return
        self.shown = time.time()
        plan, counts = self.plan, dict[str, int]()
        for t in trials:
            counts[t.status] = counts.get(t.status, 0) + 1
        lines = [
            f"[{time.strftime('%H:%M:%S')}] {plan.request.experiment_name}: "
            + ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))
        ]
        lines.append(f"  {'trial':<14}{'task':<6}{'status':<11}{'epoch':>6}{'best ' + plan.monitor:>14}")
        for t in trials[-12:]:
            r = t.last_result or {}
            value = r.get(f"best.{plan.monitor}")
            task = sampled_values(t.config).get("task", plan.base["task"])
            shown = f"{value:.4f}" if isinstance(value, float) else "-"
            status = "diverged" if r.get("diverged") else t.status.lower()  # Tune calls it terminated
            lines.append(f"  {t.trial_id:<14}{task:<6}{status:<11}{r.get('epoch', '-')!s:>6}{shown:>14}")
        if len(trials) > 12:
            lines.append(
                f"  ... {len(trials) - 12} more (modsar results --experiment {plan.request.experiment_name})"
            )
        print("\n".join(lines), flush=True)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        """Redraw the table (at most every few seconds) as trials report."""
        self._show(trials)

    def on_trial_complete(self, iteration, trials, trial, **info):
        """Redraw the table when a trial ends."""
        self._show(trials)

    def on_experiment_end(self, trials, **info):
        """Draw the final table, whenever the last one was drawn."""
        self._show(trials, force=True)


@pickled
class SchedulerState(tune.Callback):
    """Saves the scheduler's rung records (ASHA's or successive halving's) with Tune's experiment state and
    restores them on --resume.

    Tune checkpoints the searcher but not the scheduler (ray-project/ray#30838): a resumed search would judge
    its remaining trials against empty rungs and stop fewer of them than the uninterrupted search. Tune
    pickles this callback and the scheduler together in tuner.pkl, so the reference survives a restore."""

    def __init__(self, scheduler: TrialScheduler) -> None:
        self.scheduler = scheduler

    def get_state(self) -> dict:
        """The rung records, saved with Tune's experiment state."""
        return {"scheduler": dict(self.scheduler.__dict__)}  # what ASHAScheduler.save pickles

    def set_state(self, state: dict) -> None:
        """Put the saved rung records back into the restored scheduler."""
        self.scheduler.__dict__.update(state["scheduler"])


def make_callbacks(plan: Plan, role: str = "search") -> list[tune.Callback]:
    """The Tune callbacks of a fit: the rows always, the live table unless --quiet, MLflow with --mlflow."""
    callbacks: list[tune.Callback] = [ResultRows(plan, role)] + (
        [] if plan.request.quiet else [LiveTable(plan)]
    )
    if plan.request.mlflow:
        from modsar.sweep.tracking import mlflow_callback  # needs MLflow: only with --mlflow

        callbacks.append(mlflow_callback(plan, role))
    return callbacks


def raise_row_fault(plan: Plan) -> None:
    """After a fit: raise the write fault that ended it (`ResultRows`), if one did: a RowWriteFault, which
    stops_on_ctrl_c turns into a line that ends with the command that resumes the search."""
    fault = _ROW_FAULTS.pop(rows_dir(plan), None)
    if fault is not None:
        raise fault


def result_trial(result) -> tuple[str | None, str]:
    """(trial id, experiment tag) of one Result of a fit's ResultGrid: from its metrics, or from its folder's
    name, <trainable>_<trial id>_<index>_<params> (ids may hold one "_")."""
    match = re.match(
        r"^[^_]+_([0-9a-f]+(?:_\d{5})?)_(\d+_.*)$", Path(result.path).name if result.path else ""
    )
    trial_id = (result.metrics or {}).get("trial_id") or (match.group(1) if match else None)
    return trial_id, match.group(2) if match else ""


def reconcile_rows(plan: Plan, grid, role: str = "search") -> None:
    """Write rows for trials whose end the callback missed (driver killed between state save and row); first,
    raise the write fault that ended the fit, if one did."""
    raise_row_fault(plan)
    existing = read_rows(rows_dir(plan), plan.request.experiment_name)
    have = set(existing["trial_id"]) if len(existing) else set()
    # an error row of a trial Tune now holds without error (a resumed search retried it, and its scheduler
    # stopped it before it reported: the callback wrote nothing) is written again from Tune's record
    errored = set(existing.loc[existing["status"] == "error", "trial_id"]) if len(existing) else set()
    # a row written while its trial waited at a rung (paused), which ended since: written again as it ended
    errored |= set(existing.loc[existing["status"] == "paused", "trial_id"]) if len(existing) else set()
    for result in grid:
        trial_id, tag = result_trial(result)
        if not trial_id or result.config is None:  # None: never started (time budget)
            continue
        if trial_id in have and not (trial_id in errored and result.error is None):
            continue
        frame = result.metrics_dataframe
        history = frame.to_dict("records") if frame is not None else []
        error = f"{type(result.error).__name__}: {result.error}".splitlines()[0] if result.error else None
        checkpoint = result.checkpoint.path if result.checkpoint else None
        write_search_row(
            plan, row_from_results(plan, trial_id, result.config, history, error, checkpoint, role, tag)
        )


def rewrite_row(plan: Plan, row: dict[str, Any]) -> None:
    """Write back a row read from Parquet (write_row writes the NaN pandas reads where it had no value as
    missing again)."""
    write_search_row(plan, row)
