"""What a search will do: the request, and the plan derived from it, checked before Ray starts or
anything is written."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from modsar.config import Config, parse_override
from modsar.data.store import data_root, load_dataset
from modsar.errors import ModsarError
from modsar.sweep.cluster import probe
from modsar.sweep.credentials import (
    environment,
    mlflow_env,
    mlflow_uri,
    redact,
)
from modsar.sweep.pickled import pickled
from modsar.sweep.request import OPTION_DEST, SearchRequest  # noqa: F401 (see below)
from modsar.sweep.space_check import SpaceCheck, check_space, dataset_sizes
from modsar.sweep.spaces import Param, SearchSpace, grid_size_by_task, load_space

# SearchRequest stays importable from here: tuner.pkl files of searches saved before the pickle contract
# (0.4) name modsar.sweep.plan.SearchRequest

# ASHA's max_t where a space counts optimizer steps and names none: max_epochs ends trials
STEPS_MAX_T = 2**62


@pickled
@dataclass
class Plan:
    """Everything a search will do, derived from its request and checked before Ray starts: the space, the
    base config of every trial, each direction's search and trials, the scheduler's settings, where rows
    go."""

    request: SearchRequest
    space: SearchSpace
    base: dict[str, Any]  # full base config (space base + CLI overrides), nested
    search: str
    num_samples: int
    max_t: int
    grace_period: int
    reduction_factor: int
    monitor: str
    root: str  # experiment folder (path or URI)
    data_root: str
    manifest: dict  # the prepared dataset's manifest (recorded in every row)
    unit: str = "passes"  # what max_t and grace_period count: validation passes, or optimizer steps
    # task -> [search, num_samples] of its Tuner: a sampled direction whose grid has at most num_samples
    # points runs its grid once instead (see directions())
    per_task: dict[str, list] = field(default_factory=dict)
    trials: dict[str, int] = field(default_factory=dict)  # task -> the trials its Tuner runs
    scheduler: str = "asha"  # asha (Ray's, asynchronous) or halving (modsar.sweep.halving, synchronous)

    def search_of(self, task: str) -> str:
        """The search algorithm of `task`'s Tuner (a sampled direction with a small grid runs "grid")."""
        per_task = getattr(self, "per_task", {})  # none in a plan pickled by an earlier ModSAR
        return per_task[task][0] if task in per_task else self.search

    def samples_of(self, task: str) -> int:
        """The num_samples of `task`'s Tuner (1 where a sampled direction runs its grid)."""
        per_task = getattr(self, "per_task", {})
        return per_task[task][1] if task in per_task else self.num_samples

    def trials_of(self, task: str) -> int:
        """The trials `task`'s Tuner runs: its grid points times num_samples, or its samples."""
        return self.trials[task]

    @property
    def time_attr(self) -> str:
        """The reported value ASHA's rungs are counted in (successive halving's: halving.halving_time)."""
        return "steps" if self.unit == "steps" else "training_iteration"

    def check(self) -> SpaceCheck:
        """Every configuration this search can run, validated (with the dataset's sizes when there is one)."""
        sizes = dataset_sizes(self.manifest) if self.manifest else None
        return check_space(
            self.space,
            self.base,
            self.search,
            self.trials,
            sizes,
            self.request.dataset or None,
            self.per_task,
        )


def make_plan(req: SearchRequest, check: bool = True) -> Plan:
    """Everything the search will do, derived and checked before Ray starts: with `check`, every
    configuration of the space is validated against the dataset (modsar.sweep.space_check) and all problems
    are raised at once. An empty `req.dataset` plans without data (`modsar spaces NAME --check` without
    --dataset)."""
    _check_request_numbers(req)
    space = load_space(req.space)
    if req.full_grid:
        if req.search not in (None, "grid"):
            raise ModsarError(f"--full-grid runs a grid search; drop --search {req.search}")
        space = space.as_full_grid()
    overrides = _base_overrides(req, space)
    cfg = space.base_config(overrides)
    if "task" in overrides:  # a space without a task param runs the overridden direction: count it as that
        space.base = {**space.base, "task": cfg.task.value}
    search, num_samples, per_task, trials = _search_and_samples(req, space)
    unit, max_t, grace, factor = _asha_settings(req, space, cfg)
    scheduler = req.scheduler or str(space.scheduler.get("kind", "asha"))
    if scheduler == "halving" and max_t >= STEPS_MAX_T:  # rungs every rf-fold of steps, without end
        raise ModsarError(
            f"space '{space.path}': successive halving in steps needs a max_t (its last rung's steps); give "
            "scheduler.max_t in the space or --max-t, or run --scheduler asha"
        )
    _check_resources(req)
    if req.mlflow is not None:
        _check_mlflow(req.mlflow)
    # unknown or unprepared dataset: refused here
    manifest = load_dataset(req.dataset, req.data_dir).manifest if req.dataset else {}
    plan = Plan(
        req,
        space,
        cfg.to_dict(),
        search,
        num_samples,
        max_t,
        grace,
        factor,
        cfg.train.monitor_key,
        req.results.rstrip("/") + "/" + req.experiment_name,
        str(data_root(req.data_dir).resolve()),
        manifest,
        unit,
        per_task,
        trials,
        scheduler,
    )
    if check:
        plan.check().raise_if_invalid()
    return plan


