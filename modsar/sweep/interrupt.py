"""Ctrl-C on a search, and the state a search records of itself (search.json: running, interrupted, complete).

Tune catches the first Ctrl-C (SIGINT) of a Tuner's fit itself: it saves the search's state and returns, as if
the Tuner had ended. A search runs one Tuner per direction, so the search went on with the other direction,
and a second Ctrl-C ended that one too: the search then selected and tested on a few trials and exited 0, and
a report gave a verdict on them. Here the first Ctrl-C (or SIGTERM) stops the whole search: inside a fit,
Tune stops it its own way (its SIGUSR1 handler: the state `--resume` needs is saved), and nothing after it
runs; elsewhere it stops at once. A second Ctrl-C stops at once. The search records itself as interrupted,
with the trials that ended and the trials planned, and stops with `SearchInterrupted` (exit 130), whose
message is the command that resumes it. A report over a search not recorded complete says so
(`incomplete_searches`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import fields
from types import FrameType
from typing import Any

from modsar.outputs import redact
from modsar.records.rows import filesystem
from modsar.sweep.plan import Plan
from modsar.sweep.request import SearchRequest, option_flag

RUNNING, INTERRUPTED, COMPLETE = "running", "interrupted", "complete"  # search.json's "status"
# search.json is read, changed and written again by the driver's main thread and by the thread that keeps
# the search's clock (sweep.tuner.clock_kept): one at a time, so neither writes back what the other replaced
STATE_LOCK = threading.RLock()


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a search; what ran is saved, and the message says how to resume it."""


class _CtrlC:
    """The search's SIGINT (and SIGTERM) handler: the first press stops the fit in progress the way Tune does
    (its own SIGUSR1 handler, installed for the fit), or the search at once outside a fit; a second press at
    once."""

    def __init__(self) -> None:
        self.pressed = 0
        self.fitting = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.pressed += 1
        tune_stop = signal.getsignal(signal.SIGUSR1)
        if self.pressed == 1 and self.fitting and callable(tune_stop):
            tune_stop(signal.SIGUSR1, frame)  # Tune ends the fit after saving its state
            for sig in STOPPING_SIGNALS:  # Tune's handler put back the SIGINT one it found: this one
                signal.signal(sig, self)
            return
        raise KeyboardInterrupt


_CURRENT: _CtrlC | None = None


# SIGTERM (kill, `timeout`, a batch scheduler's notice before its SIGKILL) stops a search as Ctrl-C does: its
# state saved and recorded, the resume command said; under Ray's own handler it died with a stack dump
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def ctrl_c_stops_the_search() -> Iterator[None]:
    """While a search runs (in the main thread: only it receives signals), Ctrl-C or SIGTERM stops all of
    it."""
    global _CURRENT
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved_handlers = {sig: signal.getsignal(sig) for sig in STOPPING_SIGNALS}
    saved_env = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    _CURRENT = _CtrlC()
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # Tune's own handler would end one Tuner only
    for sig in STOPPING_SIGNALS:
        signal.signal(sig, _CURRENT)
    try:
        yield
    finally:
        for sig, handler in saved_handlers.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if saved_env is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = saved_env
        _CURRENT = None


@contextlib.contextmanager
def fitting() -> Iterator[None]:
    """Around a Tuner's fit: a first Ctrl-C lets Tune stop the fit and save, and the search stops after it.
    Tune's SIGUSR1 handler, which it leaves installed after the fit, goes back to what it was."""
    saved = signal.getsignal(signal.SIGUSR1) if _CURRENT is not None else None
    if _CURRENT is not None:
        _CURRENT.fitting = True
    try:
        yield
    finally:
        if _CURRENT is not None:
            _CURRENT.fitting = False
            if saved is not None:  # None: a handler not set from Python, which Tune's replaced for good
                signal.signal(signal.SIGUSR1, saved)
    if _CURRENT is not None and _CURRENT.pressed:
        raise KeyboardInterrupt  # the fit ended on Ctrl-C: no other direction, selection or seed runs


@contextlib.contextmanager
def stops_on_ctrl_c(plan: Plan, search_json: str) -> Iterator[None]:
    """Around a search's Tuners, selection and seed re-runs: Ctrl-C stops them all, records the search as
    interrupted (trials ended of planned) and raises SearchInterrupted naming the command that resumes it.
    A row the disk refused (sweep.rows.RowWriteFault) is recorded the same way, and its one line ends with
    that command too: the same command without --resume is refused, since the experiment exists."""
    from modsar.errors import ModsarError
    from modsar.sweep.rows import RowWriteFault

    req = plan.request
    try:
        with ctrl_c_stops_the_search():
            yield
    except KeyboardInterrupt:
        ended, unrecorded = record_interrupted(plan, search_json)
        counts = f"{ended} of {planned_trials(plan)} trials ended; " if ended is not None else ""
        raise SearchInterrupted(
            f"search '{req.experiment_name}' ({counts}what ran is saved{unrecorded}): "
            f"resume it with `{resume_command(req)}`"
        ) from None
    except RowWriteFault as fault:
        _, unrecorded = record_interrupted(plan, search_json)
        raise ModsarError(
            f"{fault.what}{unrecorded}. Free some space (or make the folder writable again), then resume "
            f"the search with `{resume_command(req)}`"
        ) from None


