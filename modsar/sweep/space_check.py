"""Every configuration a search could run, validated before Ray starts (`modsar spaces NAME --check`).

A space can be well-formed YAML whose grid still mixes values that cannot go together (LLaMA with local heads,
a hidden size not divisible by the heads). Run one trial at a time, that shows up as error rows after hours of
compute; here every grid point, and for random/Optuna every categorical combination with each continuous
parameter at its bounds (a small randint range at every value), goes through the same validation as
`modsar train`, and the model is built on PyTorch's meta device (no memory, no compute) to catch what only its
constructor knows. All problems are reported at once, each with the keys and values that cause it.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from modsar import memory
from modsar.config import Config, apply_overrides
from modsar.data.store import window
from modsar.errors import ModsarError
from modsar.sweep.spaces import MAX_GRID_POINTS, Param, SearchSpace
from modsar.training.feasible import validate_for_dataset

PLACEHOLDER_SIZES = {"num_items": 100, "num_users": 100}  # model sizes when no dataset is named
# Probabilities that shape no module (their ranges are checked by config.validate): one model build serves
# every value, so a 1,600-point space builds a few dozen models, not 1,600.
RATES = ("dropout", "attn_dropout", "item_sse_prob", "user_sse_prob")


@dataclass
class SpaceCheck:
    """The outcome of checking every configuration of a search before Ray starts: the trials each direction
    runs, how many configurations were checked, and each distinct problem with its points."""

    space: SearchSpace
    search: str
    trials: dict[str, int]  # trials per direction (task) the search would run
    checked: int  # configurations validated
    problems: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # what is wrong -> its points
    dataset: str | None = None
    sampled: bool = False  # random/optuna over more than MAX_GRID_POINTS combinations: `checked` is a sample
    gridded: list[str] = field(default_factory=list)  # sampled search, directions that run their grid instead

    @property
    def ok(self) -> bool:
        """Whether no configuration has a problem."""
        return not self.problems

    def summary(self) -> str:
        """One line when valid; else a head line and one line per distinct problem, with its points."""
        trials = ", ".join(f"{task.upper()} {n}" for task, n in sorted(self.trials.items()))
        on = f" on dataset {self.dataset}" if self.dataset else ""
        grids = " and ".join(t.upper() for t in self.gridded)
        instead = f"; {grids} {'runs its' if len(self.gridded) == 1 else 'run their'} grid" if grids else ""
        head = f"space '{self.space.name}' ({self.search} search: {trials} trials{instead})"
        which = (
            f" (a seeded sample: the space has more than {MAX_GRID_POINTS:,} combinations)"
            if self.sampled
            else ""
        )
        if self.ok:
            return f"{head}: all {self.checked} configurations{which} are valid{on}"
        invalid = sum(len(points) for points in self.problems.values())
        lines = [
            f"{head}: {invalid} of {self.checked} configurations{which} are invalid{on}; nothing was run:"
        ]
        lines += [f"  {_which(points)}: {problem}" for problem, points in self.problems.items()]
        return "\n".join(lines)

    def raise_if_invalid(self) -> None:
        """Refuse the search with every problem at once (one ModsarError), before anything runs."""
        if not self.ok:
            raise ModsarError(self.summary())


def dataset_sizes(manifest: dict) -> dict[str, int]:
    """num_items, num_users, max_len and has_timestamp (0/1) of a prepared dataset, from its manifest, with
    the counts modsar.memory's estimates read (0 where an older version did not count them)."""
    stats = manifest["statistics"]
    counts = ("interactions", "min_length", "max_length", "evaluable_users")
    return {
        "num_items": stats["items"],
        "num_users": stats["users"],
        "max_len": manifest["max_len"],
        "has_timestamp": int(bool(manifest.get("has_timestamp"))),
        **{key: int(stats.get(key, 0)) for key in counts},
    }


def viewed_sizes(cfg: Config, sizes: dict[str, int], where: str) -> dict[str, int]:
    """`sizes` as cfg's data view sees them (the item view swaps users and items); refuses a view or split
    that needs timestamps on a dataset without them, as `modsar train` would, before any trial starts."""
    needs = [
        k
        for k, v in (
            ("data.view=item", cfg.data.view == "item"),
            ("data.split=temporal", cfg.data.split == "temporal"),
            (f"model.time_bias={cfg.model.time_bias}", cfg.model.timed),
        )
        if v
    ]
    if needs and not sizes.get("has_timestamp", 1):
        raise ModsarError(
            f"{where}: {' and '.join(needs)} need{'s' * (len(needs) == 1)} timestamps, and the "
            "dataset has none (its source gives only the order within each user); use a timestamped "
            "dataset or the defaults data.view=user data.split=loo model.time_bias=none"
        )
    if cfg.data.view == "item":
        return {**sizes, "num_items": sizes["num_users"], "num_users": sizes["num_items"]}
    return sizes


SMALL_RANGE = 32  # a randint range this small is checked value by value, a larger one at its bounds
MAX_POINTS = 1024  # ... unless every small range at every value would make more points than this


