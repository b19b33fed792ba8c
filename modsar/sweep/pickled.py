"""The one import path of everything a search pickles for Tune.

A search's folder keeps pickles (tuner.pkl, the searcher's and the callbacks' states) that name the classes
and functions they hold by module, and `--resume`, perhaps with a later ModSAR, imports them from there. So
each of them says it lives here (`@pickled`: its `__module__` is this module, as numpy does for its public
functions), and this module hands out every name in CONTRACT, importing its defining module on first use. The
code can move between modules; the names below are a contract: keep each importable from here, with the same
meaning. (A search saved before this contract names the defining modules, which keep the names;
restore.MOVED_MODULES covers names older than 0.4.)
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, TypeVar

# each name a search may pickle -> the module whose code defines it
CONTRACT = {
    "SearchRequest": "modsar.sweep.request",  # what was asked, held by the plan
    "Plan": "modsar.sweep.plan",  # the plan, held by the trainable and the callbacks
    "SearchSpace": "modsar.sweep.spaces",  # the space; its `suggest` is Optuna's define-by-run function
    "Param": "modsar.sweep.spaces",
    "trainable": "modsar.sweep.trial",  # the function each trial runs
    "ResultRows": "modsar.sweep.rows",  # the Tune callbacks
    "LiveTable": "modsar.sweep.rows",
    "SchedulerState": "modsar.sweep.rows",
    "MLflowRuns": "modsar.sweep.tracking",
    "DistinctOptunaSearch": "modsar.sweep.searcher",  # the searcher, saved with its Optuna study
    "SuccessiveHalving": "modsar.sweep.halving",  # the scheduler, saved with the callbacks' states
}

T = TypeVar("T")


def pickled(obj: T) -> T:
    """Class or function decorator: `obj` (and a class's methods) pickle as `modsar.sweep.pickled.<name>`;
    `obj` must be in CONTRACT, defined in the module CONTRACT names."""
    name = obj.__name__  # type: ignore[attr-defined]
    if CONTRACT.get(name) != obj.__module__:
        raise ValueError(f"{obj.__module__}.{name} is not in modsar.sweep.pickled.CONTRACT")
    obj.__module__ = __name__
    for member in vars(obj).values() if isinstance(obj, type) else ():
        # its own methods (a bound one pickles by its function), not functions it merely refers to
        if inspect.isfunction(member) and member.__qualname__.startswith(f"{name}."):
            member.__module__ = __name__
    return obj


def __getattr__(name: str) -> Any:
    """A contract name, from its defining module (imported now: a worker that unpickles a trainable loads
    neither the callbacks' nor the searcher's modules)."""
    if name not in CONTRACT:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(CONTRACT[name]), name)