def record_interrupted(plan: Plan, search_json: str) -> tuple[int | None, str]:
    """Record the search as interrupted in its search.json (trials ended of planned): (trials ended, "").
    Where reading its rows or writing search.json fails (a full disk, an unreachable object store, a second
    Ctrl-C), what did is said in a few words instead ("; its state was not recorded (...)"), and trials ended
    is None where the rows could not be read: the caller's line still names the command that resumes it, and
    never gives way to the second fault."""
    from modsar.records.rows import read_rows

    req, ended = plan.request, None
    try:
        rows = read_rows(req.results.rstrip("/"), req.experiment_name)
        # a trial waiting at a rung (its row paused) has not ended
        ended = int(((rows["role"] == "search") & (rows["status"] != "paused")).sum()) if len(rows) else 0
        record_state(search_json, INTERRUPTED, trials_ended=ended, trials_planned=planned_trials(plan))
    except KeyboardInterrupt:  # a second Ctrl-C while recording: the search stops all the same
        return ended, "; its state was not recorded (a second Ctrl-C)"
    except Exception as exc:
        return ended, f"; its state was not recorded ({type(exc).__name__})"
    return ended, ""


def planned_trials(plan: Plan) -> int:
    """The trials the search plans: every grid point (per direction, times --num-samples), or the samples of
    each direction (Plan.trials)."""
    return sum(plan.trials_of(t) for t in plan.space.tasks())


_NOT_REPEATED = {"space", "dataset", "overrides", "resume", "overwrite"}


def resume_command(req: SearchRequest) -> str:
    """The `modsar search` command that resumes `req`'s search: its options as given, and --resume. A
    password the request held is shown as *** (it never reaches a file or a message): type it again."""
    args = ["modsar", "search", "--space", req.space, "--dataset", req.dataset]
    for field in fields(req):
        value = getattr(req, field.name)
        if field.name in _NOT_REPEATED or value == field.default:
            continue
        flag = option_flag(field.name)
        args += [flag] if value is True else [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join([*args, *req.overrides, "--resume"])


def record_state(search_json: str, status: str, **facts: Any) -> None:
    """Set the search's status (and facts: trials planned, ended) in its search.json, the rest kept."""
    from modsar.outputs import atomic_write, to_json

    fs, path = filesystem(search_json)
    with STATE_LOCK:
        with fs.open_input_stream(path) as stream:
            stored = json.loads(stream.read().decode())
        stored.update(status=status, **facts)
        with atomic_write(path, fs) as tmp, fs.open_output_stream(tmp) as out:
            out.write(to_json(stored, default=str).encode())


def incomplete_searches(results: str, experiments: list[str]) -> dict[str, int]:
    """Experiment -> trials planned, for each of `experiments` whose search (search.json) is not recorded
    complete: interrupted, killed, or running now. Searches from before the status was recorded, and
    experiments that are no search (`modsar train`), are not listed; nor is a search.json that is no JSON
    object or holds a status or trials_planned of the wrong kind (edited, damaged): one warning line says its
    search's status is unknown, and the report goes on."""
    found = {}
    for name in experiments:
        where = f"{results.rstrip('/')}/{name}/search.json"
        fs, path = filesystem(where)
        try:
            with fs.open_input_stream(path) as stream:
                stored = json.loads(stream.read().decode())
        except (OSError, ValueError):
            continue
        if not _well_formed(stored):
            print(
                f"modsar: warning: {redact(where)} is not a search.json modsar search wrote (its status or "
                f"trials_planned is malformed); the status of search '{name}' is unknown",
                file=sys.stderr,
            )
            continue
        if stored.get("status") in (RUNNING, INTERRUPTED) and stored.get("trials_planned"):
            found[name] = stored["trials_planned"]
    return found


def _well_formed(stored: object) -> bool:
    """Whether `stored` (a search.json's JSON) is an object whose status and trials_planned, where present,
    are what record_state writes: one of the statuses, and a count."""
    if not isinstance(stored, dict):
        return False
    planned = stored.get("trials_planned")
    return stored.get("status") in (None, RUNNING, INTERRUPTED, COMPLETE) and (
        planned is None or (isinstance(planned, int) and not isinstance(planned, bool) and planned >= 0)
    )
