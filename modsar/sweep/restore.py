"""Resuming a search (--resume): what it must share with the search that was started, Tune's restore turned
into one clear error where Tune would silently start again, and the module names earlier versions pickled."""

from __future__ import annotations

import contextlib
import importlib
import logging
import pkgutil
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.fs as pafs
from ray import tune
from ray.tune import ExperimentAnalysis

from modsar.errors import ModsarError
from modsar.records.rows import filesystem
from modsar.sweep.plan import Plan
from modsar.sweep.search_folder import drop_resume_files
from modsar.sweep.storage import never_saved, remove_partial_files, restore_snapshot


def search_settings(plan: Plan) -> dict[str, Any]:
    """What search.json records of the plan, and what a resumed search must share with it."""
    return {
        "base": plan.base,
        "search": plan.search,
        "num_samples": plan.num_samples,
        "directions": plan.per_task,
        "full_grid": plan.request.full_grid,
        "asha": {
            "max_t": plan.max_t,
            "grace_period": plan.grace_period,
            "reduction_factor": plan.reduction_factor,
            "unit": plan.unit,
            "kind": plan.scheduler,
        },
    }


def check_same_search(plan: Plan, stored: dict, settings: dict) -> None:
    """A resumed search must be the search that was started: Tune restores its trials and their configs,
    and seed re-runs would be trained on a different base than the trials they replicate."""
    from modsar.config import flatten

    if isinstance(stored.get("asha"), dict):  # searches before scheduler units counted validation passes
        stored = {**stored, "asha": {"unit": "passes", "kind": "asha", **stored["asha"]}}
    was, now = flatten({k: stored[k] for k in settings if k in stored}), flatten(settings)
    changed = [f"{k} {was[k]!r} -> {now.get(k)!r}" for k in sorted(was) if was[k] != now.get(k)]
    if changed:
        name = plan.request.experiment_name
        # a grid search of a paper space started before its default became a sampled one
        hint = (
            f"; a full-grid search resumes with --full-grid --experiment {name} --resume"
            if stored.get("search") == "grid" and plan.search != "grid" and plan.space.full_grid is not None
            else ""
        )
        started_with = was.get("asha.kind")
        if not hint and started_with and started_with != plan.scheduler:  # started before halving was default
            hint += f"; it was started with --scheduler {started_with}, which --resume must repeat"
        raise ModsarError(
            f"--resume must repeat the search that was started as '{name}', "
            f"but {', '.join(changed[:4])} changed (your options, or the space file since the search "
            "started, e.g. a bundled space a newer ModSAR revised); drop the changed options (only "
            f"--seeds may differ) or start a new --experiment{hint}"
        )


class _RestoreFailed(Exception):
    """Tune could not read back a search's state (and would have started the search again)."""


class _RefuseRestart(logging.Filter):
    """On Tune's controller logger while a search is restored. When Tune cannot read the search's state back
    it logs "Failed to restore the run state." and runs the search as if it were new (unless fail_fast, which
    a search cannot set: it would also end the search at its first trial error); from a restored searcher that
    ran a few trials, or none, and exited 0: a resumed search that silently lost trials. This turns that log
    record into an exception, before any trial runs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Failed to restore the run state"):
            raise _RestoreFailed(record.exc_info[1] if record.exc_info else record.getMessage())
        return True


@contextlib.contextmanager
def deleting_what_is_gone_is_done() -> Iterator[None]:
    """While a restored search runs, Tune's deletion of a checkpoint that is gone already does nothing. The
    state a search resumes from is Tune's last save (or its snapshot); a trial that registered a checkpoint
    after that save made Tune delete its oldest one beyond CheckpointConfig.num_to_keep. Restored, Tune still
    lists the deleted one and deletes it again at the trial's next checkpoint, where its deletion raised
    FileNotFoundError: logged as an error with a traceback, and the rest of that registration (the trial's
    checkpoint index, the save of the experiment's state it forces) skipped."""
    from ray.train._internal import checkpoint_manager

    delete = checkpoint_manager._delete_fs_path

    def delete_if_there(fs: pafs.FileSystem, fs_path: str) -> None:
        if fs.get_file_info(fs_path).type == pafs.FileType.NotFound:
            return
        delete(fs=fs, fs_path=fs_path)

    checkpoint_manager._delete_fs_path = delete_if_there
    try:
        yield
    finally:
        checkpoint_manager._delete_fs_path = delete


@contextlib.contextmanager
def restore_or_refuse(ray_path: str) -> Iterator[None]:
    """Raise one ModsarError naming the cause where Tune fails to restore the search at `ray_path`."""
    controller = logging.getLogger("ray.tune.execution.tune_controller")
    refuse = _RefuseRestart()
    controller.addFilter(refuse)
    try:
        yield
    except Exception as error:
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, (_RestoreFailed, ModuleNotFoundError)):
            cause = cause.__cause__ or cause.__context__
        if isinstance(cause, ModuleNotFoundError) and (cause.name or "").startswith("modsar"):
            raise ModsarError(
                f"--resume cannot restore the search in {ray_path}: its Tune state was saved by "
                f"another ModSAR, which had a module {cause.name} that this one has not; resume "
                "it with the ModSAR that started it, or start the search afresh with --overwrite"
            ) from None
        if cause is None or isinstance(cause, ModuleNotFoundError):
            raise
        reason = cause.args[0] if cause.args else "unknown"
        hint = (
            " (a file another user's Ray left; give each user a Ray temp folder of their own with RAY_TMPDIR)"
            if isinstance(reason, PermissionError)
            else ""
        )
        raise ModsarError(
            f"--resume cannot restore the search's Tune state in {ray_path}: "
            f"{type(reason).__name__ + ': ' if isinstance(reason, BaseException) else ''}{reason}"
            f"{hint}; nothing was run. Fix the cause and resume again, or start the search afresh "
            "with --overwrite"
        ) from None
    finally:
        controller.removeFilter(refuse)