def check_points(space: SearchSpace) -> tuple[list[dict[str, Any]], bool]:
    """What random/Optuna can sample, as far as it can be enumerated: every categorical combination, each
    continuous parameter at its bounds and at the values other params' `when` conditions name, and small
    randint ranges at every value (when that stays under MAX_POINTS points); and whether they are a seeded
    sample of CHECK_SAMPLE of them, as they are when there are more than MAX_GRID_POINTS (counted, not
    built)."""
    named: dict[str, set] = {}  # values a `when` condition names: those points must exist to check its param
    for p in space.params:
        for key, allowed in p.when.items():
            named.setdefault(key, set()).update(allowed)

    def values(p, full_ranges: bool) -> list:
        if p.categorical:
            return p.values
        low, high = p.values
        if p.kind == "randint":
            every = full_ranges and high - low <= SMALL_RANGE
            ends = list(range(low, high)) if every else [low, high - 1]
            return sorted(
                {*ends, *(v for v in named.get(p.key, ()) if isinstance(v, int) and low <= v < high)}
            )
        return sorted(
            {
                float(low),
                float(high),
                *(float(v) for v in named.get(p.key, ()) if isinstance(v, (int, float)) and low <= v <= high),
            }
        )

    full = math.prod(len(values(p, True)) for p in space.params)  # an upper bound: conditions only remove

    def chosen(p: Param) -> list:
        return values(p, full <= MAX_POINTS)

    if space.count_points(chosen, MAX_GRID_POINTS)[0] <= MAX_GRID_POINTS:
        return space.points(chosen), False
    return sample_points(space, chosen, CHECK_SAMPLE), True


CHECK_SAMPLE = 2000  # points checked of a random/optuna space too large to enumerate (about 1 ms each)


def sample_points(
    space: SearchSpace, values_of: Callable[[Param], list], n: int, seed: int = 0
) -> list[dict[str, Any]]:
    """Up to `n` distinct points of `space.points(values_of)`, drawn with a fixed seed (the same every run),
    without building the others: a space random/Optuna search samples can be far too large to enumerate."""
    rng, points, seen = random.Random(seed), [], set()
    values = {p.key: values_of(p) for p in space.params}
    for _ in range(4 * n):  # a small space runs out of new points: stop trying after a while
        point: dict[str, Any] = {}
        for p in space.params:
            if p.active(point):
                point[p.key] = rng.choice(values[p.key])
        if (key := repr(point)) not in seen:
            seen.add(key)
            points.append(point)
            if len(points) == n:
                break
    return points


def _label(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def _which(points: list[dict[str, Any]]) -> str:
    """The configurations one problem hits: its point, or how many and the values they all share."""
    if len(points) == 1:
        return _label(points[0])
    shared = {k: v for k, v in points[0].items() if all(k in p and p[k] == v for p in points)}
    return f"{len(points)} configurations" + (
        f" with {_label(shared)}" if shared else f", e.g. {_label(points[0])}"
    )


def check_space(
    space: SearchSpace,
    base: dict[str, Any],
    search: str,
    trials: dict[str, int],
    sizes: dict[str, int] | None = None,
    dataset: str | None = None,
    per_task: dict[str, list] | None = None,
) -> SpaceCheck:
    """Validate every configuration of `space` on top of the full `base` config (nested, as Plan.base).

    `sizes` (num_items, num_users, max_len of the dataset) makes the model checks exact; without it the
    model is built at placeholder sizes. `trials`: each direction's trials (Plan.trials); `per_task`: each
    direction's [search, samples] (a sampled search's direction with a small grid runs that grid)."""
    sampled = False
    if search == "grid":  # counted first (make_plan): a grid too large, or continuous, is refused unbuilt
        points = space.grid_points()  # the points the search's Tuners get (spaces.grid_size_by_task)
    else:
        points, sampled = check_points(space)
    gridded = [t for t, (s, _) in (per_task or {}).items() if s != search]
    problems: dict[str, list[dict[str, Any]]] = {}
    built: dict[str, str | None] = {}  # model config -> why it cannot be built (None: it can)
    base_cfg = Config.from_dict(base)  # read once: a copy per point costs a twentieth of reading it again
    for point in points:
        label = _label(point)
        try:
            cfg = apply_overrides(copy.deepcopy(base_cfg), space.expand(point), label)
            seen = None
            if sizes:  # without a dataset its size is unknown: only `modsar search` (with one) can check this
                seen = viewed_sizes(cfg, sizes, label)
                validate_for_dataset(cfg, seen["num_items"], label, sizes=seen)
        except ModsarError as exc:
            problems.setdefault(str(exc).removeprefix(f"{label}: "), []).append(point)
            continue
        shape = {k: v for k, v in cfg.to_dict()["model"].items() if k not in RATES}  # its section's too
        model_key = json.dumps([cfg.task, cfg.data.max_len, cfg.data.view, shape], sort_keys=True)
        if model_key not in built:
            built[model_key] = _build_problem(cfg, seen)
        if (problem := built[model_key]) is not None:
            problems.setdefault(problem, []).append(point)
    return SpaceCheck(space, search, dict(trials), len(points), problems, dataset, sampled, gridded)


def _build_problem(cfg: Config, sizes: dict[str, int] | None) -> str | None:
    """Why the model of `cfg` cannot be constructed (on the meta device: no memory, no compute), or None."""
    from modsar.model.registry import build as build_model

    sizes = sizes or PLACEHOLDER_SIZES
    try:
        with torch.device("meta"):
            model = build_model(
                cfg, sizes["num_items"], sizes["num_users"], window(cfg.data.max_len, sizes.get("max_len"))
            )
    except Exception as exc:  # whatever the constructor refuses would fail the trial at run time
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"the model cannot be built: {type(exc).__name__}: {first}"
    return memory.problem([memory.parameters_need(cfg, model)], cfg.train.device)  # too large to train here
