"""A few seconds' timing of one model size, as a search's trial would run it: the seconds of an optimizer step
and of a validation pass, for the cost estimate (modsar.sweep.cost).

A trial seldom runs alone: a search on a 2-core machine runs two 1-thread trials at once, and side by side
each runs 12-18% slower than alone (memory bandwidth and caches are shared; benchmarks/trial_threads.py).
So the probe is timed beside companions: forked copies of the same model training on the same batches, as
many as the other trials that run at once, which the trials that follow keep the cores busy like.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from modsar.config import Config
from modsar.training.trainer import train_batches

# timed training steps per probe, after one warm-up step: batches at evenly spaced quantiles of the epoch's
# batch sizes in positions, so their mean is the epoch's mean step (padding-free batches sorted by length
# range from a few positions to the whole window; the first few of a shuffled epoch missed Beauty's by 40%)
PROBE_STEPS = 6
EVAL_PROBE_S = 0.3  # a validation pass is timed whole up to here, extrapolated from its batches beyond
COMPANION_START_S = 60.0  # how long the probe waits for its companions' first steps before it times alone


def probe(
    cfg: Config, dataset, split, max_len: int, device: torch.device, beside: int = 0
) -> tuple[float, float]:
    """(seconds per optimizer step, seconds per validation pass) of `cfg`, built as run_trial builds it: one
    warm-up step, then the mean of PROBE_STEPS real steps on batches at evenly spaced quantiles of the
    epoch's batch positions (the epoch's mean step); then validation_seconds. With `beside`, all of it is
    timed while that many companions (see `companions`) train the same model on the CPU."""
    from modsar.training.trainer import build_model, make_optimizer

    model = build_model(cfg, dataset.num_items, dataset.num_users, max_len).to(device)
    optimizer = make_optimizer(model, cfg)
    batches = train_batches(split, cfg, max_len)
    plan = batches.epoch_plan()
    per_batch = batches.num_targets / max(len(plan), 1)
    model.train()
    by_size = sorted(plan, key=lambda rows: int(batches.row_lengths[rows].sum()))
    picks = [by_size[int((k + 0.5) * len(by_size) / PROBE_STEPS)] for k in range(PROBE_STEPS)]
    made = [batches.make(rows) for rows in [by_size[-1], *picks]]

    def work() -> None:  # a companion's loop: the probe's own batches, in turn
        for batch in made:
            _step(model, optimizer, batch.to(device), cfg, per_batch)

    with companions(beside if device.type == "cpu" else 0, work):
        times: list[float] = []
        for batch in made:  # the warm-up on the largest batch: the allocator grows once
            tick = time.perf_counter()
            _step(model, optimizer, batch.to(device), cfg, per_batch)
            times.append(time.perf_counter() - tick)
        model.eval()
        return statistics.fmean(times[1:]), validation_seconds(model, split, cfg, max_len, device)


@contextmanager
def companions(count: int, work: Callable[[], None]) -> Iterator[int]:
    """Run `work` in a loop in `count` forked 1-thread processes while the block runs; yields how many are
    running. The block starts once each has finished its first round (so none is still warming up), and
    they are killed when it ends. None where fork is unsafe or missing: a CUDA or Ray process (their
    threads do not survive a fork), or a platform without fork."""
    ray = sys.modules.get("ray")
    if (
        count <= 0
        or not hasattr(os, "fork")
        or torch.cuda.is_initialized()
        or (ray is not None and ray.is_initialized())
    ):
        yield 0
        return
    context = multiprocessing.get_context("fork")
    ready = context.Semaphore(0)
    processes = [context.Process(target=_companion, args=(work, ready), daemon=True) for _ in range(count)]
    try:
        for process in processes:
            process.start()
        waiting, deadline = count, time.monotonic() + COMPANION_START_S
        while waiting and time.monotonic() < deadline and all(p.is_alive() for p in processes):
            waiting -= ready.acquire(timeout=0.1)
        yield sum(p.is_alive() for p in processes)
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.join()


def _companion(work: Callable[[], None], ready) -> None:
    """A companion's whole life: one thread, as a trial's worker has; a first round, then say so; then on
    until killed."""
    torch.set_num_threads(1)
    work()
    ready.release()
    while True:
        work()


def _step(model, optimizer: torch.optim.Optimizer, batch, cfg: Config, per_batch: float) -> None:
    """One optimizer step as modsar.training.trainer.train_epoch takes it (its loss read back, as there)."""
    from modsar.training.trainer import batch_loss, optimizer_step

    loss = batch_loss(model, batch, cfg, per_batch)
    optimizer_step(model, optimizer, loss, cfg)
    loss.item()


class _Enough(Exception):
    """Raised by the probe's scorer once it has timed enough of a validation pass."""


def validation_seconds(model, split, cfg: Config, max_len: int, device: torch.device) -> float:
    """A validation pass as run_trial runs it, timed whole where it takes under EVAL_PROBE_S; a longer one is
    stopped there and extrapolated: the set-up before its first batch, plus the mean batch so far per batch
    (the shortest histories come first, so a long pass is somewhat underestimated)."""
    from modsar.evaluation.ranking import Evaluator, model_scorer, users_per_batch
    from modsar.training.heap import roomy_heap

    evaluator = Evaluator.of(split, cfg, max_len, device)
    per_batch = users_per_batch(evaluator.batch_size, split.num_items)
    batches = -(-len(split.targets("valid")[0]) // per_batch)
    scorer, calls = model_scorer(model), []

    def timed(*args: torch.Tensor) -> torch.Tensor:
        calls.append(time.perf_counter())
        if len(calls) > 1 and calls[-1] - start > EVAL_PROBE_S:
            raise _Enough
        return scorer(*args)

    start = time.perf_counter()
    try:
        with roomy_heap():
            evaluator(timed, "valid")
    except _Enough:
        return (calls[0] - start) + (calls[-1] - calls[0]) / (len(calls) - 1) * batches
    return time.perf_counter() - start
