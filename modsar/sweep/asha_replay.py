"""What asynchronous ASHA lets a search train, and for how long, found by running Ray's own scheduler on
simulated trials.

A closed formula (every trial to the grace period, 1/rf of them on to each next rung) undercounts what
Ray's ASHA does with a few workers: the first trial to reach a rung has nothing to be compared with and
always goes on, a trial is compared only with those that reached its rung before it, and the last trials of
a search leave cores idle while the longest one finishes. On 2 cores these are a large share of a search.
So the cost model replays the search instead: `parallel` workers take the trials in order, each trial
reports at its validation passes as a real one does, and `ASHAScheduler` (the class the search runs)
decides at each report whether it goes on. A trial's reported value is a fixed random quality (its rank
against the others holds over time); patience is not modelled, so a trial that converges early costs less
than this says. The replay draws from its own seeded generator and leaves numpy's global one as it was.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from modsar.randomness import untouched


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
    """Averages over the replays: epochs and validation passes trained in all, and the wall-clock."""

    epochs: float
    passes: float
    seconds: float
    busy: float  # the share of the workers' time spent training (1 - cores left idle at the end)


def replay(
    shapes: list[TrialShape],
    trials: int,
    parallel: int,
    *,
    unit: str,
    grace: int,
    reduction_factor: int,
    max_t: int,
    eval_every: int,
    max_epochs: int,
    runs: int = 0,
    seed: int = 0,
) -> Replay:
    """Replay a direction's ASHA search `runs` times (by default enough to average a few thousand trials)
    with `parallel` workers; trials are drawn from `shapes` by their shares, in a random order."""
    runs = runs or max(4, min(32, 4000 // max(1, trials)))
    rng = np.random.default_rng(seed)
    shares = np.array([s.share for s in shapes], dtype=float)
    shares = shares / shares.sum()
    epochs = passes = seconds = busy = 0.0
    with untouched():  # ASHAScheduler.on_trial_add draws a bracket from numpy's global generator
        for _ in range(runs):
            kinds = rng.choice(len(shapes), size=trials, p=shares)
            quality = rng.random(trials)
            e, p, s, b = _one_run(
                [shapes[k] for k in kinds], quality, parallel, unit, grace, reduction_factor, max_t,
                eval_every, max_epochs,
            )  # fmt: skip
            epochs, passes, seconds, busy = epochs + e, passes + p, seconds + s, busy + b
    return Replay(epochs / runs, passes / runs, seconds / runs, busy / runs)


def _one_run(
    order: list[TrialShape],
    quality: np.ndarray,
    parallel: int,
    unit: str,
    grace: int,
    reduction_factor: int,
    max_t: int,
    eval_every: int,
    max_epochs: int,
) -> tuple[float, float, float, float]:
    """(epochs, passes, wall seconds, busy share) of one replay: an event queue of the workers' next
    reports, in time order; a free worker takes the next trial."""
    scheduler = ASHAScheduler(
        time_attr="t",
        metric="q",
        mode="max",
        max_t=max_t,
        grace_period=grace,
        reduction_factor=reduction_factor,
    )
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
        t = done if unit == "passes" else trained * shape.steps_per_epoch
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
