"""What a training run carries and saves: the best epoch's checkpoint, and the state that goes from one epoch
to the next (weights, best so far, history, optimizer, generators), which a resumable run also writes beside
the checkpoint at every validation pass so that a retried trial continues bit for bit from its last pass.
Reading a checkpoint back for evaluation lives in `modsar.training.checkpoints`, which needs none of this."""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from modsar.config import Config
from modsar.data.batches import TrainBatches
from modsar.model.interface import Recommender
from modsar.outputs import atomic_write
from modsar.training.optim import LearningRate

RESUME_FILE = "resume.pt"  # beside a resumable run's best.pt: what a retried trial needs besides the weights


def _atomic_save(path: Path, payload: dict) -> None:
    """torch.save, never a half file. Written through a Python file, so that a full disk is the OSError
    (ENOSPC) atomic_write turns into one line; torch's own file writer raises an unnamed RuntimeError."""
    with atomic_write(path) as tmp, open(tmp, "wb") as out:
        torch.save(payload, out)


def _weights(model: Recommender) -> dict[str, torch.Tensor]:
    """A detached copy of the state dict (the best epoch's weights, kept while training goes on)."""
    return copy.deepcopy({k: v.detach() for k, v in model.state_dict().items()})


def _saved_weights(model: Recommender) -> dict[str, torch.Tensor]:
    """The state dict as a file holds it: detached, on the CPU."""
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def save_checkpoint(path: Path, model: Recommender, cfg: Config, meta: dict) -> None:
    """State dict + config, written atomically."""
    _atomic_save(path, {"state_dict": _saved_weights(model), "config": cfg.stored(), **meta})


@dataclass
class TrainState:
    """What a run carries from one epoch to the next. `state_dict()` is the resume file (with the best weights
    in best.pt beside it) and `load()` restores it, so a retried trial continues bit for bit."""

    optimizer: torch.optim.Optimizer
    batches: TrainBatches
    device: torch.device
    rate: LearningRate = field(default_factory=lambda: LearningRate(0.0))  # the trainer passes the run's own
    best_value: float = -math.inf
    best_epoch: int = 0
    best_valid: dict[str, float] = field(default_factory=dict)
    best_weights: dict[str, torch.Tensor] | None = None
    stale: int = 0  # validation passes since the last improvement
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per validation pass
    epoch_times: list[float] = field(default_factory=list)
    eval_times: list[float] = field(default_factory=list)
    # seconds of set-up and of checkpoint writes, summed over the run's processes (a resumed run adds its own)
    times: dict[str, float] = field(default_factory=lambda: {"setup_s": 0.0, "checkpoint_s": 0.0})

    def record(
        self, model: Recommender, epoch: int, metrics: dict[str, float], monitor: str, loss: float
    ) -> bool:
        """Add a validation pass; True (and the weights kept) when it beats the best so far."""
        improved = metrics[monitor] > self.best_value
        if improved:
            self.best_value, self.best_epoch, self.best_valid, self.stale = (
                metrics[monitor],
                epoch,
                metrics,
                0,
            )
            self.best_weights = _weights(model)
        else:
            self.stale += 1
        self.history.append(
            {
                "epoch": epoch,
                "steps": self.rate.steps,
                "loss": loss,
                **{f"valid.{k}": v for k, v in metrics.items()},
            }
        )
        return improved

    def state_dict(
        self, wall_time_s: float, rng: dict[str, Any], model: Recommender, epoch: int
    ) -> dict[str, Any]:
        """The run as it stands after the validation pass of `epoch`: `model`'s weights, and `rng`, the global
        generators' state training continues from (taken before validation). The best weights: best.pt."""
        return {
            "epoch": self.best_epoch,
            "last_epoch": epoch,
            "stale": self.stale,
            "weights": _saved_weights(model),
            "best_value": self.best_value,
            "valid": self.best_valid,
            "optimizer": self.optimizer.state_dict(),
            "torch_rng": rng["torch"],
            "batches_rng": self.batches.rng.bit_generator.state,
            "cuda_rng": rng.get("cuda"),
            # python's and numpy's too, as plain ints (weights_only loads them): built-in training draws
            # neither, a plugin backbone might
            "python_rng": rng["python"],
            "numpy_rng": [*rng["numpy"][:1], rng["numpy"][1].tolist(), *rng["numpy"][2:]],
            "history": self.history,
            "epoch_times": self.epoch_times,
            "eval_times": self.eval_times,
            "times": self.times,
            "wall_time_s": wall_time_s,
            "steps": self.rate.steps,
            "total_steps": self.rate.total,
        }

    def load(self, resume: dict[str, Any], model: Recommender) -> int:
        """Restore a `state_dict`: the best weights kept, the model as it stood at the pass the state was
        written (a resume file from before they were written at every pass holds the best epoch's state:
        the run continues from there). Returns the epoch it continues after."""
        model.load_state_dict(resume["state_dict"])
        self.best_weights = _weights(model)
        if "weights" in resume:
            model.load_state_dict(resume["weights"])
        self.stale = int(resume.get("stale", 0))
        self.optimizer.load_state_dict(resume["optimizer"])
        torch.set_rng_state(resume["torch_rng"])
        if "python_rng" in resume:  # earlier resume files hold torch's state only
            random.setstate(resume["python_rng"])
            name, keys, *rest = resume["numpy_rng"]
            np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
        if self.device.type == "cuda" and resume.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(resume["cuda_rng"], self.device)
        self.batches.rng.bit_generator.state = resume["batches_rng"]
        self.best_value, self.best_epoch, self.best_valid = (
            resume["best_value"],
            resume["epoch"],
            resume["valid"],
        )
        self.history, self.epoch_times, self.eval_times = (
            resume["history"],
            resume["epoch_times"],
            resume["eval_times"],
        )
        earlier = resume.get("times") or {}  # earlier resume files have none
        self.times = {k: v + float(earlier.get(k, 0.0)) for k, v in self.times.items()}
        # earlier resume files have no step count: a constant rate does not need one
        self.rate.steps, self.rate.total = resume.get("steps", 0), resume.get("total_steps", 0)
        return int(resume.get("last_epoch", resume["epoch"]))


def save_resume_state(
    checkpoint: Path,
    state: TrainState,
    wall_time_s: float,
    rng: dict[str, Any],
    model: Recommender,
    epoch: int,
) -> None:
    """RESUME_FILE beside `checkpoint` (the best epoch's weights), written at every validation pass: what a
    retried or resumed trial continues from, so that an interruption costs at most the epochs since the last
    pass, not those since the best."""
    _atomic_save(checkpoint.with_name(RESUME_FILE), state.state_dict(wall_time_s, rng, model, epoch))


def load_resume_state(folder: str | Path) -> dict | None:
    """The training state a resumable `run_trial` left with its best checkpoint in `folder`, or None."""
    folder = Path(folder)
    if not (folder / RESUME_FILE).exists():
        return None
    state = torch.load(folder / RESUME_FILE, map_location="cpu", weights_only=True)
    state["state_dict"] = torch.load(folder / "best.pt", map_location="cpu", weights_only=True)["state_dict"]
    return state
