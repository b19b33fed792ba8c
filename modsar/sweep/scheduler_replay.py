"""What a search's early stopping lets it train, and for how long, found by running the scheduler's rule on
simulated trials: Ray's own asynchronous ASHA, or synchronous successive halving (modsar.sweep.halving).

A closed formula (every trial to the grace period, 1/rf of them on to each next rung) undercounts what
Ray's ASHA does with a few workers: the first trial to reach a rung has nothing to be compared with and
always goes on, a trial is compared only with those that reached its rung before it, and the last trials of
a search leave cores idle while the longest one finishes. On 2 cores these are a large share of a search.
So the cost model replays the search instead: `parallel` workers take the trials in order, each trial
reports at its validation passes as a real one does, and `ASHAScheduler` (the class the search runs)
decides at each report whether it goes on. A trial's reported value is a fixed random quality (its rank
against the others holds over time); patience is not modelled, so a trial that converges early costs less
than this says. The replay draws from its own seeded generator and leaves numpy's global one as it was.

Successive halving needs no such replay for its epochs (n trials to the first rung, n // rf on, and so on,
in any order), but its wall-clock does: each rung waits for its last trial while other cores idle, and
which sizes go on is random here (a real search's better trials may be its larger, slower ones).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from modsar.randomness import untouched
from modsar.sweep.halving import best_of, promoted_count, rung_times

if TYPE_CHECKING:
    from modsar.sweep.plan import Plan


@dataclass(frozen=True)
class Schedule:
    """The scheduler's settings and the trial budget of a search: where its first decision falls, and what the
    replay runs its scheduler with."""

    grace: int
    reduction_factor: int
    max_t: int
    unit: str  # "passes" (validation passes) or "steps" (optimizer steps): what grace and max_t count
    eval_every: int
    max_epochs: int
    kind: str = "asha"  # or "halving" (modsar.sweep.halving): what the replay runs

    @classmethod
    def of(cls, plan: Plan) -> Schedule:
        """The schedule a plan's search runs: its scheduler's settings and its trials' budget."""
        train = plan.base["train"]
        return cls(
            plan.grace_period,
            plan.reduction_factor,
            plan.max_t,
            plan.unit,
            train["eval_every"],
            train["max_epochs"],
            plan.scheduler,
        )

    def epochs_at(self, t: int, steps_per_epoch: int) -> int:
        """Epochs a trial has trained when its scheduler time first reaches `t`: the scheduler sees it at
        validation passes only (every eval_every epochs, and at max_epochs)."""
        if self.unit == "steps":
            passes = math.ceil(t / (max(1, steps_per_epoch) * self.eval_every))
            return min(passes * self.eval_every, self.max_epochs)
        return min(t * self.eval_every, self.max_epochs)

    def first_decision(self, steps_per_epoch: int) -> tuple[int, int]:
        """(optimizer steps, epochs) before the first rung's decision: at the first validation pass at or past
        the grace period (in steps: 2,000 on Video's 121 steps an epoch, validated every 5, is epoch 20, 2,420
        steps)."""
        epochs = self.epochs_at(self.grace, steps_per_epoch)
        return epochs * steps_per_epoch, epochs


@dataclass(frozen=True)
class TrialShape:
    """One kind of trial: its share of the direction's trials, and what a validation pass of it costs."""

    share: float  # of the direction's trials (grid: counted; sampled: the expected share)
    steps_per_epoch: int
    pass_s: float  # seconds of eval_every epochs and one validation pass
    last_pass_s: float  # seconds of the pass that ends at max_epochs (it may hold fewer epochs)
    start_s: float = 0.0  # seconds before a trial's first step: Tune starting it, the trainer's set-up


@dataclass(frozen=True)
class Replay:
    """Averages over the replays: epochs and validation passes trained in all, and the wall-clock; and each
    replay's wall-clock, whose spread is what the order of good and poor trials alone moves a search by (the
    first trial at a rung always goes on, so a search whose early trials are poor trains more)."""

    epochs: float
    passes: float
    seconds: float
    busy: float  # the share of the workers' time spent training (1 - cores left idle at the end)
    seconds_by_run: tuple[float, ...] = ()


