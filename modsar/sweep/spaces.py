"""Design spaces: YAML files that say which config keys a search varies, and how.

Schema (every key is checked; nothing is evaluated as code, YAML is read with ``safe_load``)::

    description: one line shown by `modsar spaces`
    paper: where the space comes from (optional)
    base:                      # fixed config values (dotted keys, as in `modsar train`)
      loss.name: ce
    params:                    # searched keys; each has exactly one distribution
      task: {grid: [ae, ar]}
      model.hidden_size: {grid: [32, 64]}              # grid: every value (a categorical for random/optuna)
      model.dropout: {grid: [0.0, 0.2], also: [model.attn_dropout]}   # same value for other keys too
      train.lr: {loguniform: [1.0e-4, 1.0e-2]}         # also: choice [..], uniform [lo, hi], randint [lo, hi)
      mask_prob: {grid: [0.2, 0.4], when: {task: ae}}  # only sampled when the condition holds
    scheduler: {max_t: 40, grace_period: 5, reduction_factor: 2}   # ASHA, in validation passes, or with
                               # unit: steps in optimizer steps (a small dataset then gets as many steps
                               # before a decision as a large one)
    budget: {search: grid, num_samples: 1, max_epochs: 200, eval_every: 5}
    full_grid:                 # optional: what `--full-grid` runs instead (a grid search, its own ASHA)
      scheduler: {max_t: 40, grace_period: 5, reduction_factor: 2}
      budget: {search: grid, num_samples: 1, max_epochs: 200, eval_every: 5}
    arms: [model.positional]   # optional: params whose values are models compared with each other: the search
                               # selects (and tests) the best trial of every task x backbone x arms value

A condition names another param and a value or a list of values; a param whose condition does not hold
keeps the base/default value. A sampled search (random, optuna) of a direction whose grid has at most
num_samples points runs that grid instead: every point once, never one twice. Grid search enumerates the
conditional product exactly (AE gets the `mask_prob` grid, AR does not), so no point is run twice.

A space means what it says: each key is set by one source in any one point (a key searched is in no `also`
list of a param that can be active with it, an `also` target in one such list, never `task`; a YAML key
given twice is refused), a grid lists each value once (1 and 1.0 are one value of a float key), what the
search compares and its budget (FIXED_KEYS) are never searched, and a grid is counted without being built:
one above MAX_GRID_POINTS is refused before any point exists.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modsar.config import Config, apply_overrides, load_yaml_file, set_value
from modsar.errors import ModsarError
from modsar.sweep.pickled import pickled


def _bundled_folder() -> Path:
    """Where the bundled spaces are. An installed ModSAR (a wheel, an image, an editable checkout) carries
    them as the package data `modsar.search_spaces`, built from the top-level search_spaces/ folder; a source
    tree on the path but never installed (a Ray job's working_dir on a bare node) has only that folder."""
    try:
        found = importlib.resources.files("modsar.search_spaces")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "search_spaces"
    return Path(str(found))  # ModSAR is installed unzipped: the package data is a folder on disk


SPACES_DIR = _bundled_folder()
DISTRIBUTIONS = ("grid", "choice", "uniform", "loguniform", "randint")
TOP_KEYS = {"description", "paper", "base", "params", "scheduler", "budget", "arms", "full_grid"}
SCHEDULER_KEYS = {"max_t", "grace_period", "reduction_factor", "unit", "kind"}
# asha: Ray's asynchronous ASHA (the paper's); halving: synchronous successive halving (modsar.sweep.halving)
SCHEDULER_KINDS = ("asha", "halving")
SCHEDULER_UNITS = (
    "passes",
    "steps",
)  # what grace_period and max_t count: validation passes or optimizer steps
BUDGET_KEYS = {"search", "num_samples", "max_epochs", "eval_every"}
SEARCHES = ("grid", "random", "optuna")
# Grid search builds every point (and Tune a trial object for each): a larger grid is refused before any
# is built; random/Optuna search samples --num-samples points of any space.
MAX_GRID_POINTS = 100_000
# Keys every trial of a search shares: a search selects across its trials by their validation values, so
# what is compared (the data and its cut, modsar.report.protocol.PROTOCOL's evaluation keys, the monitored
# metric) and the budget are fixed for the search; none may be a param or an `also` target. Key -> why, and
# what instead.
_PROTOCOL = (
    "validation values measured under different evaluation protocols are not comparable (modsar "
    "report keeps them apart), so no trial could be selected over the others; set it in 'base' and "
    "run one search per protocol"
)
# keys the search itself sets for every trial, from its flags and budget: a value in a space's base never runs
BASE_FIXED: dict[str, str] = {
    "dataset": "the search runs on its --dataset",
    "seed": "--seed sets every trial's seed (default 0)",
    "train.max_epochs": "the budget sets it (budget.max_epochs, or --max-epochs)",
    "train.eval_every": "the budget sets it (budget.eval_every)",
}
FIXED_KEYS: dict[str, str] = {
    "dataset": "every trial runs on the search's --dataset (another dataset's trial would be selected and "
    "tested on the wrong data); remove it from params and run one search per dataset",
    "seed": "--seed sets every trial's seed, and --seeds K re-runs the selected configs on seeds 0..K-1 as "
    "replicates; remove it from params",
    "train.max_epochs": "the budget sets it for every trial (budget.max_epochs, or --max-epochs) and ASHA's "
    "max_t counts from it; remove it from params",
    "train.eval_every": "the budget sets it for every trial (budget.eval_every) and ASHA counts in its "
    "validation passes; remove it from params",
    "train.monitor": "trials are stopped early and selected by one validation metric; set it in 'base' and "
    "run one search per metric",
    "eval.ks": "it only says which cutoffs are reported, so each value would train the same model again and "
    "rows would report different metrics; set it in 'base'",
    "eval.filter_seen": _PROTOCOL,
    "eval.sampled_negatives": _PROTOCOL,
    "eval.sample_seed": _PROTOCOL,
}
FIXED_PREFIXES = ("data.view", "data.split")  # how the data is viewed and cut (data.split_valid, ...)


@pickled
@dataclass
class Param:
    """One searched key: its distribution, its values or range, when it is active, and the keys that take its
    value too."""

    key: str
    kind: str  # one of DISTRIBUTIONS
    values: list  # grid/choice: the values; uniform/loguniform/randint: [low, high]
    when: dict[str, list] = field(default_factory=dict)
    also: list[str] = field(default_factory=list)

    def active(self, point: dict[str, Any]) -> bool:
        """Whether the param is sampled at `point` (its `when` conditions hold there)."""
        return all(point.get(k) in allowed for k, allowed in self.when.items())

    @property
    def categorical(self) -> bool:
        """Whether its values are a finite list (grid or choice): the only kind a grid, or a `when`, can
        name."""
        return self.kind in ("grid", "choice")


@pickled
@dataclass
class SearchSpace:
    """A design space as its YAML file says it (see the module docstring): fixed base values, searched params,
    ASHA's settings and the budget, and optionally the full-grid protocol and the arms compared."""

    name: str
    path: str
    description: str
    paper: str
    base: dict[str, Any]
    params: list[Param]
    scheduler: dict[str, int]
    budget: dict[str, Any]
    arms: list[str] = field(default_factory=list)  # params whose values are compared models (see the schema)
    # the `full_grid` section: {"scheduler": ..., "budget": ...} that `--full-grid` runs instead, or None
    full_grid: dict[str, dict] | None = None

    def base_config(self, overrides: dict[str, Any] | None = None) -> Config:
        """The Config of the space's base with `overrides` on top, validated."""
        cfg = Config()
        apply_overrides(cfg, {**self.base, **(overrides or {})}, f"space '{self.name}'")
        return cfg

    def expand(self, point: dict[str, Any]) -> dict[str, Any]:
        """Sampled values -> config overrides (adds the `also` keys)."""
        out = dict(point)
        for p in self.params:
            if p.key in point:
                out.update({k: point[p.key] for k in p.also})
        return out

    def tasks(self) -> list[str]:
        """The AE/AR values this space covers (the `task` param's values, else the base task)."""
        for p in self.params:
            if p.key == "task":
                return list(dict.fromkeys(p.values))
        return [self.base.get("task", Config().task.value)]

    def for_task(self, task: str) -> SearchSpace:
        """The same space with `task` fixed: one ASHA bracket never compares AE with AR trials."""
        params = [Param(p.key, "grid", [task], p.when, p.also) if p.key == "task" else p for p in self.params]
        return dataclasses.replace(self, params=params, arms=list(self.arms))

    def as_full_grid(self) -> SearchSpace:
        """The space under its `full_grid` protocol (`--full-grid`): every grid point, with the scheduler and
        budget that section names; refused for a space that has none."""
        if self.full_grid is None:
            raise ModsarError(
                f"space '{self.path}' has no full_grid section, so --full-grid has no protocol to run; "
                "drop --full-grid (its budget already says how it searches), or use --search grid"
            )
        return dataclasses.replace(
            self,
            scheduler=dict(self.full_grid["scheduler"]),
            budget=dict(self.full_grid["budget"]),
            full_grid=None,
        )

    def points(self, values_of: Callable[[Param], list]) -> list[dict[str, Any]]:
        """The conditional product of `values_of(param)` over the params, in a stable order: a param whose
        `when` does not hold at a point is left out of it (no point is produced twice)."""
        points: list[dict[str, Any]] = [{}]
        for p in self.params:
            values = values_of(p)
            points = [
                new
                for point in points
                for new in ([{**point, p.key: v} for v in values] if p.active(point) else [point])
            ]
        return points

    def count_points(self, values_of: Callable[[Param], list], limit: int) -> tuple[int, bool]:
        """How many points `points(values_of)` gives, counted without building them: (count, exact).

        Only the values that later `when` conditions read keep partial points apart; the others multiply.
        Distinct partial points never exceed the final count, so past `limit` of them the count is above
        `limit` and it stops there: (a lower bound above `limit`, False)."""
        later = [{k for q in self.params[i + 1 :] for k in q.when} for i in range(len(self.params))]
        values: dict[str, list] = {}
        states: dict[tuple, int] = {(): 1}  # values (as indices) of the keys later conditions read -> points
        for i, p in enumerate(self.params):
            values[p.key] = values_of(p)
            new: dict[tuple, int] = {}
            for state, n in states.items():
                kept = tuple((k, j) for k, j in state if k in later[i])
                if not p.active({k: values[k][j] for k, j in state}):
                    new[kept] = new.get(kept, 0) + n
                elif p.key in later[i]:
                    for j in range(len(values[p.key])):
                        split = (*kept, (p.key, j))
                        new[split] = new.get(split, 0) + n
                else:
                    new[kept] = new.get(kept, 0) + n * len(values[p.key])
                if len(new) > limit:
                    return sum(new.values()), False
            states = new
        return sum(states.values()), True

    def grid_values(self, p: Param) -> list:
        """A param's values in grid search (only grid/choice params have a finite set)."""
        if not p.categorical:
            raise ModsarError(
                f"space '{self.name}': grid search needs grid/choice params, but '{p.key}' is "
                f"{p.kind}; use --search random or --search optuna"
            )
        return p.values

    def grid_points(self) -> list[dict[str, Any]]:
        """Every point of the conditional grid, in a stable order; a grid above MAX_GRID_POINTS is refused
        before any point is built."""
        grid_size_by_task(self)
        return self.points(self.grid_values)

    def suggest(self, trial) -> dict[str, Any]:
        """Optuna define-by-run: sample the params in file order, honouring conditions."""
        point: dict[str, Any] = {}
        for p in self.params:
            if not p.active(point):
                continue
            if p.categorical:
                point[p.key] = trial.suggest_categorical(p.key, p.values)
            elif p.kind == "randint":
                point[p.key] = trial.suggest_int(p.key, p.values[0], p.values[1] - 1)
            else:
                point[p.key] = trial.suggest_float(
                    p.key, p.values[0], p.values[1], log=p.kind == "loguniform"
                )
        return point

    def sources(self, key: str) -> list[Param]:
        """The params that set `key` in a trial: the param of that key, and those whose `also` names it."""
        return [p for p in self.params if p.key == key or key in p.also]

    def sets_everywhere(self, key: str) -> bool:
        """Whether some param sets `key` in every point, so that a KEY=VALUE override of it never takes
        effect. A conditional param leaves the base value where its condition does not hold: an override sets
        that."""
        return _covers_every_point(self.params, self.sources(key))

    def size(self) -> int | None:
        """Points of the full grid (a lower bound above MAX_GRID_POINTS when the count stopped there), or
        None for a space with continuous params; counted, never built."""
        if not all(p.categorical for p in self.params):
            return None
        return self.count_points(self.grid_values, MAX_GRID_POINTS)[0]


_OTHER = object()  # a continuous param's value that no `when` condition names (equal to nothing else)
MAX_COVER_POINTS = 100_000  # partial points enumerated to decide whether an override can take effect


def _requirements(params: list[Param], starts: list[Param]) -> dict[str, list] | None:
    """The values each key must take for every param of `starts` to be active in one point, or None when no
    point has them all active (two conditions on one key with no value in common, however far down the chain
    of conditions they are).

    Exact: a param's activity depends only on the values of the params its `when` names (each a value the
    param can take, as parse_space checks), so the conditions of `starts` and, recursively, of the params
    they name hold together exactly when every key keeps a value that all of them allow."""
    by_key = {p.key: p for p in params}
    need: dict[str, list] = {}
    todo, seen = list(starts), set()
    while todo:
        p = todo.pop()
        if p.key in seen:
            continue
        seen.add(p.key)
        for key, allowed in p.when.items():
            need[key] = [v for v in need.get(key, allowed) if v in allowed]
            if not need[key]:
                return None
            todo.append(by_key[key])
    return need


def _can_meet(params: list[Param], a: Param, b: Param) -> bool:
    """Whether some point has both `a` and `b` active (see _requirements)."""
    return _requirements(params, [a, b]) is not None


def _covers_every_point(params: list[Param], sources: list[Param]) -> bool:
    """Whether every point has one of `sources` active. An unconditional source answers at once; otherwise the
    points are enumerated over the params the sources' conditions read (recursively), a continuous one as the
    values conditions name plus any other value. Past MAX_COVER_POINTS partial points it answers False: an
    override is never refused unless it is known to have no effect."""
    if not sources or any(not p.when for p in sources):
        return bool(sources)
    by_key = {p.key: p for p in params}
    closure, todo = set(), [p.key for p in sources]
    while todo:
        key = todo.pop()
        if key not in closure:
            closure.add(key)
            todo += list(by_key[key].when)
    named: dict[str, list] = {}
    for p in params:
        for key, allowed in p.when.items():
            values = named.setdefault(key, [])
            for value in allowed:
                if value not in values:
                    values.append(value)
    points: list[dict[str, Any]] = [{}]
    for p in (q for q in params if q.key in closure):
        values = list(p.values) if p.categorical else named.get(p.key, [])
        if not p.categorical and (p.kind != "randint" or p.values[1] - p.values[0] > len(values)):
            values = [*values, _OTHER]
        points = [
            new
            for point in points
            for new in ([{**point, p.key: v} for v in values] if p.active(point) else [point])
        ]
        if len(points) > MAX_COVER_POINTS:
            return False
    return all(any(s.active(point) for s in sources) for point in points)


def _fail(where: str, msg: str) -> None:
    raise ModsarError(f"{where}: {msg}")


def _check_keys(where: str, given: dict, allowed: set[str], what: str) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        _fail(where, f"unknown {what} key '{unknown[0]}' (allowed: {', '.join(sorted(allowed))})")


def _refuse_repeated_values(at: str, key: str, kind: str, values: list) -> None:
    """A value listed twice would run its trials twice (grid) or weigh them double (random): refused,
    comparing the values as the config stores them, so 1 and 1.0, or 0.001 and "1e-3", are one value of a
    float key."""
    seen: dict[Any, Any] = {}
    for value in values:
        cfg = Config()
        set_value(cfg, key, value, at)
        typed = functools.reduce(getattr, key.split("."), cfg)
        marker = typed if isinstance(typed, Hashable) else repr(typed)
        if marker in seen:
            first = seen[marker]
            same = (
                "" if repr(first) == repr(value) else f" (as {first!r} and {value!r}: one value of this key)"
            )
            effect = "run the same trials again" if kind == "grid" else "be sampled twice as often"
            _fail(
                at,
                f"{kind} value {first!r} is listed twice{same}; list each value once (a repeated value "
                f"would {effect})",
            )
        seen[marker] = value


def _parse_param(where: str, key: str, spec: Any) -> Param:
    """One entry of `params`, checked: its one distribution, its `also` keys and its `when` condition (whose
    names parse_space checks against the other params)."""
    at = f"{where}: params.{key}"
    if not isinstance(spec, dict):
        _fail(at, f"must be a mapping like {{grid: [..]}}, got {spec!r}")
    kind, values, samples = _parse_distribution(at, spec)
    also = _parse_also(at, key, spec)
    for target in [key, *also]:
        for value in samples:
            set_value(Config(), target, value, at)  # the key exists and the value has the right type
    if kind in ("grid", "choice"):
        _refuse_repeated_values(at, key, kind, values)
    when = spec.get("when", {})
    if not isinstance(when, dict):
        _fail(at, f"'when' must map a param to a value or list of values, got {when!r}")
    return Param(
        key, kind, list(values), {k: v if isinstance(v, list) else [v] for k, v in when.items()}, list(also)
    )


def _parse_distribution(at: str, spec: dict) -> tuple[str, list, list]:
    """(kind, values, samples) of a param's one distribution; `samples` are the values whose type the
    config must accept (a range's bounds as floats, a randint's low bound)."""
    kinds = [k for k in spec if k in DISTRIBUTIONS]
    extra = sorted(set(spec) - set(DISTRIBUTIONS) - {"when", "also"})
    if extra:
        _fail(at, f"unknown field '{extra[0]}' (allowed: {', '.join(DISTRIBUTIONS)}, when, also)")
    if len(kinds) != 1:
        _fail(at, f"needs exactly one distribution of {', '.join(DISTRIBUTIONS)}; got {kinds or 'none'}")
    kind, values = kinds[0], spec[kinds[0]]
    if not isinstance(values, list) or not values:
        _fail(at, f"'{kind}' needs a non-empty list, got {values!r}")
    if kind not in ("uniform", "loguniform", "randint"):
        return kind, values, values
    if len(values) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        _fail(at, f"'{kind}' needs [low, high] numbers, got {values!r}")
    if not values[0] < values[1]:
        _fail(at, f"'{kind}' needs low < high, got {values!r}")
    if kind == "loguniform" and values[0] <= 0:
        _fail(at, f"'loguniform' needs low > 0, got {values!r}")
    if kind == "randint" and not all(isinstance(v, int) for v in values):
        _fail(at, f"'randint' needs integer bounds, got {values!r}")
    return kind, values, [values[0]] if kind == "randint" else [float(values[0]), float(values[1])]


def _parse_also(at: str, key: str, spec: dict) -> list:
    """A param's `also` keys: a list naming each key once, never the param's own key nor `task`."""
    also = spec.get("also", [])
    if not isinstance(also, list):
        _fail(at, f"'also' must be a list of keys, got {also!r}")
    if "task" in also:
        _fail(
            at,
            "'also' cannot set 'task': the AE/AR switch is searched only as the 'task' param (each direction "
            "on its own); list the tasks in its grid",
        )
    if key in also:
        _fail(at, f"'also' names the param's own key '{key}'; remove it from 'also'")
    twice = next((t for i, t in enumerate(also) if t in also[:i]), None)
    if twice is not None:
        _fail(at, f"'also' names '{twice}' twice; name each key once")
    return also


def _takes(p: Param, value: Any) -> bool:
    """Whether param `p` can take `value` (as its `when` conditions compare: 1 and 1.0 are one value)."""
    if p.categorical:
        return value in p.values
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    low, high = p.values
    if p.kind == "randint":
        return float(value).is_integer() and low <= value < high
    return low <= value <= high


def _check_conditions(where: str, params: list[Param], keys: list[str]) -> None:
    """Each `when` names an earlier param and only values it can take: a condition that can never hold would
    leave its param out of every point (and _requirements relies on it)."""
    if any(p.key == "task" and p.when for p in params):
        _fail(
            f"{where}: params.task",
            "the AE/AR switch cannot have a 'when' condition (each direction is "
            "searched on its own); list the tasks in its grid",
        )
    for p in params:
        for cond_key, allowed in p.when.items():
            if cond_key not in keys or keys.index(cond_key) >= keys.index(p.key):
                _fail(
                    f"{where}: params.{p.key}",
                    f"'when' refers to '{cond_key}', which must be a param listed before it",
                )
            cond = next(q for q in params if q.key == cond_key)
            if cond.kind in ("uniform", "loguniform"):  # a sampled float equals a named one practically never
                _fail(
                    f"{where}: params.{p.key}",
                    f"'when' names a value of '{cond_key}', a continuous param "
                    f"({cond.kind} {cond.values}) whose samples practically never equal it, so the param "
                    f"would almost never be searched; make '{cond_key}' a choice, grid or randint param, or "
                    "drop the 'when'",
                )
            bad = [v for v in allowed if not _takes(cond, v)]
            if bad and cond.categorical:
                _fail(f"{where}: params.{p.key}", f"'when' value {bad[0]!r} is not a value of '{cond_key}'")
            if bad:
                _fail(
                    f"{where}: params.{p.key}",
                    f"'when' value {bad[0]!r} is never a value of '{cond_key}' "
                    f"({cond.kind} {cond.values}); name a value in its range",
                )


def parse_space(data: Any, name: str, path: str) -> SearchSpace:
    """A space's YAML document, every key checked and every rule of the module docstring enforced; the
    first problem found is raised, naming where it is."""
    where = f"space '{path}'"
    _check_sections(where, data)
    base = dict(data.get("base") or {})
    apply_overrides(Config(), base, f"{where}: base")
    params_raw = data.get("params") or {}
    if not params_raw:
        _fail(where, "'params' is empty: a search space needs at least one searched key")
    params = [_parse_param(where, key, spec) for key, spec in params_raw.items()]
    _check_fixed_targets(where, params)
    _check_conditions(where, params, [p.key for p in params])
    _check_one_source(where, params)
    scheduler, budget = _parse_schedule(where, data)
    full_grid = _parse_full_grid(where, data.get("full_grid"))
    arms = _parse_arms(where, data, params)
    text = _parse_text(where, data)
    space = SearchSpace(
        name, path, text["description"], text["paper"], base, params, scheduler, budget, list(arms), full_grid
    )
    _check_base(where, space)
    return space


def _check_sections(where: str, data: Any) -> None:
    """The document is a mapping of the known top-level keys, its sections mappings themselves."""
    if not isinstance(data, dict):
        _fail(where, "must be a mapping with description, base, params, scheduler, budget")
    _check_keys(where, data, TOP_KEYS, "top-level")
    for section in ("base", "params", "scheduler", "budget"):
        if not isinstance(data.get(section, {}) or {}, dict):
            _fail(where, f"'{section}' must be a mapping")


def _check_fixed_targets(where: str, params: list[Param]) -> None:
    """No param, nor any `also` target, sets what the search keeps fixed (FIXED_KEYS, FIXED_PREFIXES)."""
    for p in params:
        for target in [p.key, *p.also]:
            at, sets = f"{where}: params.{p.key}", "" if target == p.key else f"'also' sets '{target}': "
            if target.startswith(FIXED_PREFIXES):
                _fail(
                    at,
                    f"{sets}a search cannot vary how the data is viewed or split: validation targets "
                    "of different views or splits are not comparable, so no trial could be selected over "
                    "the others; set it in 'base' and run one search per protocol",
                )
            if target in FIXED_KEYS:
                _fail(at, f"{sets}a search cannot vary '{target}': {FIXED_KEYS[target]}")


def _check_one_source(where: str, params: list[Param]) -> None:
    """One key, one source in any one point: an `also` target is neither searched itself nor in another
    param's `also`, where the two can be active together (two sources that never meet are fine)."""
    for p in params:
        for target in p.also:
            searched = next((q for q in params if q.key == target), None)
            if searched is not None and _can_meet(params, p, searched):
                _fail(
                    f"{where}: params.{p.key}",
                    f"'also' sets '{target}', which is searched itself "
                    f"(params.{target}: {searched.kind} {searched.values}); the 'also' value would replace "
                    f"those values in every trial it is set, so they would never run; remove '{target}' "
                    "from 'also' or from params",
                )
            other = next(
                (q for q in params[: params.index(p)] if target in q.also and _can_meet(params, p, q)), None
            )
            if other is not None:
                _fail(
                    f"{where}: params.{p.key}",
                    f"'also' sets '{target}', which the 'also' of "
                    f"params.{other.key} sets too; one key takes one param's value: keep '{target}' in one "
                    "'also'",
                )


def _parse_full_grid(where: str, section: Any) -> dict[str, dict] | None:
    """The `full_grid` section: a scheduler and a budget like the top-level ones, whose search is a grid."""
    if section is None:
        return None
    where = f"{where}: full_grid"
    if not isinstance(section, dict):
        _fail(where, "must be a mapping with scheduler and budget (the protocol --full-grid runs)")
    _check_keys(where, section, {"scheduler", "budget"}, "full_grid")
    for part in ("scheduler", "budget"):
        if not isinstance(section.get(part, {}) or {}, dict):
            _fail(where, f"'{part}' must be a mapping")
    scheduler, budget = _parse_schedule(where, section)
    if budget.get("search", "grid") != "grid":
        _fail(where, f"budget.search must be grid (it is the full grid); got {budget['search']!r}")
    return {"scheduler": scheduler, "budget": {**budget, "search": "grid"}}


def _parse_schedule(where: str, data: dict) -> tuple[dict, dict]:
    """(scheduler, budget): known keys only, a known search and unit, every count a positive integer."""
    scheduler = dict(data.get("scheduler") or {})
    _check_keys(where, scheduler, SCHEDULER_KEYS, "scheduler")
    budget = dict(data.get("budget") or {})
    _check_keys(where, budget, BUDGET_KEYS, "budget")
    if budget.get("search", "grid") not in SEARCHES:
        _fail(where, f"budget.search must be one of {', '.join(SEARCHES)}; got {budget.get('search')!r}")
    if scheduler.get("unit", "passes") not in SCHEDULER_UNITS:
        _fail(
            where,
            f"scheduler.unit must be passes (validation passes) or steps (optimizer steps, the same for a "
            f"small and a large dataset); got {scheduler.get('unit')!r}",
        )
    if scheduler.get("kind", "asha") not in SCHEDULER_KINDS:
        _fail(
            where,
            "scheduler.kind must be asha (each trial judged on arrival at a rung) or halving (the trials at "
            f"a rung judged together, once all are there); got {scheduler.get('kind')!r}",
        )
    numbers = [(k, v) for k, v in scheduler.items() if k not in ("unit", "kind")]
    for key, value in [*numbers, *((k, v) for k, v in budget.items() if k != "search")]:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            _fail(where, f"'{key}' must be a positive integer; got {value!r}")
    return scheduler, budget


def _parse_arms(where: str, data: dict, params: list[Param]) -> list:
    """The `arms`: names of grid or choice params, never task or model.backbone (always selected apart)."""
    arms = data.get("arms") or []
    if not isinstance(arms, list) or not all(isinstance(a, str) for a in arms):
        _fail(where, f"'arms' must be a list of param names, e.g. [model.positional]; got {arms!r}")
    for arm in arms:
        param = next((p for p in params if p.key == arm), None)
        if arm in ("task", "model.backbone") or param is None or not param.categorical:
            _fail(
                f"{where}: arms",
                f"'{arm}' must be a grid or choice param other than task and model.backbone "
                "(a search always selects per task and backbone)",
            )
    return arms


def _parse_text(where: str, data: dict) -> dict[str, str]:
    """`description` and `paper`, one line each in `modsar spaces`: text, never a list or mapping."""
    text = {}
    for key in ("description", "paper"):
        value = data.get(key)
        if isinstance(value, (list, dict)):
            _fail(
                where,
                f"'{key}' must be one line of text, got a {type(value).__name__}; quote it if it "
                "holds brackets or a colon",
            )
        text[key] = "" if value is None else str(value).strip()
    return text


def _check_base(where: str, space: SearchSpace) -> None:
    """One source per key holds for 'base' too: a base value that never runs is refused."""
    for key in space.base:
        if key in BASE_FIXED:
            _fail(f"{where}: base.{key}", f"'{key}' is not a base setting: {BASE_FIXED[key]}")
        if space.sets_everywhere(key):
            sources = " and ".join(
                f"params.{p.key}" if p.key == key else f"the 'also' of params.{p.key}"
                for p in space.sources(key)
            )
            _fail(
                f"{where}: base.{key}",
                f"{sources} sets '{key}' in every trial, so the base value never runs; remove it from base",
            )


def load_space(name_or_path: str) -> SearchSpace:
    """A bundled space by name (`modsar spaces`) or a user's YAML file by path."""
    path = Path(name_or_path)
    bundled = SPACES_DIR / f"{name_or_path}.yaml"
    shadowed = path.is_dir() and bundled.parent == SPACES_DIR and bundled.is_file()  # a folder named so
    if path.suffix not in (".yaml", ".yml") and (not path.exists() or shadowed):
        path = bundled  # a bundled name, even where a folder of that name is in the working directory
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in SPACES_DIR.glob("*.yaml")))
            raise ModsarError(
                f"unknown space '{name_or_path}'; bundled spaces: {known} (or pass a YAML path)"
            )
    if path.is_dir():
        inside = next(iter(sorted(path.glob("*.y*ml"))), None)
        example = f" such as '{inside}'" if inside else ""
        raise ModsarError(
            f"space file '{path}' is a directory; pass a space's YAML file{example}, or a "
            "bundled space's name (`modsar spaces` lists them)"
        )
    if not path.is_file():
        raise ModsarError(f"space file '{path}' does not exist")
    data = load_yaml_file(path, "space")  # YAML 1.2; a key given twice, or aliases nested too far, refused
    return parse_space(data, path.stem, str(path))


