"""What `modsar search` (and the API's `modsar.search`) is asked: SearchRequest, whose fields declare the
command's options. Light to import (no torch, no Ray): the command line builds its parser from it."""

from __future__ import annotations

import numbers
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from modsar.errors import ModsarError
from modsar.outputs import refuse_empty_folder
from modsar.sweep.credentials import refuse_on_a_cluster, take_secrets
from modsar.sweep.pickled import pickled

# the groups of `modsar search --help`, in its order
OPTION_GROUPS = ("what and where", "budget", "resources", "run")


def option(default: Any = None, help: str = "", group: str = "run", **argparse: Any) -> Any:
    """A SearchRequest field that is also a `modsar search` option: its default, said once, and its help;
    `modsar.cli.search` makes the option from it (--<field-name>, typed by the field's annotation; `flag`
    names another, `argparse` passes choices, metavar, required), and the API's keyword of the same name
    takes the same default."""
    return field(default=default, metadata={"help": help, "group": group, "argparse": argparse})


@pickled
@dataclass
class SearchRequest:
    """What `modsar search` (or the API's `modsar.search`) is asked to do: its options as given, credentials
    taken out; make_plan derives the rest. Each field declares its option (`option`): the one declaration
    of what a search takes."""

    space: str = option(
        MISSING,
        help="bundled space name (see `modsar spaces`) or a YAML path",
        group="what and where",
        required=True,
    )
    # "" only to plan without data (`modsar spaces --check`)
    dataset: str = option(MISSING, "prepared dataset name", "what and where", required=True)
    overrides: list[str] = field(
        default_factory=list,
        metadata={"help": "config overrides on the space's base", "group": "what and where"},
    )
    experiment: str | None = option(
        help="results group (default: <space>-<dataset>, -full-grid added with --full-grid)",
        group="what and where",
    )
    results: str = option("results", "results root: a path or a pyarrow URI (s3://...)", "what and where")
    # grid | random | optuna (default: the space's budget.search)
    search: str | None = option(
        help="search algorithm (default: the space's budget.search)",
        group="budget",
        choices=["grid", "random", "optuna"],
    )
    # run the space's full_grid protocol (every grid point) instead of its budget
    full_grid: bool = option(
        False,
        "run the space's full_grid protocol instead of its default budget: every grid point, with the "
        "paper's ASHA schedule (the paper spaces' default is a TPE search; `modsar spaces NAME --dataset D "
        "--full-grid` says what each costs). Rows go to <space>-<dataset>-full-grid",
        "budget",
    )
    num_samples: int | None = option(
        help="grid: repeats of the grid; random/optuna: trials (16)", group="budget"
    )
    max_epochs: int | None = option(help="epochs per trial (default: the space's budget)", group="budget")
    time_budget_s: float | None = option(
        help="wall-clock budget, split evenly between the AE and AR searches",
        group="budget",
        flag="--time-budget",
        metavar="SECONDS",
    )
    max_t: int | None = option(
        help="the scheduler's max_t, in the space's scheduler unit: validation passes, or optimizer steps "
        "where it says unit: steps (default: from the space)",
        group="budget",
    )
    grace_period: int | None = option(
        help="the scheduler's first rung (ASHA's grace period), in the same unit as --max-t", group="budget"
    )
    scheduler: str | None = option(
        help="how trials are stopped early: halving (the trials at a rung judged together, once all are "
        "there: a search's epochs fixed by its trial count) or asha (each trial judged as it reaches a rung, "
        "against those before it) (default: the space's scheduler.kind, else asha)",
        group="budget",
        choices=["asha", "halving"],
    )
    reduction_factor: int | None = option(
        help="the scheduler's reduction factor: 1 in this many trials goes on at each rung", group="budget"
    )
    cpus_per_trial: float = option(1.0, "CPUs per trial (= torch threads)", "resources")
    gpus_per_trial: float = option(0.0, "GPUs per trial; fractions share a GPU", "resources")
    max_concurrent: int | None = option(
        help="trials at once (default: what the resources allow)", group="resources"
    )
    max_failures: int = option(0, "retries of a failing trial", "resources")
    fresh_actors: bool = option(
        False,
        "start a new Ray actor for every trial. By default a finished trial's actor (torch imported, dataset "
        "loaded) runs the next one, and Tune gives it even a trial that waits for an actor starting on "
        "another node: in a short search on a cluster whose other nodes start slowly, one node can run every "
        "trial. Kept as started under --resume",
        "resources",
    )
    seed: int = option(0, "seed of the trials and of the random/optuna sampler")
    seeds: int = option(
        0,
        "afterwards re-run the selected AE and AR configs on seeds 0..K-1 (with --resume: the K the search "
        "was started with, unless this K is larger)",
        metavar="K",
    )
    address: str | None = option(
        help="join an existing Ray cluster (default: $RAY_ADDRESS, else a local Ray)"
    )
    dashboard: bool = option(False, "start the Ray dashboard (localhost only)")
    # MLflow tracking URI: one run per trial (params, per-epoch metrics)
    mlflow: str | None = option(
        help="also log every trial to MLflow, one run per trial with its params and per-epoch metrics "
        "(file:./mlruns, sqlite:///mlflow.db, http://HOST:5000); needs pip install 'modsar[mlflow]'. "
        "TensorBoard files are always in the ray/ folders",
        metavar="URI",
    )
    resume: bool = option(False, "continue a killed search (Tuner.restore)")
    overwrite: bool = option(
        False,
        "delete an existing search of this name first (only a folder holding a search that modsar search "
        "wrote; anything else is refused, never deleted)",
    )
    quiet: bool = option(False, "no live table; print only the cost estimate and the summary")
    data_dir: str | None = None  # --data-dir, as every command that reads datasets has it (cli.common)

    def __post_init__(self) -> None:
        """Each value is of its field's type (the API passes anything: "yes" would name the experiment and
        the resume command, "3" would fail after the search ran). No secret stays in a request: search.json
        records it and Tune pickles it (sweep.credentials)."""
        for name, declared in SEARCH_FIELDS.items():
            _check_type(name, str(declared.type), getattr(self, name))
        refuse_empty_folder("--results", self.results)
        refuse_on_a_cluster(self.address, self.mlflow, self.results)  # before the passwords are taken out
        self.mlflow = take_secrets("--mlflow", self.mlflow)
        self.results = take_secrets("--results", self.results) or self.results
        self.address = take_secrets("--address", self.address)

    @property
    def experiment_name(self) -> str:
        """The experiment's folder name: --experiment, or <space>-<dataset> (-full-grid with --full-grid)."""
        full = "-full-grid" if self.full_grid else ""
        return self.experiment or f"{Path(self.space).stem}-{self.dataset}{full}"


