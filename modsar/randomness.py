"""A trial's random streams: seeded once, drawn only by training.

A trial's training draws from torch's global generator (dropout, sampled negatives) and from its own numpy
generators (batches, masks). Everything else a trial calls between epochs (validation, speed and MFU
measurement, rollouts, reports to Tune, checkpoints, logging) must draw nothing from the global generators:
one draw there shifts every later dropout mask, and the same config and seed then train differently in a
fresh process, a reused Ray actor, a retried or a resumed trial. `untouched` runs such a helper with the
global states saved and put back, so even a draw inside a library we call cannot reach training; the tests
check that our own helpers draw nothing in the first place.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed python's, numpy's and torch's global generators (torch's seeds every CUDA device too)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def global_states(device: torch.device | None = None) -> dict[str, Any]:
    """The global generators' states: python, numpy, torch CPU and, on a CUDA device, that device's."""
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if device is not None and device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def restore_states(states: dict[str, Any], device: torch.device | None = None) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and device is not None:
        torch.cuda.set_rng_state(states["cuda"], device)


def same_states(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when two `global_states` snapshots are equal (what a helper that draws nothing leaves)."""
    numpy_a, numpy_b = a["numpy"], b["numpy"]
    return (
        a["python"] == b["python"]
        and numpy_a[0] == numpy_b[0]
        and np.array_equal(numpy_a[1], numpy_b[1])
        and numpy_a[2:] == numpy_b[2:]
        and torch.equal(a["torch"], b["torch"])
        and (("cuda" in a) == ("cuda" in b))
        and ("cuda" not in a or torch.equal(a["cuda"], b["cuda"]))
    )


@contextlib.contextmanager
def untouched(device: torch.device | None = None) -> Iterator[None]:
    """Run a block that is not training: the global generators leave it as they entered it."""
    states = global_states(device)
    try:
        yield
    finally:
        restore_states(states, device)


@contextlib.contextmanager
def caller_state_kept() -> Iterator[None]:
    """Run a whole command for a caller in the same process (the Python API): python's, numpy's and torch's
    global generators (CPU and every CUDA device) and torch's CPU thread count leave the block as they
    entered it, on return and on an exception. A run seeds the generators and sets the threads for itself
    (what it computes stays as it was); a notebook drawing from np.random between calls must not get the run's
    seed back each time. CUDA is never started here: when it starts inside the block, its generators are left
    as a first use would have found them (seeded with torch's initial seed, as torch.manual_seed does)."""
    states = global_states()
    cuda_started = torch.cuda.is_available() and torch.cuda.is_initialized()
    cuda_states = torch.cuda.get_rng_state_all() if cuda_started else None
    initial_seed, threads = torch.initial_seed(), torch.get_num_threads()
    try:
        yield
    finally:
        restore_states(states)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        else:  # queued until CUDA starts, or applied now if the block started it
            torch.cuda.manual_seed_all(initial_seed)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
