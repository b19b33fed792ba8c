"""What a search will cost, known before it starts: trials, optimizer steps per epoch, ASHA's first decision,
the epochs of the whole search, and a wall-clock from a few seconds' timed probe of each model size.

A search of hundreds of trials is sized by numbers nobody multiplies by hand: a grace period in validation
passes of `eval_every` epochs of a dataset's steps, rungs that keep 1/reduction_factor of the trials, trials
in parallel on the CPUs a trial takes. `estimate` times a few training steps and a validation pass (or its
first batches) of one configuration per model size (cost_keys()), on the CPU beside as many companions
training it as other trials run at once (modsar.sweep.probe: trials side by side slow each other), then
replays each direction's early stopping on as many workers as trials run at once
(modsar.sweep.scheduler_replay: Ray's own ASHA scheduler, or the rule of synchronous successive halving),
adding the seconds a search spends besides epochs (TRIAL_START_S, REPORT_S, RAY_START_S, TUNER_START_S); so
`modsar spaces NAME --dataset D` and the first lines of `modsar search` say what a search costs before any of
it runs.

The epochs are an estimate: patience may end a trial before the scheduler does (it is not modelled; where its
earliest stop comes at or after the last epoch, the estimate says it cannot act: patience_may_stop). The probe
draws nothing from the global random generators a trial's training reads (modsar.randomness.untouched) and
writes no file.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from modsar.config import Config
from modsar.data.store import window
from modsar.model import registry
from modsar.sweep.halving import promoted_count, rung_times
from modsar.sweep.plan import STEPS_MAX_T, Plan, trial_config
from modsar.sweep.probe import Companions
from modsar.sweep.probe import probe as time_size
from modsar.sweep.scheduler_replay import Replay, Schedule, TrialShape, replay
from modsar.sweep.spaces import MAX_GRID_POINTS, Param, SearchSpace
from modsar.training.trainer import train_batches

# the config keys that change what a training step costs, for every backbone: points that agree on them (and
# on their backbone's cost_settings, see cost_keys) share one probe
BASE_COST_KEYS = (
    "task",
    "mask_prob",
    "model.backbone",
    "model.hidden_size",
    "model.num_layers",
    "model.num_heads",
    "model.ffn_size",
    "model.head",
    "data.max_len",
    "data.batch_size",
    "data.samples",
    "data.batching",
    "data.padding_free",
    "loss.name",
    "loss.num_negatives",
)


def cost_keys() -> tuple[str, ...]:
    """BASE_COST_KEYS and every registered backbone's cost_settings (DuoRec's contrastive views)."""
    own = [key for entry in registry.entries() for key in entry.cost_settings]
    return BASE_COST_KEYS + tuple(dict.fromkeys(k for k in own if k not in BASE_COST_KEYS))


# of BASE_COST_KEYS, the ones that change an epoch's batches: how many steps, their positions, and the
# labelled targets an AE's mask rate draws (data.view and the split are fixed per search)
SHAPE_KEYS = (
    "task",
    "mask_prob",
    "data.max_len",
    "data.batch_size",
    "data.samples",
    "data.batching",
    "data.padding_free",
)
MAX_PROBES = 6  # model sizes timed per search; the others are interpolated from the nearest probed sizes
# what a search spends besides its trials' epochs and validation passes, measured by modsar.sweep.timing on
# the quickstart (2 CPUs, idle): Tune starting a trial and the trainer's set-up (a reused actor's dataset is
# loaded once), a report with its checkpoint per validation pass, Ray's start-up, each direction's Tuner
TRIAL_START_S = 1.0
# a seed re-run's Tuner starts each trial in a fresh actor (no reuse): the worker imports torch and modsar and
# the trainer loads its dataset; about 3 s on 2 CPUs (2.2-2.7 s set-up in rows, 3.1 s of imports, loaded)
FRESH_TRIAL_START_S = 3.0
REPORT_S = 0.02
RAY_START_S = 4.0
TUNER_START_S = 2.0


@dataclass(frozen=True)
class Resources:
    """What trials run on: this machine's CPUs and GPUs, and what each trial takes (`modsar search` flags)."""

    cpus: int
    gpus: int
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_concurrent: int | None = None

    @classmethod
    def here(
        cls, cpus_per_trial: float = 1.0, gpus_per_trial: float = 0.0, max_concurrent: int | None = None
    ) -> Resources:
        """This machine, as a local `modsar search` gives it to Ray (every CPU, every GPU)."""
        return cls(
            os.cpu_count() or 1, torch.cuda.device_count(), cpus_per_trial, gpus_per_trial, max_concurrent
        )

    @property
    def parallel(self) -> int:
        """Trials at once, as Tune runs them: --max-concurrent, at most what the CPUs (and GPUs) hold; 0 when
        one trial does not fit this machine."""
        slots = math.floor(self.cpus / self.cpus_per_trial + 1e-9)
        if not self.gpus_per_trial:  # trials sharing a core do not run at a whole core's speed each
            slots = min(slots, self.cpus)
        else:
            slots = min(slots, math.floor(self.gpus / self.gpus_per_trial + 1e-9))
        return min(slots, self.max_concurrent) if self.max_concurrent else slots

    @property
    def held(self) -> str:
        """ "2 CPUs", "1 GPU and 16 CPUs"."""
        cpus = _count(self.cpus, "CPU")
        return f"{_count(self.gpus, 'GPU')} and {cpus}" if self.gpus_per_trial else cpus

    def text(self, detail: str = "") -> str:
        """ "2 CPUs (1 CPU per trial, 2 at a time; `detail`)"."""
        each = f"{self.cpus_per_trial:g} CPU" + (
            f" and {self.gpus_per_trial:g} GPU" if self.gpus_per_trial else ""
        )
        return f"{self.held} ({each} per trial, {self.parallel} at a time{'; ' + detail if detail else ''})"


