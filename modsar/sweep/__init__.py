"""`modsar search` (the package modsar.sweep): a design space searched by Ray Tune, every trial one Parquet
row.

Each trial runs `training.run_trial` (the same function as `modsar train`) inside a Ray Tune function
trainable and reports validation metrics at every evaluation, with a checkpoint whenever the monitored metric
improves (and, under successive halving, at each rung). A scheduler stops weak trials early (synchronous
successive halving, the paper spaces' default, or Ray's ASHA); grid enumerates the conditional grid exactly;
random and Optuna sample through Ray's OptunaSearch (RandomSampler / TPE, both seeded). A driver-side callback
writes one row per trial as it ends (finished, stopped early, or error); after the search the best AE and best
AR trial (best validation epoch) are tested from their best checkpoints and marked selected.

Layout: ``<results>/<experiment>/{search.json, trials/*.parquet, ray/ (Tune state and checkpoints)}``. A
killed driver is resumed with ``--resume`` (Tuner.restore): unfinished trials continue from their last
checkpoint (the latest improvement) with the optimizer and RNG states saved beside it, so results equal an
uninterrupted run (tested), errored trials are retried, finished rows are kept as they are.

The package: `spaces` (the YAML design spaces) and `space_check` (every configuration a space could run,
validated), `plan` (request -> checked plan), `cost` (what the search will cost, before it runs), `probe` (the
cost's few seconds of timing) and `scheduler_replay` (its replay of ASHA or successive halving), `trial` (the
trainable: a trial in a Ray worker), `halving` (the successive-halving scheduler), `searcher` (Optuna without
repeats), `rows` (one Parquet row per trial), `tracking` (MLflow), `credentials` (no secret in a file or a
line), `tuner` (the search: one Tuner per direction), `cluster` and `ray_session` (the Ray a search runs on),
`restore` (--resume), `interrupt` (Ctrl-C and the search's status), `pickled` (what Tune pickles, one import
path), `search_folder` (the experiment's folder and search.json), `selection` (selection, testing and seed
re-runs), `timing` (where a search's time went), `storage` (Tune's state, one snapshot a save, for --resume),
`submit` (a command as a Ray job on a cluster).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as a type checker sees them; at run time __getattr__ imports them
    from modsar.sweep.plan import Plan, SearchRequest, make_plan, trial_config
    from modsar.sweep.ray_session import check_resources, connect_ray
    from modsar.sweep.rows import LiveTable, ResultRows, SchedulerState, reconcile_rows, row_from_results
    from modsar.sweep.selection import rerun_seeds, select_and_test
    from modsar.sweep.trial import make_trainable, trainable
    from modsar.sweep.tuner import run_search

# where each name the package exports lives; imported on first use, so that `modsar spaces` (which reads
# modsar.sweep.spaces) does not start Ray Tune and torch. The Tune callbacks are among them because a search
# started before the package split pickled them at the package's top (as modsar.search.<name>); --resume
# finds them there under that name (restore.modules_under_earlier_names)
_HOME = {
    "plan": ["Plan", "SearchRequest", "make_plan", "trial_config"],
    "rows": ["LiveTable", "ResultRows", "SchedulerState", "reconcile_rows", "row_from_results"],
    "trial": ["make_trainable", "trainable"],
    "ray_session": ["check_resources", "connect_ray"],
    "selection": ["rerun_seeds", "select_and_test"],
    "tuner": ["run_search"],
}
_MODULE_OF = {name: module for module, names in _HOME.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'modsar.sweep' has no attribute {name!r}")
    return getattr(importlib.import_module(f"modsar.sweep.{_MODULE_OF[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULE_OF])


__all__ = [
    "LiveTable",
    "Plan",
    "ResultRows",
    "SchedulerState",
    "SearchRequest",
    "check_resources",
    "connect_ray",
    "make_plan",
    "make_trainable",
    "reconcile_rows",
    "rerun_seeds",
    "row_from_results",
    "run_search",
    "select_and_test",
    "trainable",
    "trial_config",
]