def directions(space: SearchSpace, search: str, num_samples: int) -> tuple[dict[str, list], dict[str, int]]:
    """Each direction's [search, num_samples], and its trials: the search's own, except that a random/optuna
    direction of grid/choice params with at most num_samples points runs that grid (every point once):
    sampling it would train some points twice, identically, and miss others. Only the directions that run a
    grid are counted as one (a sampled direction may have continuous params)."""
    per_task: dict[str, list] = {}
    trials: dict[str, int] = {}
    counts = grid_size_by_task(space) if search == "grid" else {}
    for task in space.tasks():
        if search == "grid":
            per_task[task], trials[task] = ["grid", num_samples], counts[task] * num_samples
            continue
        size = _categorical_size(space.for_task(task), num_samples)
        if size is not None and size <= num_samples:
            per_task[task], trials[task] = ["grid", 1], size
        else:
            per_task[task], trials[task] = [search, num_samples], num_samples
    return per_task, trials


def _categorical_size(space: SearchSpace, limit: int) -> int | None:
    """The points of a space whose active params are all grid/choice (counted, never built), or None when one
    is continuous or randint (it stands for more values than any limit) or the count passes `limit`."""
    # a non-categorical param multiplies the count past the limit (no `when` names one)
    endless: list = [None] * (limit + 1)
    size, exact = space.count_points(lambda p: p.values if p.categorical else endless, limit)
    return size if exact and size <= limit else None


def _base_overrides(req: SearchRequest, space: SearchSpace) -> dict[str, Any]:
    """The dotted keys every trial shares on top of the space's base: the KEY=VALUE overrides, the dataset,
    the seed and the budget's epochs. An override of a searched key is the value where no param sets it (a
    conditional param's condition does not hold): refused only where some param sets it in every trial, so
    that it could never take effect."""
    overrides = dict(parse_override(o) for o in req.overrides)
    if clash := next((k for k in overrides if space.sets_everywhere(k)), None):
        searched = " and ".join(
            f"params.{p.key}" if p.key == clash else f"the 'also' of params.{p.key}"
            for p in space.sources(clash)
        )
        raise ModsarError(
            f"override '{clash}={overrides[clash]}' sets a key the space searches "
            f"({searched}), whose values would replace it in every trial; drop the override, "
            "or copy the space file and change its params"
        )
    if req.dataset:
        overrides["dataset"] = req.dataset
    budget = space.budget
    for key, flag, given in (("seed", "--seed", True), ("train.max_epochs", "--max-epochs", req.max_epochs)):
        if key in overrides and given is not None:  # one would win silently; a seed override would seed the
            raise ModsarError(  # trials but not the sampler
                f"override '{key}={overrides[key]}' repeats {flag}, which sets it for the search: give "
                f"{flag} {overrides[key]} instead"
            )
    if req.max_epochs is not None:
        overrides["train.max_epochs"] = req.max_epochs
    overrides.setdefault("train.max_epochs", budget.get("max_epochs", Config().train.max_epochs))
    overrides.setdefault("train.eval_every", budget.get("eval_every", 1))
    overrides.setdefault("seed", req.seed)
    return overrides


