"""Device names (auto, cpu, cuda, cuda:N) for train.device and the --device options, in one place: the name
is checked without torch when a config is read, and resolved against this machine's GPUs when a command
starts, so a wrong name or a missing GPU is one line before any work rather than a torch traceback later."""

from __future__ import annotations

import functools
import platform
import re
from typing import TYPE_CHECKING

from modsar.errors import ModsarError

if TYPE_CHECKING:
    import torch

OFFERED = "auto, cpu, cuda or cuda:N"
_NAME = re.compile(r"auto|cpu|cuda(?::(\d+))?")


def _spelled(option: str, name: str) -> str:
    """As the user wrote it: "--device cuda" for a command-line option, "train.device=cuda" for a key."""
    return f"{option} {name}" if option.startswith("-") else f"{option}={name}"


def name_problem(name: str, option: str = "train.device") -> str | None:
    """Why `name` is not a device ModSAR offers, or None (torch-free, for config checks)."""
    if _NAME.fullmatch(name):
        return None
    return f"{_spelled(option, repr(name))} is not a device ModSAR runs on; use {OFFERED}"


def resolve(name: str, option: str = "train.device") -> torch.device:
    """The torch device `name` means here; `option` is where the user gave it (train.device, --device), so
    the message says what to change."""
    import torch

    problem = name_problem(name, option)
    if problem:
        raise ModsarError(problem)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        cpu, auto = _spelled(option, "cpu"), _spelled(option, "auto")
        raise ModsarError(
            f"{_spelled(option, name)}: no CUDA device is present on this machine (PyTorch "
            f"sees no GPU); use {cpu}, or {auto} (a GPU when there is one)"
        )
    count = torch.cuda.device_count()
    index = int(name.partition(":")[2] or 0)
    if index >= count:
        last = f"cuda:{count - 1}"
        present = "1 CUDA device, cuda:0" if count == 1 else f"{count} CUDA devices, cuda:0 to {last}"
        raise ModsarError(
            f"{_spelled(option, name)}: this machine has {present}; use one of those, or "
            f"{_spelled(option, 'auto')}"
        )
    return torch.device(name)


def cpu_identity() -> str:
    """This machine's CPU as a row records it: its model and the vector instruction set torch's own kernels
    run (e.g. "AMD EPYC (AVX512)"; oneDNN and MKL choose theirs from the same CPU). Training is bit-identical
    only on one kind of CPU and thread count: two rows of one config and seed whose curves differ say here
    where each ran."""
    import torch

    return f"{_cpu_model()} ({torch.backends.cpu.get_cpu_capability()})"


@functools.cache
def _cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform says, else its architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