@dataclass
class Group:
    """The points of one direction that cost the same per step (equal cost_keys()), with a point standing for
    them and, once probed or interpolated, the seconds of a step and of a validation pass."""

    key: dict[str, Any]
    point: dict[str, Any]
    cfg: Config
    max_len: int
    trials: float  # grid: counted; random/optuna: the expected share of --num-samples
    steps_per_epoch: int = 0
    # model FLOPs of one training step (modsar.training.flops): orders the sizes for probing
    flops: float = 0.0
    step_s: float = math.nan
    eval_s: float = math.nan
    probed: bool = False
    error: str = ""  # why its probe failed

    @property
    def epoch_s(self) -> float:
        """Seconds of one training epoch of this size (nan until timed)."""
        return self.step_s * self.steps_per_epoch

    @property
    def timed(self) -> bool:
        """Whether the probe (or interpolation) has given this size a step time."""
        return math.isfinite(self.step_s)


@dataclass
class Direction:
    """One direction's (AE or AR) Tuner: its trials, their sizes and what its scheduler (successive halving or
    Ray's ASHA) lets them train, replayed on `parallel` workers (modsar.sweep.scheduler_replay)."""

    task: str
    trials: int
    groups: list[Group]
    schedule: Schedule
    parallel: int = 1
    picks: int = 1  # trials the search selects in it: one per backbone and arm value (select_and_test)
    _replayed: Replay | None = field(default=None, repr=False, compare=False)

    def replayed(self) -> Replay:
        """The replay of this direction's search (cached; `forget()` after new timings)."""
        if self._replayed is None:
            s, timed = self.schedule, all(g.timed for g in self.groups)
            shapes = [
                TrialShape(
                    g.trials,
                    g.steps_per_epoch,
                    *(_pass_seconds(g, s) if timed else (g.flops * g.steps_per_epoch or 1.0,) * 2),
                    TRIAL_START_S if timed else 0.0,
                )
                for g in self.groups
                if g.trials > 0
            ]
            self._replayed = replay(shapes, self.trials, max(1, self.parallel), s)
        return self._replayed

    def forget(self) -> None:
        """Drop the cached replay: the probes have changed the timings it was replayed with."""
        self._replayed = None

    def epochs(self) -> float:
        """Epochs the direction's trials train in all, as the replay counts them."""
        return self.replayed().epochs

    def passes(self) -> float:
        """Validation passes the direction's trials run in all, as the replay counts them."""
        return self.replayed().passes

    def seconds(self) -> float:
        """Wall-clock of this direction's search (nan when no size could be timed, inf when no trial fits)."""
        if not self.parallel:
            return math.inf
        if not all(g.timed for g in self.groups):
            return math.nan
        return TUNER_START_S + self.replayed().seconds

    def seconds_by_run(self) -> list[float]:
        """The wall-clock of each replay of this direction (empty where seconds() is not finite)."""
        if not math.isfinite(self.seconds()):
            return []
        return [TUNER_START_S + wall for wall in self.replayed().seconds_by_run]

    def longest_run_s(self) -> float:
        """Seconds of the longest run a trial of this direction may train: its slowest size to the end of its
        budget (the last rung, or max_epochs), validated as it goes, then tested (nan until timed)."""
        s = self.schedule
        runs = []
        for g in (g for g in self.groups if g.trials > 0):
            epochs = s.epochs_at(s.max_t, g.steps_per_epoch)
            passes = math.ceil(epochs / s.eval_every) + 1  # and the test pass, as long as a validation pass
            runs.append(TRIAL_START_S + epochs * g.epoch_s + passes * (g.eval_s + REPORT_S))
        return max(runs, default=math.nan)

    def shapes(self) -> list[int]:
        """The distinct steps per epoch of the direction's sizes (a varied batch size or window gives
        several)."""
        return sorted({g.steps_per_epoch for g in self.groups})

    def decisions(self) -> list[tuple[int, int]]:
        """(steps, epochs) of ASHA's first decision, one for each steps-per-epoch the direction has."""
        return sorted({self.schedule.first_decision(g.steps_per_epoch) for g in self.groups})