EARLIER_NAMES = ("modsar.search",)  # this package's names before 0.3 (`modsar.search` is now the Python API)
# modules a search's tuner.pkl may name (its plan holds the space's SearchSpace) by where they were before
# 0.4, and complete: what a search pickles now names modsar.sweep.pickled, whose names are a contract, so a
# later move of their code adds nothing here
MOVED_MODULES = {
    "modsar.spaces": "modsar.sweep.spaces",
    "modsar.space_check": "modsar.sweep.space_check",
    "modsar.submit": "modsar.sweep.submit",
    "modsar.rows": "modsar.records.rows",
    "modsar.runs": "modsar.records.run",
    "modsar.checkpoints": "modsar.training.checkpoints",
    "modsar.feasible": "modsar.training.feasible",
    "modsar.flops": "modsar.training.flops",
    "modsar.heap": "modsar.training.heap",
    "modsar.optim": "modsar.training.optim",
    "modsar.generate": "modsar.evaluation.rollouts",
    "modsar.diagnostics": "modsar.analysis.diagnostics",
    "modsar.analyze": "modsar.analysis.analyze",
    "modsar.analyze_output": "modsar.analysis.output",
}


@contextlib.contextmanager
def modules_under_earlier_names() -> Iterator[None]:
    """While a search started by an earlier ModSAR is restored: its tuner.pkl names the Tune callbacks by the
    package's earlier names (modsar.search.<name>, modsar.search.rows.<name>) and the space by its module's
    earlier place (modsar.spaces), so those names are made to resolve to today's modules, in sys.modules only
    (the `modsar` package's attributes, the Python API, stay as they are), and are removed again
    afterwards."""
    from modsar import sweep

    modules = {}
    for info in pkgutil.iter_modules(sweep.__path__):  # every one, imported yet or not
        with contextlib.suppress(ImportError):  # one that needs an optional package it was resumed without
            modules[info.name] = importlib.import_module(f"modsar.sweep.{info.name}")
    aliases: dict[str, types.ModuleType] = {}
    for old in EARLIER_NAMES:
        aliases[old] = sweep
        aliases |= {f"{old}.{name}": module for name, module in modules.items()}
    for old, new in MOVED_MODULES.items():
        with contextlib.suppress(ImportError):
            aliases[old] = importlib.import_module(new)
    added = [name for name in aliases if name not in sys.modules]
    sys.modules.update({name: aliases[name] for name in added})
    try:
        yield
    finally:
        for name in [*added, *(n for n in sys.modules if n.split(".")[:2] == ["modsar", "search"])]:
            sys.modules.pop(name, None)


def restored_tuner(
    ray_path: str, trainable: Any, runs: Callable[[list], bool] | None = None
) -> tune.Tuner | None:
    """The Tuner a cut-off run left at `ray_path` (one direction's, or the seed re-runs'), restored to go on
    with its unfinished trials (each from its last pass) and retry its errored ones from their checkpoints;
    fit it under `restoring(ray_path)`. None where a fresh Tuner is to start instead: there is none, or it
    was killed before Tune's first save (nothing ran: its folder is deleted), or `runs`, given its trials
    (ray.tune.experiment.Trial: status, config, trial_id), says they are not the ones wanted now."""
    if not tune.Tuner.can_restore(ray_path):
        return None
    fs, path = filesystem(ray_path)
    if never_saved(ray_path):
        fs.delete_dir(path)
        return None
    remove_partial_files(ray_path)
    restore_snapshot(ray_path)  # Tune's state files as one save wrote them, whenever the kill came
    with restoring(ray_path):
        if runs is not None and not runs(ExperimentAnalysis(path, storage_filesystem=fs).trials):
            drop_resume_files(ray_path)  # its trials will not go on: only their weights are kept
            return None
        return tune.Tuner.restore(ray_path, trainable=trainable, resume_unfinished=True, resume_errored=True)


@contextlib.contextmanager
def restoring(ray_path: str, restored: bool = True) -> Iterator[None]:
    """While a Tuner from an earlier run is restored and fitted (`restored`; else nothing): the module names
    earlier versions pickled resolve, and a state Tune fails to read is one clear error (not a search
    silently run afresh)."""
    if not restored:
        yield
        return
    with modules_under_earlier_names(), restore_or_refuse(ray_path), deleting_what_is_gone_is_done():
        yield
