"""A few seconds' timing of one model size, as a search's trial would run it: the seconds of an optimizer step
and of a validation pass, for the cost estimate (modsar.sweep.cost).

A trial seldom runs alone: a search on a 2-core machine runs two 1-thread trials at once, and side by side
each runs 12-18% slower than alone (memory bandwidth and caches are shared; benchmarks/trial_threads.py).
So the probe is timed beside companions: processes training the same size on the same batches, as many as the
other trials that run at once. They are spawned, not forked: a process that has run Ray (or any gRPC client)
keeps threads a fork can deadlock on, and the estimate runs in the user's process.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch

from modsar.config import Config
from modsar.training.trainer import train_batches

# timed training steps per probe, after one warm-up step: batches at evenly spaced quantiles of the epoch's
# batch sizes in positions, so their mean is the epoch's mean step (padding-free batches sorted by length
# range from a few positions to the whole window; the first few of a shuffled epoch missed Beauty's by 40%)
PROBE_STEPS = 6
EVAL_PROBE_S = 0.3  # a validation pass is timed whole up to here, extrapolated from its batches beyond
COMPANION_START_S = 120.0  # how long the probe waits for a companion (its imports, its data, a first round)


def probe(
    cfg: Config, dataset, split, max_len: int, device: torch.device, beside: Companions | None = None
) -> tuple[float, float]:
    """(seconds per optimizer step, seconds per validation pass) of `cfg`, built as run_trial builds it: one
    warm-up step, then the mean of PROBE_STEPS real steps on batches at evenly spaced quantiles of the
    epoch's batch positions (the epoch's mean step); then validation_seconds. With `beside`, all of it is
    timed while those companions train the same size."""
    model, steps = training_steps(cfg, dataset, split, max_len, device)
    with beside.training(cfg, max_len) if beside else _alone():
        times: list[float] = []
        for step in steps:  # the first, the warm-up, on the largest batch: the allocator grows once
            tick = time.perf_counter()
            step()
            times.append(time.perf_counter() - tick)
        model.eval()
        return statistics.fmean(times[1:]), validation_seconds(model, split, cfg, max_len, device)


def training_steps(
    cfg: Config, dataset, split, max_len: int, device: torch.device
) -> tuple[Any, list[Callable[[], None]]]:
    """`cfg`'s model and PROBE_STEPS + 1 optimizer steps of it, ready to take: the warm-up on the epoch's
    largest batch, then batches at evenly spaced quantiles of the epoch's batch sizes."""
    from modsar.training.trainer import build_model, make_optimizer

    model = build_model(cfg, dataset.num_items, dataset.num_users, max_len).to(device)
    optimizer = make_optimizer(model, cfg)
    batches = train_batches(split, cfg, max_len)
    plan = batches.epoch_plan()
    per_batch = batches.num_targets / max(len(plan), 1)
    model.train()
    by_size = sorted(plan, key=lambda rows: int(batches.row_lengths[rows].sum()))
    picks = [by_size[int((k + 0.5) * len(by_size) / PROBE_STEPS)] for k in range(PROBE_STEPS)]
    made = [batches.make(rows).to(device) for rows in [by_size[-1], *picks]]
    return model, [partial(_step, model, optimizer, batch, cfg, per_batch) for batch in made]


@contextmanager
def _alone() -> Iterator[None]:
    yield


class Companions:
    """`count` spawned 1-thread processes, each with the search's dataset and split loaded, that train the
    size being probed (`training`) on its probe's batches while it is timed, and wait between probes. Use as
    a context manager: they are stopped when it ends. `running` says how many answered."""

    def __init__(self, count: int, dataset: str, data_dir: str | None, base: Config) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Any] = []
        self.processes: list[Any] = []
        for _ in range(count):
            mine, theirs = context.Pipe()
            process = context.Process(
                target=_companion, args=(theirs, dataset, data_dir, base.to_dict()), daemon=True
            )
            process.start()
            theirs.close()
            self.pipes.append(mine)
            self.processes.append(process)
        self.running = count

    def __enter__(self) -> Companions:
        return self

    def __exit__(self, *exc: object) -> None:
        for pipe in self.pipes:
            self._send(pipe, None)
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()

    @contextmanager
    def training(self, cfg: Config, max_len: int) -> Iterator[int]:
        """While the block runs, every companion trains `cfg`; the block starts once each has taken its
        first round of steps (so none is still building or warming up). Yields how many are training."""
        asked = [p for p in self.pipes if self._send(p, (cfg.to_dict(), max_len))]
        training = [p for p in asked if self._answer(p, COMPANION_START_S) == "training"]
        self.running = len(training)
        try:
            yield len(training)
        finally:
            for pipe in training:
                if self._send(pipe, "stop"):
                    self._answer(pipe, COMPANION_START_S)

    @staticmethod
    def _send(pipe, message: Any) -> bool:
        try:
            pipe.send(message)
            return True
        except (OSError, EOFError):  # the companion is gone (it failed): the probe goes on without it
            return False

    @staticmethod
    def _answer(pipe, timeout: float) -> str:
        try:
            return pipe.recv() if pipe.poll(timeout) else "silent"
        except (OSError, EOFError):
            return "gone"


def _companion(pipe, dataset: str, data_dir: str | None, base: dict) -> None:
    """A companion's life: load the data once; then, for each size it is sent, build it, take one round of its
    steps, say "training", and go on taking them until told to stop; None ends it."""
    from modsar.data.split import make_split
    from modsar.data.store import load_dataset
    from modsar.data.views import viewed

    torch.set_num_threads(1)  # as a 1-CPU trial's worker has
    cfg = Config.from_dict(base)
    data = viewed(load_dataset(dataset, data_dir), cfg.data.view)
    split = make_split(cfg, data)
    while (message := pipe.recv()) is not None:
        try:
            _, steps = training_steps(
                Config.from_dict(message[0]), data, split, message[1], torch.device("cpu")
            )
            for step in steps:
                step()
        except Exception as error:  # the probe goes on without this one
            pipe.send(f"failed: {error}")
            continue
        pipe.send("training")
        while not pipe.poll():
            for step in steps:
                step()
                if pipe.poll():
                    break
        pipe.recv()  # "stop"
        pipe.send("stopped")


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
