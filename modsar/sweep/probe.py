"""A few seconds' timing of one model size, as a search's trial would run it: the seconds of an optimizer step
and of a validation pass, for the cost estimate (modsar.sweep.cost).

A trial seldom runs alone: a search on a 2-core machine runs two 1-thread trials at once, and side by side
each runs 15-20% slower than alone (memory bandwidth and caches are shared; benchmarks/trial_threads.py).
So the probe is timed beside companions: processes training the same size on the same batches, as many as the
other trials that run at once (`python -m modsar.sweep.probe` is one).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from modsar.config import Config
from modsar.training.trainer import Training, TrainingDiverged

# timed training steps per probe, after one warm-up step: batches at evenly spaced quantiles of the epoch's
# batch sizes in positions, so their mean is the epoch's mean step (padding-free batches sorted by length
# range from a few positions to the whole window; the first few of a shuffled epoch missed Beauty's by 40%)
PROBE_STEPS = 6
EVAL_PROBE_S = 0.3  # a validation pass is timed whole up to here, extrapolated from its batches beyond
COMPANION_START_S = 120.0  # how long the probe waits for a companion (its imports, its data, a first round)


def probe(
    cfg: Config, dataset, split, max_len: int, device: torch.device, beside: Companions | None = None
) -> tuple[float, float]:
    """(seconds per optimizer step, seconds per validation pass) of `cfg`, built and stepped as run_trial
    builds and steps it (`Training`): one warm-up step, then the mean of PROBE_STEPS real steps on batches at
    evenly spaced quantiles of the epoch's batch positions (the epoch's mean step); then validation_seconds.
    With `beside`, all of it is timed while those companions train the same size."""
    training = Training.build(cfg, dataset, split, max_len, device)
    steps = training.sample_steps(PROBE_STEPS)
    with beside.training(cfg, max_len) if beside else contextlib.nullcontext():
        times: list[float] = []
        for step in steps:  # the first, the warm-up, on the largest batch: the allocator grows once
            tick = time.perf_counter()
            _take(step)
            times.append(time.perf_counter() - tick)
        training.model.eval()
        return statistics.fmean(times[1:]), validation_seconds(training.model, split, cfg, max_len, device)


class Companions:
    """`count` companion processes (`python -m modsar.sweep.probe`, one thread each), each with the search's
    dataset and split loaded, that train the size being probed (`training`) on its probe's batches while it
    is timed, and wait between probes. Use as a context manager: they end with it. `fewest` says how few
    trained beside any size. They are processes of their own, not forked or spawned copies of this one: a fork
    of a process that has run Ray can deadlock on its gRPC threads, and a spawn runs the user's script again
    where it lacks an `if __name__ == "__main__":` guard."""

    def __init__(self, count: int, dataset: str, data_dir: str | None, base: Config) -> None:
        from modsar.model import registry

        setup = {
            "dataset": dataset,
            "data_dir": data_dir,
            "base": base.to_dict(),
            "plugins": registry.loaded_plugins(),  # the backbones this process registered, there too
        }
        # this process's import path: the same modsar (and plugins), wherever it was imported from
        path = os.pathsep.join(p for p in sys.path if p)
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "modsar.sweep.probe"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env={**os.environ, "PYTHONPATH": path},
            )
            for _ in range(count)
        ]
        self.answers = [_lines(p.stdout) for p in self.processes]
        self.live = [k for k, p in enumerate(self.processes) if _send(p, json.dumps(setup))]
        self.fewest = count  # the fewest companions that trained beside any probed size

    def __enter__(self) -> Companions:
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            with contextlib.suppress(OSError):
                process.stdin.close()  # type: ignore[union-attr]  # (its end of input ends it)
        deadline = time.monotonic() + 5
        for process in self.processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    @contextmanager
    def training(self, cfg: Config, max_len: int) -> Iterator[int]:
        """While the block runs, every companion trains `cfg`; the block starts once each has taken its
        first round of steps (so none is still building or warming up). Yields how many are training. A
        companion that fails, or does not answer in time, is stopped for good: answers are matched to requests
        by their order, which one late answer would break."""
        size = json.dumps({"cfg": cfg.to_dict(), "max_len": max_len})
        asked = [k for k in self.live if _send(self.processes[k], size)]
        deadline = time.monotonic() + COMPANION_START_S  # one wait for all of them, not one each
        training = [k for k in asked if _answer(self.answers[k], deadline) == "training"]
        self._drop([k for k in asked if k not in training])
        self.fewest = min(self.fewest, len(training))
        try:
            yield len(training)
        finally:
            asked = [k for k in training if _send(self.processes[k], "stop")]
            deadline = time.monotonic() + COMPANION_START_S
            self._drop(
                [k for k in training if k not in asked or _answer(self.answers[k], deadline) != "stopped"]
            )

    def _drop(self, companions: list[int]) -> None:
        for k in companions:
            self.processes[k].kill()
        self.live = [k for k in self.live if k not in companions]


def _send(process: subprocess.Popen, line: str) -> bool:
    try:
        process.stdin.write(line + "\n")  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]
        return True
    except (OSError, ValueError):  # the companion is gone (it failed): the probe goes on without it
        return False


def _lines(stream: Any) -> queue.Queue:
    """The lines `stream` gives, read by a thread of their own (a wait for one can then time out)."""
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line.strip())
        lines.put("gone")

    threading.Thread(target=read, daemon=True).start()
    return lines


def _answer(lines: queue.Queue, deadline: float) -> str:
    try:
        return lines.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        return "silent"


def _companion() -> None:
    """A companion's life: its set-up (the first line it reads), then, for each size it is sent, build it,
    take one round of its steps, say "training", and go on taking them until told to stop; the end of its
    input ends it. Its answers go to the pipe it was given as stdout; anything else printed goes to stderr."""
    from modsar.data.split import make_split
    from modsar.data.store import load_dataset
    from modsar.data.views import viewed
    from modsar.model import registry

    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # a library's print cannot pass for an answer
    torch.set_num_threads(1)  # as a 1-CPU trial's worker has
    told = _lines(sys.stdin)
    if (first := told.get()) == "gone":
        return
    setup = json.loads(first)
    registry.load_plugins(setup["plugins"])
    base = Config.from_dict(setup["base"])
    data = viewed(load_dataset(setup["dataset"], setup["data_dir"]), base.data.view)
    split = make_split(base, data)
    while (message := told.get()) != "gone":
        try:
            size = json.loads(message)
            cfg = Config.from_dict(size["cfg"])
            steps = Training.build(cfg, data, split, size["max_len"], torch.device("cpu")).sample_steps(
                PROBE_STEPS
            )
            for step in steps:
                _take(step)
        except Exception as error:  # the probe goes on without this one
            print(f"failed: {error}".splitlines()[0], file=answers, flush=True)
            continue
        print("training", file=answers, flush=True)
        while told.empty():
            for step in steps:
                _take(step)
                if not told.empty():
                    break
        if told.get() == "gone":  # (else "stop")
            return
        print("stopped", file=answers, flush=True)


def _take(step: Callable[[], float]) -> None:
    """One timed step; a loss gone NaN or infinite (a size probed at a rate that diverges) ends only that
    step, so the probe and its companions go on loading the machine as the trial would until it stopped."""
    with contextlib.suppress(TrainingDiverged):
        step()


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


if __name__ == "__main__":  # a companion (Companions)
    _companion()