def bundled_spaces() -> list[SearchSpace]:
    """Every space ModSAR ships (search_spaces/), loaded and checked."""
    return [load_space(str(p)) for p in sorted(SPACES_DIR.glob("*.yaml"))]


def describe(space: SearchSpace) -> str:
    """What `modsar spaces NAME` prints: the space's purpose, source, size, base, params and schedule."""
    lines = [f"{space.name}: {space.description}"]
    if space.paper:
        lines.append(f"  source: {space.paper}")
    size = space.size()
    if size is not None and space.budget.get("search", "grid") == "grid":
        grid_size_by_task(space)  # the space as written runs a grid search: refused above MAX_GRID_POINTS
    shown = (
        "continuous space"
        if size is None
        else size
        if size <= MAX_GRID_POINTS
        else f"more than the grid search limit of {MAX_GRID_POINTS} (random/optuna only)"
    )
    lines.append(f"  trials (full grid): {shown}")
    lines.append("  base: " + ", ".join(f"{k}={v}" for k, v in space.base.items()))
    for p in space.params:
        cond = f" when {p.when}" if p.when else ""
        also = f" (also {', '.join(p.also)})" if p.also else ""
        lines.append(f"  {p.key}: {p.kind} {p.values}{cond}{also}")
    if space.arms:
        lines.append(f"  arms (each value selected and tested, per task): {', '.join(space.arms)}")
    kind = "successive halving" if space.scheduler.get("kind") == "halving" else "ASHA"
    sched = ", ".join(f"{k}={v}" for k, v in space.scheduler.items() if k != "kind")
    lines.append(f"  {kind}: {sched or 'defaults'}; budget: {space.budget}")
    if space.full_grid:
        full = ", ".join(f"{k}={v}" for k, v in space.full_grid["scheduler"].items())
        lines.append(f"  --full-grid: ASHA: {full or 'defaults'}; budget: {space.full_grid['budget']}")
    return "\n".join(lines)


def grid_size_by_task(space: SearchSpace) -> dict[str, int]:
    """Grid points per direction, counted without building them: exactly the points of
    `space.for_task(task).grid_points()`, the grid the search gives that direction's Tuner. A grid above
    MAX_GRID_POINTS in all is refused, with how to search it instead."""
    counts: dict[str, int] = {}
    exact = True
    for task in space.tasks():
        counts[task], task_exact = space.for_task(task).count_points(space.grid_values, MAX_GRID_POINTS)
        exact = exact and task_exact
    total = sum(counts.values())
    if total > MAX_GRID_POINTS:
        size = f"{total:,} points" if exact else f"more than {MAX_GRID_POINTS:,} points"
        raise ModsarError(
            f"space '{space.path}': its grid has {size}, above the {MAX_GRID_POINTS:,} a grid search "
            "builds (modsar.sweep.spaces.MAX_GRID_POINTS); search it with --search random or --search "
            "optuna and --num-samples N, or shrink the grid"
        )
    return counts