def _search_and_samples(
    req: SearchRequest, space: SearchSpace
) -> tuple[str, int, dict[str, list], dict[str, int]]:
    """(search, num_samples, each direction's [search, num_samples], its trials): the flags' or the space
    budget's, checked so that no configuration would be trained twice identically."""
    budget = space.budget
    search = req.search or budget.get("search", "grid")
    if search not in ("grid", "random", "optuna"):
        raise ModsarError(f"--search must be grid, random or optuna; got {search!r}")
    default_samples = budget.get("num_samples") if search == budget.get("search", "grid") else None
    if req.num_samples is not None and req.num_samples < 1:
        raise ModsarError(f"--num-samples must be >= 1; got {req.num_samples}")
    num_samples = req.num_samples or default_samples or (1 if search == "grid" else 16)
    per_task, trials = directions(space, search, num_samples)
    _check_repeats(
        space,
        search,
        num_samples,
        f"--num-samples {num_samples}"
        if req.num_samples
        else f"its budget.num_samples: {num_samples}"
        if default_samples
        else f"the default {num_samples} samples",
        [t for t, (s, _) in per_task.items() if s == search],
    )
    return search, num_samples, per_task, trials


def _asha_settings(req: SearchRequest, space: SearchSpace, cfg: Config) -> tuple[str, int, int, int]:
    """(unit, max_t, grace period, reduction factor) of the scheduler (ASHA or successive halving): the flags'
    or the space scheduler's, fitted to the trial's budget, and refused where no trial could reach a first
    rung."""
    unit = str(space.scheduler.get("unit", "passes"))
    if unit == "steps":  # the trial's epochs end it first wherever max_t is larger than its steps
        max_t = req.max_t or space.scheduler.get("max_t", STEPS_MAX_T)
    else:
        evals = max(1, math.ceil(cfg.train.max_epochs / cfg.train.eval_every))
        max_t = req.max_t or min(space.scheduler.get("max_t", evals), evals)
    grace = req.grace_period or space.scheduler.get("grace_period", 1)
    # in passes the grace shrinks to a shorter budget; a stated one does not
    if unit == "steps" and grace > max_t:
        raise ModsarError(
            f"space '{space.path}': the scheduler's grace period ({grace:,} steps) is past its max_t "
            f"({max_t:,} steps), so no trial could reach a first rung; lower the grace (--grace-period) "
            "or raise max_t (--max-t)"
        )
    grace = min(grace, max_t)
    factor = req.reduction_factor
    factor = space.scheduler.get("reduction_factor", 2) if factor is None else factor  # 0 is given, not unset
    if not 2 <= factor <= MAX_REDUCTION_FACTOR:
        raise ModsarError(
            f"--reduction-factor must be from 2 to {MAX_REDUCTION_FACTOR} (each rung keeps 1 trial in that "
            f"many); got {factor}"
        )
    return unit, max_t, grace, factor


MAX_REDUCTION_FACTOR = 1000  # beyond it no rung keeps a trial of any search that runs on one machine
MAX_SEEDS = 1000  # --seeds: re-runs of each pick; more is a study of its own, and each costs a training
LEAST_SHARE = 0.01  # of a CPU or GPU a trial may hold: Ray counts in steps of 1e-4, and refuses far less


def _check_resources(req: SearchRequest) -> None:
    """A trial's CPUs and GPUs must be amounts Ray can reserve: refused here rather than by Ray's asserts."""
    if not LEAST_SHARE <= req.cpus_per_trial < math.inf:  # NaN fails both
        raise ModsarError(f"--cpus-per-trial must be at least {LEAST_SHARE}; got {req.cpus_per_trial}")
    if not (req.gpus_per_trial == 0 or LEAST_SHARE <= req.gpus_per_trial < math.inf) or (
        req.gpus_per_trial > 1 and req.gpus_per_trial != int(req.gpus_per_trial)
    ):
        raise ModsarError(
            f"--gpus-per-trial must be 0, a fraction from {LEAST_SHARE} to 1, or a whole number; "
            f"got {req.gpus_per_trial}"
        )


def _check_request_numbers(req: SearchRequest) -> None:
    """Counts and budgets given on the command line must mean something: a value of 0 or less never stands for
    "the default" (leave the flag out for that), and Ray would take a negative one as an assertion failure."""
    own = "the space's own setting"
    at_least = {  # flag: (value, least, what leaving the flag out gives)
        "--max-epochs": (req.max_epochs, 1, own),
        "--max-t": (req.max_t, 1, own),
        "--grace-period": (req.grace_period, 1, own),
        "--max-concurrent": (req.max_concurrent, 1, "as many as the CPUs and GPUs allow"),
        "--max-failures": (req.max_failures, 0, "no retries"),
        "--seeds": (req.seeds, 0, "no seed re-runs; with --resume, those the search was started with"),
    }
    for flag, (value, low, default) in at_least.items():
        if value is not None and value < low:
            raise ModsarError(f"{flag} must be >= {low}; got {value} (leave it out for {default})")
    if req.seeds > MAX_SEEDS:
        raise ModsarError(
            f"--seeds must be at most {MAX_SEEDS}: each is one more training of every pick; got {req.seeds}"
        )
    if req.time_budget_s is not None and not req.time_budget_s > 0:
        raise ModsarError(
            f"--time-budget must be > 0 seconds; got {req.time_budget_s:g} (leave it out for none)"
        )