def _pass_seconds(g: Group, s: Schedule) -> tuple[float, float]:
    """(seconds of a validation pass's epochs and the pass, the same for the last pass up to max_epochs)."""
    last = s.max_epochs - (math.ceil(s.max_epochs / s.eval_every) - 1) * s.eval_every
    return s.eval_every * g.epoch_s + g.eval_s + REPORT_S, last * g.epoch_s + g.eval_s + REPORT_S


@dataclass
class CostEstimate:
    """What a search will cost on the resources it runs on: each direction's trials, sizes and replayed ASHA,
    with notes (a cluster, a busy machine, a failed probe); printed by `lines`, recorded by `to_dict`."""

    plan: Plan
    resources: Resources
    device: str  # where the probes ran
    directions: list[Direction]
    notes: list[str] = field(default_factory=list)
    busy_cores: float | None = None  # cores other processes kept busy while the probe ran (None: no probe)

    @property
    def varied(self) -> list[str]:
        """The cost keys whose values differ between the sizes of a direction (how a size is named)."""
        return [
            k
            for k in cost_keys()
            if k != "task" and any(len({repr(g.key[k]) for g in d.groups}) > 1 for d in self.directions)
        ]

    def seconds(self) -> float:
        """The whole search: one direction's Tuner after the other; --time-budget cuts each at its half."""
        budget = self.plan.request.time_budget_s
        each = [d.seconds() for d in self.directions]
        if budget:
            each = [min(s, budget / len(self.directions)) for s in each]
        return RAY_START_S + sum(each)

    def seconds_range(self) -> tuple[float, float]:
        """The whole search's wall-clock in the 10th and 90th percentile of the replays (each direction's
        replays taken in order: independent draws), cut by --time-budget as seconds() is; nan where it has no
        finite wall-clock."""
        runs = [d.seconds_by_run() for d in self.directions]
        if not runs or not all(runs):
            return math.nan, math.nan
        budget = self.plan.request.time_budget_s
        cap = budget / len(runs) if budget else math.inf
        totals = [RAY_START_S + sum(min(r[i], cap) for r in runs) for i in range(min(map(len, runs)))]
        low, high = np.percentile(totals, [10, 90])
        return float(low), float(high)

    def size_name(self, g: Group) -> str:
        """A size as the estimate names it: the cost keys its direction varies, with this size's values."""
        return ", ".join(f"{k}={g.key[k]}" for k in self.varied) or "the only size"

    def replicates(self) -> int:
        """Runs `--seeds K` adds per pick: its seeds 0..K-1 but the search's own, whose trial stands for it
        where the budget or patience ended it (a pick an earlier rung stopped is trained on all K: not
        counted, so the ceiling assumes the usual case)."""
        k, seed = self.plan.request.seeds, int(self.plan.base.get("seed", 0))
        return k - (1 if 0 <= seed < k else 0)

    def seeds_seconds(self) -> float:
        """At most what `--seeds K` adds after the search (0 without): every pick's replicates() at its
        direction's slowest size to the end of the budget, `parallel` at a time in any order (a list
        schedule ends by sum/p + (1 - 1/p) x the longest run), on a machine as idle as the probe's. A
        ceiling: patience ends most re-runs well before their budget."""
        runs = self._seed_runs()
        if not runs:
            return 0.0
        slots = self.resources.parallel
        if not slots:
            return math.inf
        return TUNER_START_S + sum(runs) / slots + (1 - 1 / slots) * max(runs)

    def _seed_runs(self) -> list[float]:
        """The longest each of `--seeds K`'s re-runs may take: every pick's replicates() (seeds_seconds),
        each in an actor of its own."""
        longest = [d.longest_run_s() - TRIAL_START_S + FRESH_TRIAL_START_S for d in self.directions]
        return [
            s
            for d, s in zip(self.directions, longest, strict=True)
            for _ in range(d.picks * self.replicates())
        ]

    def lines(self) -> list[str]:
        """The estimate as `modsar spaces NAME --dataset D` and the first lines of `modsar search` print
        it."""
        p, s = self.plan, Schedule.of(self.plan)
        max_t = "none" if p.max_t >= STEPS_MAX_T else f"{p.max_t:,}"
        halving = s.kind == "halving"
        stopping = (
            f"successive halving in {p.unit}: rungs at "
            f"{' and '.join(f'{r:,}' for r in rung_times(p.grace_period, p.reduction_factor, p.max_t))}"
            if halving
            else f"ASHA in {p.unit}: grace {p.grace_period:,}"
        )
        lines = [
            f"cost of '{p.space.name}' on {p.request.dataset} ({p.search} search; {stopping}, "
            f"reduction factor {p.reduction_factor}, max_t {max_t}; validation every "
            f"{_count(s.eval_every, 'epoch') if s.eval_every > 1 else 'epoch'}, at most "
            f"{_count(s.max_epochs, 'epoch')} a trial):"
        ]
        parallel = self.resources.parallel
        for d in self.directions:
            lines.append(self._line(d, parallel))
        if len(self.directions) > 1:
            wall = f", {self._wall(self.seconds())}{self._spread()} (one direction after the other)"
            epochs = _int(sum(d.epochs() for d in self.directions))
            lines.append(f"  in all: ~{epochs} epochs{wall if parallel else ''}")
        if p.request.seeds:
            lines.append(self._seeds_line())
        lines.append(
            "  (an estimate: successive halving fixes how many trials train to each rung, whatever their "
            f"order; which sizes go on moves a search within the range shown, and {self._patience()})"
            if halving
            else "  (an estimate: the mean of replays of Ray's ASHA on the trials that run at once; the "
            f"order in which good and poor trials come moves a search within the range shown, and "
            f"{self._patience()})"
        )
        budget = p.request.time_budget_s
        if budget and parallel and sum(d.seconds() for d in self.directions) > budget:
            lines.append(
                f"  note: --time-budget stops the search after {duration(budget)}, before all of this"
            )
        lines += [f"  note: {n}" for n in self.notes]
        return lines

    def _line(self, d: Direction, parallel: int) -> str:
        spe = _span(d.shapes())
        decisions = d.decisions()
        steps, epochs = _span([x for x, _ in decisions]), _span([y for _, y in decisions])
        epochs += " epoch" if epochs == "1" else " epochs"
        who = "ASHA" if d.schedule.kind == "asha" else "halving"
        first = (
            f"first {who} decision after {steps} steps ({epochs})"
            if max(y for _, y in decisions) < d.schedule.max_epochs
            else f"no {who} decision: its first rung ({self._rung(d)} steps) is at or past the last epoch "
            f"({_span([d.schedule.max_epochs * x for x in d.shapes()])} steps)"
        )
        if d.schedule.kind == "halving" and max(y for _, y in decisions) < d.schedule.max_epochs:
            first += f"; {self._kept(d)}"
        head = (
            f"  {d.task.upper()}: {_int(d.trials)} trial{'s' if d.trials != 1 else ''}, {spe} steps/epoch, "
            f"{first}; ~{_int(d.epochs())} epochs"
        )
        if not parallel:
            return f"{head}; no trial fits this machine's {self.resources.held}"
        timed = [g for g in d.groups if g.timed]
        if not timed:
            return head + "; wall-clock not estimated (no size could be timed)"
        per_epoch = _span([g.epoch_s for g in timed if g.probed], seconds=True)
        per_eval = _span([g.eval_s for g in timed if g.probed], seconds=True)
        estimated = [g for g in d.groups if not g.probed]
        guessed = (
            f"; {len(estimated)} of {len(d.groups)} sizes estimated from the nearest probed size"
            if estimated
            else ""
        )
        side_by_side = " side by side" if parallel > 1 and self.device == "cpu" else ""
        measured = f"{per_epoch} s/epoch and {per_eval} s/validation measured{side_by_side}{guessed}"
        spread = self._spread() if len(self.directions) == 1 else ""
        return f"{head}, {self._wall(d.seconds())}{spread} on {self.resources.text(measured)}"

    @staticmethod
    def _kept(d: Direction) -> str:
        """How many trials successive halving trains past each rung: "its rungs keep 6, then 2"."""
        counts, n = [], d.trials
        for _ in rung_times(d.schedule.grace, d.schedule.reduction_factor, d.schedule.max_t):
            n = promoted_count(n, d.schedule.reduction_factor)
            counts.append(n)
        return "its rungs keep " + ", then ".join(f"{c:,}" for c in counts)

    @staticmethod
    def _rung(d: Direction) -> str:
        """The first rung in optimizer steps: the grace itself when the space counts steps."""
        if d.schedule.unit == "steps":
            return f"{d.schedule.grace:,}"
        return _span([d.schedule.grace * d.schedule.eval_every * x for x in d.shapes()])

    def _spread(self) -> str:
        """The whole search's range over the replays, for people ("" where it has no finite wall-clock)."""
        low, high = self.seconds_range()
        if not math.isfinite(low):
            return ""
        return f" ({duration(low)} to {duration(high)} in 8 of 10 replays)"

    @staticmethod
    def _wall(seconds: float) -> str:
        return f"~{duration(seconds)}" if math.isfinite(seconds) else "wall-clock unknown"

    def _seeds_line(self) -> str:
        """The line of `--seeds K`: the picks' re-runs after the search, at most how long."""
        runs, k = len(self._seed_runs()), self.plan.request.seeds
        if not runs:
            return f"  then --seeds {k}: no re-run (each pick's own row stands for its seed)"
        wall = f", at most {self._wall(self.seeds_seconds())}" if self.resources.parallel else ""
        return (
            f"  then --seeds {k}: {_count(runs, 'seed re-run')} of the picks{wall} (each at its direction's "
            "slowest size to the end of its budget; "
            + (
                "patience usually ends them well before)"
                if patience_may_stop(self.plan)
                else "patience cannot end them sooner)"
            )
        )

    def _patience(self) -> str:
        """What patience does to the estimate's epochs: it is not modelled, but where no trial can reach it
        before its last epoch, the estimate's epochs are exact as far as patience goes, and says so."""
        if patience_may_stop(self.plan):
            return "patience may end a trial sooner"
        train = self.plan.base["train"]
        if not train["patience"]:
            return "patience is off (train.patience 0)"
        passes = f"{train['patience']} validation pass{'es' if train['patience'] != 1 else ''}"
        return (
            f"patience cannot end a trial before its last epoch: {passes} without a better one, one every "
            f"{_count(train['eval_every'], 'epoch')}, outlast {_count(train['max_epochs'], 'epoch')}"
        )

    def _direction_dict(self, d: Direction) -> dict[str, Any]:
        """One direction of to_dict: its trials, decisions, epochs, seconds and sizes."""
        return {
            "search": self.plan.search_of(d.task),
            "trials": d.trials,
            "steps_per_epoch": d.shapes(),
            "first_decision": [{"steps": x, "epochs": y} for x, y in d.decisions()],
            "epochs": d.epochs(),
            "validation_passes": d.passes(),
            "seconds": _finite(d.seconds()),
            "sizes": [
                {
                    "key": g.key,
                    "trials": g.trials,
                    "steps_per_epoch": g.steps_per_epoch,
                    "gflop_per_step": g.flops / 1e9,
                    "probed": g.probed,
                    "seconds_per_step": _finite(g.step_s),
                    "seconds_per_epoch": _finite(g.epoch_s),
                    "seconds_per_validation": _finite(g.eval_s),
                    **({"error": g.error} if g.error else {}),
                }
                for g in d.groups
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        """The estimate as JSON (`--json`; kept in search.json, where the search's own clock is compared with
        it)."""
        p, s, r = self.plan, Schedule.of(self.plan), self.resources
        return {
            "space": p.space.name,
            "dataset": p.request.dataset,
            "search": p.search,
            "scheduler": s.kind,
            "unit": p.unit,
            "grace_period": p.grace_period,
            "reduction_factor": p.reduction_factor,
            "max_t": None if p.max_t >= STEPS_MAX_T else p.max_t,
            "eval_every": s.eval_every,
            "max_epochs": s.max_epochs,
            "resources": {
                "cpus": r.cpus,
                "gpus": r.gpus,
                "cpus_per_trial": r.cpus_per_trial,
                "gpus_per_trial": r.gpus_per_trial,
                "max_concurrent": r.max_concurrent,
                "parallel": r.parallel,
                "probe_device": self.device,
            },
            "directions": {d.task: self._direction_dict(d) for d in self.directions},
            "epochs": sum(d.epochs() for d in self.directions),
            "seconds": _finite(self.seconds()),
            "seconds_range": [_finite(x) for x in self.seconds_range()],
            "seeds": p.request.seeds,
            "seeds_seconds": _finite(self.seeds_seconds()),
            "busy_cores": None if self.busy_cores is None else round(self.busy_cores, 2),
            "notes": self.notes,
        }


def patience_may_stop(plan: Plan) -> bool:
    """Whether patience can end some trial of the plan before its last epoch: the first validation pass always
    improves, so the earliest stop is after `patience` more passes, at epoch eval_every * (patience + 1). A
    space that searches patience, eval_every or max_epochs may, whatever its base says."""
    searched = {p.key for p in plan.space.params} | {k for p in plan.space.params for k in p.also}
    if searched & {"train.patience", "train.eval_every", "train.max_epochs"}:
        return True
    train = plan.base["train"]
    return bool(train["patience"]) and train["eval_every"] * (train["patience"] + 1) < train["max_epochs"]


def _finite(value: float) -> float | None:
    """A number for JSON: None where it is nan or infinite."""
    return value if math.isfinite(value) else None


def estimate(
    plan: Plan, resources: Resources | None = None, probe: bool = True, max_probes: int = MAX_PROBES
) -> CostEstimate:
    """The cost of `plan`'s search (a plan with a dataset, from make_plan). With `probe`, times up to
    `max_probes` model sizes on this machine, with the threads (and GPU) a trial gets; the global random
    generators are left as they were."""
    from modsar.data.split import make_split
    from modsar.data.store import load_dataset
    from modsar.data.views import viewed
    from modsar.errors import ModsarError
    from modsar.randomness import untouched

    if not plan.request.dataset:
        raise ModsarError("a cost estimate needs a dataset: its steps per epoch and a probe's timings")
    req = plan.request
    resources = resources or Resources.here(req.cpus_per_trial, req.gpus_per_trial, req.max_concurrent)
    cuda = req.gpus_per_trial > 0 and torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    notes, busy = [], None
    if req.address or os.environ.get("RAY_ADDRESS"):
        notes.append(
            "the search joins a Ray cluster: the wall-clock counts this machine's CPUs and GPUs, not the "
            "cluster's"
        )
    base = Config.from_dict(plan.base)
    with untouched(device):  # nothing here may shift the training streams (modsar.randomness)
        dataset = viewed(load_dataset(req.dataset, req.data_dir), base.data.view)
        split = make_split(base, dataset)
        schedule = Schedule.of(plan)
        directions = []
        for task in plan.space.tasks():
            groups = size_groups(plan, task, dataset.default_max_len)
            directions.append(
                Direction(task, plan.trials_of(task), groups, schedule, resources.parallel, picks(plan, task))
            )
        measure_steps(directions, split, dataset)
        if probe and resources.parallel:  # (where no trial fits, there is no wall-clock to estimate)
            with OtherLoad() as load:
                notes += _probe_sizes(plan, resources, directions, dataset, split, device, max_probes)
            busy = load.cores
            if note := busy_note(resources.cpus, busy):
                notes.append(note)
    for d in directions:
        d.forget()  # replayed again with the probes' timings
    result = CostEstimate(plan, resources, str(device), directions, notes, busy)
    for d in directions:
        for g in d.groups:
            if g.error:
                notes.append(f"{d.task.upper()} {result.size_name(g)}: the probe failed ({g.error})")
    return result


def _probe_sizes(
    plan: Plan, resources: Resources, directions: list[Direction], dataset, split, device, max_probes: int
) -> list[str]:
    """run_probes with a trial's threads, each size beside the other trials that run with it (a 1-thread
    companion per CPU they hold; none on a GPU); notes where companions did not run."""
    req, base = plan.request, Config.from_dict(plan.base)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, int(req.cpus_per_trial)))  # as a trial's Ray worker sets it
    count = 0 if device.type == "cuda" else (resources.parallel - 1) * max(1, int(req.cpus_per_trial))
    try:
        with Companions(count, req.dataset, req.data_dir, base) as beside:
            run_probes(directions, dataset, split, device, max_probes, beside if count else None)
    finally:
        torch.set_num_threads(threads)
        if device.type == "cuda":  # the driver keeps no probe memory on the GPU its trials will use
            torch.cuda.empty_cache()
    if beside.fewest < count:
        return [
            f"{count - beside.fewest} of the probe's {count} companions did not run (they train beside it "
            "as the search's other trials would): its timings are too low"
        ]
    return []