def option_flag(name: str) -> str:
    """The `modsar search` option of SearchRequest field `name`: --<name with dashes>, or its own `flag`."""
    metadata = SEARCH_FIELDS[name].metadata
    return metadata.get("argparse", {}).get("flag", "--" + name.replace("_", "-"))


SEARCH_FIELDS = {f.name: f for f in fields(SearchRequest)}
# SearchRequest fields whose option has another name (--time-budget SECONDS) -> the option's argparse dest
OPTION_DEST = {
    name: option_flag(name)[2:].replace("-", "_")
    for name in SEARCH_FIELDS
    if "flag" in SEARCH_FIELDS[name].metadata.get("argparse", {})
}

# a field's type -> (whether a value is one, how a message names it)
FIELD_KINDS: dict[str, tuple[Any, str]] = {
    "str": (lambda v: isinstance(v, str), "text"),
    "bool": (lambda v: isinstance(v, bool), "True or False"),
    "int": (lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool), "a whole number"),
    "float": (lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool), "a number"),
    "list[str]": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of texts"),
}


def _check_type(name: str, kind: str, value: Any) -> None:
    """`value` is of the field's type (`kind`, an annotation: "int | None" also takes None), or one line."""
    optional = kind.endswith(" | None")
    test, words = FIELD_KINDS[kind.removesuffix(" | None")]
    if not (test(value) or (optional and value is None)):
        raise ModsarError(f"{name} must be {words}{' or None' if optional else ''}; got {value!r}")