def replay(
    shapes: list[TrialShape],
    trials: int,
    parallel: int,
    schedule: Schedule,
    *,
    runs: int = 0,
    seed: int = 0,
) -> Replay:
    """Replay a direction's search `runs` times (by default enough to average a few thousand trials)
    with `parallel` workers; trials are drawn from `shapes` by their shares, in a random order."""
    runs = runs or max(4, min(32, 4000 // max(1, trials)))
    rng = np.random.default_rng(seed)
    shares = np.array([s.share for s in shapes], dtype=float)
    shares = shares / shares.sum()
    epochs = passes = busy = 0.0
    walls = []
    with untouched():  # ASHAScheduler.on_trial_add draws a bracket from numpy's global generator
        for _ in range(runs):
            kinds = rng.choice(len(shapes), size=trials, p=shares)
            quality = rng.random(trials)
            one = _one_halving_run if schedule.kind == "halving" else _one_run
            e, p, s, b = one([shapes[k] for k in kinds], quality, parallel, schedule)
            epochs, passes, busy = epochs + e, passes + p, busy + b
            walls.append(s)
    return Replay(epochs / runs, passes / runs, sum(walls) / runs, busy / runs, tuple(walls))


def _one_run(
    order: list[TrialShape],
    quality: np.ndarray,
    parallel: int,
    schedule: Schedule,
) -> tuple[float, float, float, float]:
    """(epochs, passes, wall seconds, busy share) of one replay: an event queue of the workers' next
    reports, in time order; a free worker takes the next trial."""
    scheduler = ASHAScheduler(
        time_attr="t",
        metric="q",
        mode="max",
        max_t=schedule.max_t,
        grace_period=schedule.grace,
        reduction_factor=schedule.reduction_factor,
    )
    eval_every, max_epochs = schedule.eval_every, schedule.max_epochs
    last_pass = math.ceil(max_epochs / eval_every)
    events: list[tuple[float, int, int]] = []  # (time of the trial's next report, trial, passes done then)
    next_trial, epochs, passes, worked = 0, 0.0, 0, 0.0

    def start(index: int, now: float) -> None:
        trial = SimpleNamespace(trial_id=str(index))
        scheduler.on_trial_add(None, trial)  # type: ignore[arg-type]
        heapq.heappush(events, (now + order[index].start_s + _pass_s(order[index], 1, last_pass), index, 1))

    for _ in range(min(parallel, len(order))):
        start(next_trial, 0.0)
        next_trial += 1
    now = 0.0
    while events:
        now, index, done = heapq.heappop(events)
        shape = order[index]
        trained = min(done * eval_every, max_epochs)
        t = done if schedule.unit == "passes" else trained * shape.steps_per_epoch
        trial = SimpleNamespace(trial_id=str(index))
        action = scheduler.on_trial_result(None, trial, {"t": t, "q": float(quality[index])})  # type: ignore[arg-type]
        if action == TrialScheduler.CONTINUE and done < last_pass:
            heapq.heappush(events, (now + _pass_s(shape, done + 1, last_pass), index, done + 1))
            continue
        epochs, passes = epochs + trained, passes + done
        worked += shape.start_s + sum(_pass_s(shape, k, last_pass) for k in range(1, done + 1))
        if next_trial < len(order):
            start(next_trial, now)
            next_trial += 1
    workers = min(parallel, len(order))
    return epochs, float(passes), now, worked / (now * workers) if now > 0 else 1.0


def _pass_s(shape: TrialShape, k: int, last_pass: int) -> float:
    return shape.last_pass_s if k == last_pass else shape.pass_s


def _one_halving_run(
    order: list[TrialShape],
    quality: np.ndarray,
    parallel: int,
    schedule: Schedule,
) -> tuple[float, float, float, float]:
    """(epochs, passes, wall seconds, busy share) of one replay of synchronous successive halving: each
    stage (to the next rung) is a batch of jobs the free workers take in order, and the next stage starts
    when the last job of this one ends (the scheduler decides a rung once every trial is there); a job that
    resumes a paused trial pays the trial's start again. Which trials go on is decided by SuccessiveHalving's
    own rule (promoted_count, best_of) on their fixed random quality."""
    eval_every, max_epochs = schedule.eval_every, schedule.max_epochs
    last_pass = math.ceil(max_epochs / eval_every)

    def time_at(shape: TrialShape, p: int) -> int:
        return p if schedule.unit == "passes" else min(p * eval_every, max_epochs) * shape.steps_per_epoch

    def first_pass_at(shape: TrialShape, t: int) -> int:
        """The first pass whose report is at or past time t (last_pass when none is)."""
        return math.ceil(schedule.epochs_at(t, shape.steps_per_epoch) / eval_every)

    rungs = rung_times(schedule.grace, schedule.reduction_factor, schedule.max_t)
    ends = [first_pass_at(shape, schedule.max_t) for shape in order]  # the pass each trial would end at
    done = [0] * len(order)  # passes each trial has trained
    going = list(range(len(order)))
    now, worked = 0.0, 0.0
    workers = min(parallel, len(order))
    for k in range(len(rungs) + 1):
        free = [now] * workers
        reached: dict[str, float] = {}
        for index in going:
            shape = order[index]
            target = ends[index] if k == len(rungs) else min(first_pass_at(shape, rungs[k]), ends[index])
            passes = range(done[index] + 1, target + 1)
            cost = shape.start_s + sum(_pass_s(shape, p, last_pass) for p in passes)
            worker = int(np.argmin(free))
            free[worker] += cost
            worked += cost
            done[index] = target
            if k < len(rungs) and time_at(shape, target) >= rungs[k]:  # at the rung (ended there or not)
                reached[str(index)] = float(quality[index])
        now = max(free) if going else now
        # 1/rf of all that reached the rung go on, chosen from those that can train on (one that ended there
        # leaves its place to the next best), as SuccessiveHalving decides
        can_go_on = {t: q for t, q in reached.items() if done[int(t)] < ends[int(t)]}
        going = [int(t) for t in best_of(can_go_on, promoted_count(len(reached), schedule.reduction_factor))]
        if not going:
            break
    epochs = sum(min(p * eval_every, max_epochs) for p in done)
    return float(epochs), float(sum(done)), now, worked / (now * workers) if now > 0 else 1.0