def _check_repeats(space: SearchSpace, search: str, num_samples: int, source: str, tasks: list[str]) -> None:
    """Every trial of a search runs on the one --seed, so a configuration sampled twice trains the same model
    twice: a grid search runs each point once, and a random/optuna search of a direction with one possible
    configuration runs one trial (`tasks`: the directions that sample; the others run their grid). Replicates
    on other seeds are --seeds K."""
    if num_samples == 1:
        return
    replicas = f"replicates of the selected configs on seeds 0..{num_samples - 1} are --seeds {num_samples}"
    if search == "grid":
        raise ModsarError(
            f"space '{space.path}': a grid search runs each point once, but {source} would train "
            f"each point {num_samples} times, identically (one --seed); use --num-samples 1: {replicas}"
        )
    for task in tasks:
        if space.for_task(task).count_points(_distinct_values, 2)[0] == 1:
            raise ModsarError(
                f"space '{space.path}': {task.upper()} has one possible configuration, so "
                f"{source} would train it {num_samples} times, identically (one --seed); use "
                f"--num-samples 1: {replicas}"
            )


def _distinct_values(p: Param) -> list:
    """A param's distinct values, as far as telling one configuration from several needs (a continuous range
    or a wide randint stands as two values that no `when` names)."""
    if p.categorical:
        return p.values  # duplicates are refused when the space loads
    if p.kind == "randint" and p.values[1] - p.values[0] <= 2:
        return list(range(p.values[0], p.values[1]))
    return [object(), object()]


def _check_mlflow(uri: str) -> None:
    """--mlflow needs MLflow installed and a tracking URI it can write to (refused before Ray starts)."""
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise ModsarError("--mlflow needs MLflow: pip install 'modsar[mlflow]'") from None
    if not uri or ("://" not in uri and not uri.startswith("file:")):
        raise ModsarError(
            f"--mlflow {uri!r} is not a tracking URI; use e.g. file:./mlruns, sqlite:///mlflow.db or "
            "http://HOST:5000"
        )
    _reach_mlflow(uri)


def _reach_mlflow(shown: str) -> None:
    """An MLflow server must answer, and take the credentials, now: the MLflow client retries an unreachable
    one for minutes, then the search died with a traceback. One TCP connection (a few seconds), then one
    request with the credentials and without retries; each refused in one line that hides the password."""
    try:
        parts = urlsplit(mlflow_uri(shown))
    except ValueError as exc:  # "Invalid IPv6 URL": a '[' with no ']'
        raise ModsarError(
            f"--mlflow {redact(shown)}: not a URL ({exc}); use e.g. http://HOST:5000 or http://[::1]:5000"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # urlsplit reads what follows the host's ':' as its port
        raise ModsarError(
            f"--mlflow {redact(shown)}: its port is not a number from 0 to 65535; use e.g. http://HOST:5000"
        ) from None
    probe(parts.hostname, port, f"--mlflow {shown}", "start the MLflow server or fix --mlflow")
    from mlflow.tracking import MlflowClient

    once = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
    with environment({**mlflow_env(shown), **once}):
        try:
            MlflowClient(mlflow_uri(shown)).search_experiments(max_results=1)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ModsarError(
                f"--mlflow {shown}: the MLflow server refused a request: {redact(first)[:300]}"
            ) from None


def trial_config(base: dict[str, Any], space: SearchSpace, sampled: dict[str, Any]) -> Config:
    """The Config a trial runs: the plan's base with the sampled point (and its `also` keys) applied, and
    validated once, as a whole."""
    return Config.from_dict(base, "trial", changes=space.expand(sampled))


def sampled_values(config: dict[str, Any]) -> dict[str, Any]:
    """Tune's trial config -> the sampled dotted keys (grid wraps them under 'point')."""
    return dict(config.get("point", config))