class OtherLoad:
    """Cores other processes keep busy while a block runs: the machine's CPU time over the block (/proc/stat)
    less this process's and its children's that ended in it (the probe's companions), per second. Measured
    over the whole probe, so a load that comes and goes (a test suite, another search) is not missed the way
    one glance before the probe missed it. Without /proc, the 1-minute load average as the block starts."""

    def __init__(self) -> None:
        self.cores: float | None = None

    def __enter__(self) -> OtherLoad:
        self._start = _cpu_times()
        self._load = _load_average() if self._start[0] is None else None
        return self

    def __exit__(self, *exc: object) -> None:
        (machine0, own0, wall0), (machine1, own1, wall1) = self._start, _cpu_times()
        if machine0 is None or machine1 is None:
            self.cores = self._load
        else:
            self.cores = max(0.0, ((machine1 - machine0) - (own1 - own0)) / max(1e-9, wall1 - wall0))


def _cpu_times() -> tuple[float | None, float, float]:
    """(seconds of CPU the whole machine has spent busy, None without /proc/stat; this process's and its
    ended children's CPU seconds; a monotonic clock)."""
    import resource

    own = sum(
        usage.ru_utime + usage.ru_stime
        for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
        machine: float | None = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        machine = None
    return machine, own, time.monotonic()


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def busy_cores(window_s: float = 0.5) -> float | None:
    """Cores other processes keep busy over the next `window_s` seconds (this one sleeps meanwhile)."""
    with OtherLoad() as load:
        time.sleep(window_s)
    return load.cores


def busy_note(cpus: int, busy: float | None) -> str:
    """A line saying the machine is busy, when other processes kept half a core or more busy while the
    probe ran: it then timed a shared machine. No factor is guessed: niced work slows a probe far less than
    it shows, and the search's own trials would compete with it all the same."""
    if busy is None or busy < 0.5:
        return ""
    return (
        f"this machine is busy ({busy:.1f} of its {_count(cpus, 'CPU')} in use by other processes): the "
        "probe timed it shared, and the search would share it too, so its wall-clock may be far from an idle "
        "machine's; estimate again when it is idle"
    )


def size_groups(plan: Plan, task: str, default_max_len: int) -> list[Group]:
    """The points of one direction grouped by what a step costs (cost_keys()), each with its trials: grid
    points counted (without building them), random/optuna samples as the share a uniform draw gives."""
    space = plan.space.for_task(task)
    closure, keys = _cost_params(space), cost_keys()
    groups: dict[tuple, Group] = {}
    for point, share in _points([p for p in space.params if p.key in closure]):
        if plan.search_of(task) == "grid":
            trials = float(
                space.count_points(_fixed(space, point), MAX_GRID_POINTS)[0] * plan.samples_of(task)
            )
        else:
            trials = share * plan.samples_of(task)
        full = _full_point(space, point, closure)
        cfg = trial_config(plan.base, space, full)
        flat = cfg.flat()
        key = {k: flat.get(k) for k in keys}  # another backbone's own section's keys: absent here
        found = groups.get(tuple(map(repr, key.values())))
        if found is None:
            groups[tuple(map(repr, key.values()))] = Group(
                key, full, cfg, window(cfg.data.max_len, default_max_len), trials
            )
        else:
            found.trials += trials
    return list(groups.values())


def picks(plan: Plan, task: str) -> int:
    """The trials a search selects in one direction (and `--seeds` re-runs): one per backbone and arm value
    its points can take, as select_and_test groups them."""
    space = plan.space.for_task(task)
    named = ["model.backbone", *space.arms]
    closure = _closure(space, [p.key for p in space.params if p.key in named])
    values = {
        tuple(repr(point.get(k)) for k in named)
        for point, _ in _points([p for p in space.params if p.key in closure])
    }
    return max(1, len(values))


def _cost_params(space: SearchSpace) -> set[str]:
    """The params that set a cost key, and those their conditions read (recursively): the values of these
    alone decide a point's cost, and whether each of them is active."""
    keys = cost_keys()
    return _closure(space, [p.key for p in space.params if p.key in keys or set(p.also) & set(keys)])


def _closure(space: SearchSpace, todo: list[str]) -> set[str]:
    """The params `todo` names and those their conditions read, recursively."""
    by_key = {p.key: p for p in space.params}
    closure: set[str] = set()
    while todo:
        key = todo.pop()
        if key not in closure:
            closure.add(key)
            todo += list(by_key[key].when)
    return closure


def _values(p: Param) -> list:
    """A param's values for the estimate: every categorical value; a range's bounds (a small randint's every
    value) standing for it."""
    if p.categorical:
        return list(p.values)
    low, high = p.values
    if p.kind == "randint":
        return list(range(low, high)) if high - low <= 3 else [low, high - 1]
    return [low, high]


def _points(params: list[Param]) -> list[tuple[dict[str, Any], float]]:
    """The conditional product of `params` (SearchSpace.points), each point with the probability a uniform
    draw of every active param gives it."""
    points: list[tuple[dict[str, Any], float]] = [({}, 1.0)]
    for p in params:
        values = _values(p)
        points = [
            new
            for point, share in points
            for new in (
                [({**point, p.key: v}, share / len(values)) for v in values]
                if p.active(point)
                else [(point, share)]
            )
        ]
    return points


def _fixed(space: SearchSpace, point: dict[str, Any]) -> Callable[[Param], list]:
    """Grid values with `point`'s params held at its values: count_points then counts the grid points that
    agree with it."""
    return lambda p: [point[p.key]] if p.key in point else space.grid_values(p)


def _full_point(space: SearchSpace, point: dict[str, Any], closure: set[str]) -> dict[str, Any]:
    """`point` completed with the first value (a range's low bound) of every other active param: a point the
    search can run (grid) or whose corner check_space validated (random/optuna)."""
    full: dict[str, Any] = {}
    for p in space.params:
        if p.key in point:
            full[p.key] = point[p.key]
        elif p.key not in closure and p.active(full):
            full[p.key] = p.values[0]
    return full


def measure_steps(directions: list[Direction], split, dataset) -> None:
    """Each size's steps per epoch (once per data shape) and model FLOPs per step (on the meta device)."""
    from modsar.model import registry
    from modsar.training.flops import epoch_flops

    shapes: dict[tuple, tuple[int, int, int]] = {}
    for g in (g for d in directions for g in d.groups):
        shape = (*(repr(g.key[k]) for k in SHAPE_KEYS), g.max_len)
        if shape not in shapes:
            batches = train_batches(split, g.cfg, g.max_len)
            shapes[shape] = (len(batches.epoch_plan()), int(batches.row_lengths.sum()), batches.num_targets)
        g.steps_per_epoch, tokens, labelled = shapes[shape]
        with torch.device("meta"):
            model = registry.build(g.cfg, dataset.num_items, dataset.num_users, g.max_len)
        g.flops = epoch_flops(model, g.cfg, tokens, labelled, dataset.num_items)[1] / max(
            1, g.steps_per_epoch
        )


def run_probes(
    directions: list[Direction],
    dataset,
    split,
    device: torch.device,
    max_probes: int,
    beside: Companions | None = None,
) -> None:
    """Time the sizes `pick_probes` chooses, each beside the `beside` companions (modsar.sweep.probe); fill in
    the others from the nearest probed sizes."""
    for d, chosen in zip(directions, pick_probes(directions, max_probes), strict=True):
        for g in chosen:
            g.probed = True
            try:
                g.step_s, g.eval_s = time_size(g.cfg, dataset, split, g.max_len, device, beside)
            except Exception as error:  # fails as a trial would, with its row; the search goes on
                g.error = (str(error).strip().splitlines() or [type(error).__name__])[0]
                g.probed = False
        interpolate(d.groups)


def pick_probes(directions: list[Direction], max_probes: int) -> list[list[Group]]:
    """Per direction, the sizes to time: all of them while at most `max_probes` are needed in all; else an
    even share of `max_probes` per direction, spread from the smallest to the largest size (by FLOPs per
    step)."""
    quota = [len(d.groups) for d in directions]
    while sum(quota) > max_probes and max(quota) > 1:
        quota[quota.index(max(quota))] -= 1
    chosen = []
    for d, q in zip(directions, quota, strict=True):
        ordered = sorted(d.groups, key=_size)
        if q == 1 and len(ordered) > 1:
            chosen.append([max(ordered, key=lambda g: g.trials)])
        else:
            picks = sorted({round(i * (len(ordered) - 1) / max(1, q - 1)) for i in range(q)})
            chosen.append([ordered[i] for i in picks])
    return chosen


def _size(g: Group) -> tuple:
    return (g.flops, repr(list(g.key.values())))


def interpolate(groups: list[Group]) -> None:
    """Seconds of the sizes not probed, from the probed sizes around them: log-linear in FLOPs per step
    between the nearest smaller and larger one, proportional to FLOPs beyond them."""
    timed = sorted((g for g in groups if g.probed and g.timed), key=_size)
    for g in groups:
        if g.probed or not timed:
            continue
        below = [t for t in timed if t.flops <= g.flops]
        above = [t for t in timed if t.flops >= g.flops]
        if below and above and below[-1].flops != above[0].flops and g.flops > 0:
            low, high = below[-1], above[0]
            w = math.log(g.flops / low.flops) / math.log(high.flops / low.flops)
            g.step_s = low.step_s ** (1 - w) * high.step_s**w
            g.eval_s = low.eval_s ** (1 - w) * high.eval_s**w
        else:
            near = below[-1] if below else above[0]
            ratio = g.flops / near.flops if near.flops > 0 else 1.0
            g.step_s, g.eval_s = near.step_s * ratio, near.eval_s * ratio


def duration(seconds: float) -> str:
    """Seconds for people: "45 s", "12 min", "2.5 h", "2.8 days"."""
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _int(value: float) -> str:
    """A count, rounded up (an estimate of trials or epochs is never less than a whole one)."""
    return f"{math.ceil(value - 1e-9):,}"


def _span(values: Sequence[float], seconds: bool = False) -> str:
    """ "24" or "24-48" (seconds to 2 significant digits below 10, whole above)."""
    shown = [
        (f"{v:.2g}" if v < 10 else f"{v:,.0f}") if seconds else f"{v:,}" for v in (min(values), max(values))
    ]
    return shown[0] if shown[0] == shown[1] else f"{shown[0]}-{shown[1]}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"
