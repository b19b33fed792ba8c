"""A trial: config -> data -> model -> training with early stopping -> validation/test of the best epoch.

`run_trial` is the single function behind `modsar train` and every Ray Tune trial. Model
selection uses validation only: the best epoch is the one with the highest monitored validation metric,
and test metrics are computed once, from that epoch's weights.
"""

from __future__ import annotations

import copy
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from modsar import devices
from modsar.config import Config
from modsar.data.batches import Batch, TrainBatches
from modsar.data.split import TemporalSplit, make_split
from modsar.data.store import StoredDataset, dataset_identity, load_dataset
from modsar.data.views import viewed
from modsar.errors import ModsarError
from modsar.evaluation.ranking import Evaluator, model_scorer, popularity_scorer
from modsar.memory import check_model
from modsar.model import registry
from modsar.model.interface import Recommender, encode
from modsar.model.losses import training_loss
from modsar.outputs import atomic_write
from modsar.randomness import global_states, seed_everything, untouched
from modsar.training.feasible import validate_for_dataset
from modsar.training.flops import epoch_flops, utilisation
from modsar.training.heap import bound_heap, roomy_heap
from modsar.training.optim import BertAdamW

# on_eval(epoch, valid metrics, improved, checkpoint or None, facts): facts has "last" (training stops after
# this pass: patience or max epochs) and the mean epoch/eval times so far.
EvalCallback = Callable[[int, dict, bool, "Path | None", dict], None]


class TrainingDiverged(RuntimeError):
    """The loss, the weights or the validation metrics became NaN or infinite; the trial cannot continue.

    `partial` holds what the trial had achieved before (best validation epoch so far, no test metrics), so
    its row can still be written; a diverged trial is never selected or tested.
    """

    def __init__(self, reason: str, partial: TrialResult | None = None) -> None:
        super().__init__(reason)
        self.partial = partial


def weights_finite(model: Recommender) -> bool:
    """True when every parameter is finite (one device sync for the whole model)."""
    return bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all())


@dataclass
class TrialResult:
    valid: dict[str, float]
    test: dict[str, float]
    best_epoch: int
    epochs_run: int
    wall_time_s: float
    epoch_time_s: float  # mean training time per epoch (no evaluation)
    eval_time_s: float  # mean time of one validation pass
    device: str
    num_parameters: int
    history: list[dict] = field(default_factory=list)  # one entry per validation pass
    checkpoint: str | None = None
    monitor: str = "ndcg@10"
    epoch_gflop: float = math.nan  # model GFLOP of one training epoch (modsar.training.flops)
    output_gflop: float = math.nan  # of which in the output layer (scoring + loss)
    gflops: float = math.nan  # of which achieved per second of training
    mfu: float = math.nan  # gflops over this device's measured matmul rate in the training dtype
    protocol: dict[str, Any] = field(default_factory=dict)  # targets evaluated; a temporal split's cut times
    generation: dict[str, float] = field(default_factory=dict)  # eval.generate_steps: rollout metrics on test
    steps: int = 0  # optimizer steps taken
    steps_per_epoch: float = math.nan
    popularity_level: float = math.nan  # the monitored metric of a most-popular ranking on validation
    escape_steps: int | None = None  # steps at the first validation clearly above it (None: never left it)


PLATEAU_FACTOR = 1.25  # a run has left the popularity level once validation reaches 1.25 x the most-popular
#   ranking's value: plateaus measured on Video and MovieLens sat within 0.9-1.2 x of it, trained models at 2-6 x


def popularity_level(evaluator: Evaluator, split, device: torch.device, monitor: str) -> float:
    """The validation `monitor` of the most-popular ranking: the level a run must clear before its ranking means
    more than popularity (docs/training.md#plateau)."""
    with untouched(device), roomy_heap():
        return evaluator(popularity_scorer(split, device), "valid")[monitor]


def escape_steps(history: list[dict[str, Any]], monitor: str, level: float) -> int | None:
    """Optimizer steps at the first validation pass that left the popularity level (docs/training.md)."""
    return next(
        (
            int(h["steps"])
            for h in history
            if "steps" in h and h[f"valid.{monitor}"] >= PLATEAU_FACTOR * level
        ),
        None,
    )


@dataclass
class LearningRate:
    """The learning rate of each optimizer step: `train.warmup_steps` of linear warm-up, then constant or linear
    decay to 0 at the last step of `train.max_epochs` (BERT's schedule, whose decay also counts the warm-up steps).
    The rate is a function of the step count alone, so a resumed run that restores `steps` restores it too."""

    lr: float
    warmup: int = 0
    linear: bool = False
    total: int = (
        0  # steps in the whole run, set from the first epoch's batches (token batches vary by one or two)
    )
    steps: int = 0

    def factor(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        return max(0.0, 1.0 - step / self.total) if self.linear and self.total else 1.0

    def set(self, optimizer: torch.optim.Optimizer) -> None:
        """Give the next step its rate (a no-op at constant rate without warm-up: the optimizer keeps lr)."""
        if self.warmup or self.linear:
            for group in optimizer.param_groups:
                group["lr"] = self.lr * self.factor(self.steps)


def resolve_device(name: str, option: str = "train.device") -> torch.device:
    """`name` (auto, cpu, cuda, cuda:N) on this machine; `option` is where it was given, for the message."""
    return devices.resolve(name, option)


def build_model(cfg: Config, num_items: int, num_users: int, max_len: int) -> Recommender:
    """The configured backbone from the registry: every one has the same interface, training and evaluation."""
    return registry.build(cfg, num_items, num_users, max_len)


def _atomic_save(path: Path, payload: dict) -> None:
    """torch.save, never a half file."""
    with atomic_write(path) as tmp:
        torch.save(payload, tmp)


def _weights(model: Recommender) -> dict[str, torch.Tensor]:
    """A detached copy of the state dict (the best epoch's weights, kept while training goes on)."""
    return copy.deepcopy({k: v.detach() for k, v in model.state_dict().items()})


def save_checkpoint(path: Path, model: Recommender, cfg: Config, meta: dict) -> None:
    """State dict + config, written atomically."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    _atomic_save(path, {"state_dict": state, "config": cfg.stored(), **meta})


RESUME_FILE = "resume.pt"  # beside a resumable run's best.pt: what a retried trial needs besides the weights


@dataclass
class TrainState:
    """What a run carries from one epoch to the next. `state_dict()` is the resume file (with the best weights
    in best.pt beside it) and `load()` restores it, so a retried trial continues bit for bit."""

    optimizer: torch.optim.Optimizer
    batches: TrainBatches
    device: torch.device
    rate: LearningRate = field(default_factory=lambda: LearningRate(0.0))  # run_trial passes the run's own
    best_value: float = -math.inf
    best_epoch: int = 0
    best_valid: dict[str, float] = field(default_factory=dict)
    best_weights: dict[str, torch.Tensor] | None = None
    stale: int = 0  # validation passes since the last improvement
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per validation pass
    epoch_times: list[float] = field(default_factory=list)
    eval_times: list[float] = field(default_factory=list)

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

    def state_dict(self, wall_time_s: float, rng: dict[str, Any]) -> dict[str, Any]:
        """`rng` is the global generators' state training continues from (taken before validation)."""
        return {
            "epoch": self.best_epoch,
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
            "wall_time_s": wall_time_s,
            "steps": self.rate.steps,
            "total_steps": self.rate.total,
        }

    def load(self, resume: dict[str, Any], model: Recommender) -> float:
        """Restore a `state_dict` (and the model from its best weights); returns the wall time already spent."""
        model.load_state_dict(resume["state_dict"])
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
        self.best_weights = _weights(model)
        self.history, self.epoch_times, self.eval_times = (
            resume["history"],
            resume["epoch_times"],
            resume["eval_times"],
        )
        # earlier resume files have no step count: a constant rate does not need one
        self.rate.steps, self.rate.total = resume.get("steps", 0), resume.get("total_steps", 0)
        return float(resume["wall_time_s"])


def load_resume_state(folder: str | Path) -> dict | None:
    """The training state a resumable `run_trial` left with its best checkpoint in `folder`, or None."""
    folder = Path(folder)
    if not (folder / RESUME_FILE).exists():
        return None
    state = torch.load(folder / RESUME_FILE, map_location="cpu", weights_only=True)
    state["state_dict"] = torch.load(folder / "best.pt", map_location="cpu", weights_only=True)["state_dict"]
    return state


def output_dtype(cfg: Config) -> torch.dtype:
    """The dtype of the fused CE's matrix products (`train.precision`); everything else stays float32."""
    return torch.bfloat16 if cfg.train.precision == "bf16" else torch.float32


def batch_loss(model: Recommender, batch: Batch, cfg: Config, per_batch: float) -> torch.Tensor:
    """The training loss of one batch. `loss.normalize=epoch` divides its sum by `per_batch` (the labelled
    positions of an average batch) instead of by its own count, so every position of the epoch weighs the same
    however the batches group them; the epoch's mean loss is then the mean over all its positions."""
    hidden = encode(model, batch.inputs, batch.users, batch.times)
    loss = training_loss(
        model, hidden, batch.labels, batch.users, cfg.loss, cfg.data.padding_free, dtype=output_dtype(cfg)
    )
    if cfg.loss.normalize == "epoch":
        loss = loss * ((batch.labels > 0).sum() / per_batch)
    regularizer = getattr(
        model, "regularizer", None
    )  # a backbone's own extra term (DuoRec's contrastive views)
    extra = regularizer(batch, hidden, cfg.loss) if regularizer is not None else None
    return loss if extra is None else loss + extra  # a mean over the batch's sequences: not rescaled


def split_facts(split) -> dict[str, Any]:
    """What a row records of the split: how many targets were validated and tested (under the temporal split
    far fewer than users) and, for a temporal split, the cut times in seconds."""
    facts: dict[str, Any] = {
        "valid_targets": len(split.targets("valid")[0]),
        "test_targets": len(split.targets("test")[0]),
    }
    if isinstance(split, TemporalSplit):
        facts |= {"split_valid_cut": float(split.valid_cut), "split_test_cut": float(split.test_cut)}
    return facts


def needs_partners(cfg: Config) -> bool:
    """DuoRec's supervised views need a same-target training prefix for every sequence of a batch."""
    return cfg.model.backbone == "duorec" and cfg.loss.cl_weight > 0 and cfg.loss.cl_views != "un"


def train_batches(split, cfg: Config, max_len: int) -> TrainBatches:
    """The training batches of `cfg` (its task, batching, masking, SSE, DuoRec partners, times), seeded by it."""
    return TrainBatches(
        split,
        cfg.task,
        max_len,
        cfg.data.batch_size,
        cfg.mask_prob,
        cfg.data.padding_free,
        cfg.model.item_sse_prob,
        cfg.model.user_sse_prob,
        seed=cfg.seed,
        batching=cfg.data.batching,
        sse_style=cfg.model.sse_style,
        partners=needs_partners(cfg),
        samples=cfg.data.samples,
        times=cfg.model.time_bias != "none",
    )


def optimizer_step(
    model: Recommender,
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor,
    cfg: Config,
    rate: LearningRate | None = None,
) -> None:
    """Back-propagate `loss` and take one step: gradients clipped (train.grad_clip), the step's learning rate
    set and counted by `rate`."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.train.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
    if rate is not None:
        rate.set(optimizer)
        rate.steps += 1
    optimizer.step()  # an update that overflows (lr 3e38) leaves inf weights: the next loss is NaN


def train_epoch(
    model: Recommender,
    optimizer: torch.optim.Optimizer,
    batches: TrainBatches,
    cfg: Config,
    device: torch.device,
    epoch: int = 0,
    rate: LearningRate | None = None,
) -> float:
    """One pass over the training batches; returns the mean loss. Raises TrainingDiverged on NaN/inf. `rate`
    sets each step's learning rate and counts the steps."""
    total, count = 0.0, 0
    plan = batches.epoch_plan()
    if rate is not None and not rate.total:
        rate.total = len(plan) * cfg.train.max_epochs
    per_batch = batches.num_targets / max(len(plan), 1)  # labelled positions in an average batch
    for rows in plan:
        loss = batch_loss(model, batches.make(rows).to(device), cfg, per_batch)
        if not torch.isfinite(loss):
            raise TrainingDiverged(
                f"loss became {loss.item()} at epoch {epoch}; lower train.lr or add train.grad_clip"
            )
        optimizer_step(model, optimizer, loss, cfg, rate)
        total, count = total + loss.item(), count + 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return total / max(count, 1)


def decay_groups(
    model: Recommender, exclude: str
) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    """(decayed, not decayed) parameters; `exclude` names what weight decay must not touch (BERT and nanoGPT
    keep it off norms and biases: shrinking a LayerNorm gain or a bias towards 0 is not regularisation)."""
    skip = set(exclude.split(",")) - {"none"}
    kept: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        norm = "Norm" in type(module).__name__  # LayerNorm, RMSNorm, LlamaRMSNorm, ...
        for name, param in module.named_parameters(recurse=False):
            if (
                ("norm" in skip and norm)
                or ("bias" in skip and name.endswith("bias"))
                or ("embedding" in skip and isinstance(module, torch.nn.Embedding))
            ):
                kept[id(param)] = param
    params = list(dict.fromkeys(model.parameters()))  # tied weights once
    return [p for p in params if id(p) not in kept], [p for p in params if id(p) in kept]


def make_optimizer(model: Recommender, cfg: Config) -> torch.optim.Optimizer:
    decayed, kept = decay_groups(model, cfg.train.weight_decay_exclude)
    groups: list[dict[str, Any]] = [{"params": decayed}, {"params": kept, "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    lr, decay, betas = cfg.train.lr, cfg.train.weight_decay, (0.9, cfg.train.beta2)
    if cfg.train.optimizer == "adamw_bert":
        return BertAdamW(groups, lr=lr, weight_decay=decay, betas=betas)
    optimizer_cls = torch.optim.AdamW if cfg.train.optimizer == "adamw" else torch.optim.Adam
    # fused: one kernel over all parameters. On CPU torch's default is a Python loop per tensor, 7x slower
    # (8 vs 1.1 ms a step on Video's 1.6M parameters, ~6% of a bf16 CE epoch); on CUDA fused beats foreach
    return optimizer_cls(groups, lr=lr, weight_decay=decay, betas=betas, fused=True)


def run_trial(
    cfg: Config,
    dataset: StoredDataset | None = None,
    on_eval: EvalCallback | None = None,
    checkpoint_path: str | Path | None = None,
    progress: bool = True,
    data_root: str | Path | None = None,
    evaluate_test: bool = True,
    resumable: bool = False,
    resume: dict | None = None,
) -> TrialResult:
    """Train `cfg`, select the best epoch on validation, and (unless told not to) test that epoch.

    `on_eval(epoch, valid_metrics, improved, checkpoint, facts)` (EvalCallback) runs after every validation
    pass; a search reports from it. Searches pass evaluate_test=False: only the selected trials are ever tested.
    `resumable` also writes RESUME_FILE (optimizer, RNG states, history) beside each best checkpoint;
    `resume` (from load_resume_state) continues from there exactly as the interrupted run would have.
    """
    started = time.perf_counter()
    bound_heap()
    if cfg.train.threads > 0:
        torch.set_num_threads(cfg.train.threads)
    device = resolve_device(cfg.train.device)
    seed_everything(cfg.seed)
    dataset = viewed(dataset or load_dataset(cfg.dataset, data_root), cfg.data.view)
    split = make_split(cfg, dataset)
    validate_for_dataset(
        cfg, dataset.num_items, "config", split, max_len=cfg.data.max_len or dataset.default_max_len
    )
    if cfg.model.time_bias != "none" and split.timestamp is None:
        raise ModsarError(
            f"model.time_bias={cfg.model.time_bias} needs timestamps, and dataset '{cfg.dataset}' has "
            "none (its source gives only the order within each user); use a timestamped dataset or "
            "model.time_bias=none"
        )
    if not len(split.eval_users):
        raise ModsarError(
            f"dataset '{cfg.dataset}' has no user with 3+ interactions: nothing to validate or test"
        )
    max_len = cfg.data.max_len or dataset.default_max_len
    check_model(cfg, dataset.num_items, dataset.num_users, max_len)  # counted on the meta device first
    model = build_model(cfg, dataset.num_items, dataset.num_users, max_len).to(device)
    optimizer = make_optimizer(model, cfg)
    num_parameters = sum(p.numel() for p in model.parameters())
    batches = train_batches(split, cfg, max_len)
    if not len(batches):
        raise ModsarError(f"dataset '{cfg.dataset}' has no user with 2+ training items: nothing to train on")

    evaluator = Evaluator.of(split, cfg, max_len, device)

    def validate() -> dict[str, float]:
        model.eval()
        with roomy_heap():
            metrics = evaluator(model_scorer(model), "valid")
        model.train()
        return metrics

    monitor = cfg.train.monitor_key
    rate = LearningRate(cfg.train.lr, cfg.train.warmup_steps, cfg.train.lr_schedule == "linear")
    state = TrainState(optimizer, batches, device, rate)
    popularity = popularity_level(evaluator, split, device, monitor)
    checkpoint_path = Path(checkpoint_path) if checkpoint_path else None
    meta = {
        "num_items": dataset.num_items,
        "num_users": dataset.num_users,
        "max_len": max_len,
        **dataset_identity(dataset.manifest),
    }  # what `modsar evaluate` checks the data against

    def facts(last: bool, loss: float) -> dict:
        return {
            "last": last,
            "epoch_time_s": float(np.mean(state.epoch_times)),
            "num_parameters": num_parameters,
            "eval_time_s": float(np.mean(state.eval_times)),
            "loss": loss,
            **speed(),
            **protocol,
            **advance(),
        }

    def advance() -> dict[str, Any]:
        """Steps taken, and whether validation has left the popularity level (PLATEAU_FACTOR)."""
        epochs_done = len(state.epoch_times)  # restored with the rest on a resume
        return {
            "steps": rate.steps,
            "steps_per_epoch": rate.steps / epochs_done if epochs_done else math.nan,
            "popularity_level": popularity,
            "escape_steps": escape_steps(state.history, monitor, popularity),
        }

    first_epoch = 1
    if resume is not None:  # a retried or resumed search trial: continue bit for bit after its best epoch
        started -= state.load(resume, model)
        first_epoch = state.best_epoch + 1
    epochs = tqdm(
        range(first_epoch, cfg.train.max_epochs + 1),
        desc=f"{cfg.task.upper()} {cfg.dataset}",
        unit="epoch",
        disable=not progress,
        dynamic_ncols=True,
        initial=first_epoch - 1,
        total=cfg.train.max_epochs,
    )
    protocol = split_facts(split)
    output_flops, model_flops = epoch_flops(
        model, cfg, int(batches.row_lengths.sum()), batches.num_targets, dataset.num_items
    )
    dtype = output_dtype(cfg)

    def speed() -> dict[str, Any]:
        """Model GFLOP per epoch, achieved GFLOP/s and MFU over the epochs so far."""
        flops = {"epoch_gflop": model_flops / 1e9, "output_gflop": output_flops / 1e9}
        if not state.epoch_times:
            return {**flops, "gflops": math.nan, "mfu": math.nan}
        seconds = float(np.mean(state.epoch_times))
        return {
            **flops,
            "gflops": model_flops / seconds / 1e9,
            "mfu": utilisation(model_flops, seconds, device, dtype),
        }

    def outcome(test: dict[str, float], generation: dict[str, float] | None = None) -> TrialResult:
        return TrialResult(
            **speed(),
            **advance(),
            protocol=protocol,
            generation=generation or {},
            valid=state.best_valid,
            test=test,
            best_epoch=state.best_epoch,
            epochs_run=epoch,
            wall_time_s=time.perf_counter() - started,
            epoch_time_s=float(np.mean(state.epoch_times)) if state.epoch_times else math.nan,
            eval_time_s=float(np.mean(state.eval_times)) if state.eval_times else math.nan,
            device=str(device),
            num_parameters=num_parameters,
            history=state.history,
            checkpoint=str(checkpoint_path) if checkpoint_path else None,
            monitor=monitor,
        )

    model.train()
    epoch = first_epoch - 1
    try:
        for epoch in epochs:
            tick = time.perf_counter()
            mean_loss = train_epoch(model, optimizer, batches, cfg, device, epoch, rate)
            state.epoch_times.append(time.perf_counter() - tick)
            if epoch % cfg.train.eval_every and epoch != cfg.train.max_epochs:
                epochs.set_postfix(loss=f"{mean_loss:.4f}")
                continue
            if not weights_finite(model):  # the last optimizer step can turn weights NaN after a finite loss
                raise TrainingDiverged(
                    f"weights became NaN or infinite in epoch {epoch}; lower train.lr or set train.grad_clip"
                )
            training_rng = global_states(device)  # the next epoch continues from here, and so does a resume
            with untouched(device):  # nothing below may shift the training stream (modsar.randomness)
                tick = time.perf_counter()
                metrics = validate()
                state.eval_times.append(time.perf_counter() - tick)
                broken = sorted(k for k, v in metrics.items() if not math.isfinite(v))
                if broken:
                    raise TrainingDiverged(f"validation {', '.join(broken)} not finite at epoch {epoch}")
                improved = state.record(model, epoch, metrics, monitor, mean_loss)
                if improved and checkpoint_path:
                    save_checkpoint(checkpoint_path, model, cfg, {**meta, "epoch": epoch, "valid": metrics})
                    if resumable:
                        _atomic_save(
                            checkpoint_path.with_name(RESUME_FILE),
                            state.state_dict(time.perf_counter() - started, training_rng),
                        )
                epochs.set_postfix(
                    loss=f"{mean_loss:.4f}",
                    **{
                        cfg.train.monitor: f"{metrics[monitor]:.4f}",
                        "best": f"{state.best_value:.4f}@{state.best_epoch}",
                    },
                )
                patient = rate.steps < cfg.train.min_steps  # no stop on a plateau before min_steps
                last = (
                    bool(cfg.train.patience and state.stale >= cfg.train.patience and not patient)
                    or epoch == cfg.train.max_epochs
                )
                if on_eval is not None:
                    on_eval(
                        epoch,
                        metrics,
                        improved,
                        checkpoint_path if improved else None,
                        facts(last, mean_loss),
                    )
            if last:
                break
    except TrainingDiverged as exc:
        exc.partial = outcome({})
        raise
    finally:
        epochs.close()
    if (
        first_epoch > cfg.train.max_epochs and on_eval is not None
    ):  # resumed after its final epoch: say it ended
        on_eval(state.best_epoch, state.best_valid, False, None, facts(True, state.history[-1]["loss"]))
    test = {}
    if evaluate_test:
        if state.best_weights is None:  # every run validates at its last epoch, so this cannot happen
            raise RuntimeError("no validation pass ran: there is no best epoch to test")
        model.load_state_dict(state.best_weights)
        model.eval()
        with roomy_heap(), untouched(device):
            test = evaluator(model_scorer(model), "test")
            generation = rollout_metrics(model, split, cfg, max_len, device)
        return outcome(test, generation)
    return outcome(test)


def rollout_metrics(
    model: Recommender, split, cfg: Config, max_len: int, device: torch.device
) -> dict[str, float]:
    """eval.generate_steps > 0: greedy rollouts from every test user's history (seeded by the trial's seed),
    never picking a seen item where the evaluation filters them (`--exclude auto` of modsar generate)."""
    if not cfg.eval.generate_steps:
        return {}
    from modsar.evaluation.rollouts import Sampler, generate, resolve_exclude

    return generate(
        model,
        split,
        cfg.task,
        max_len,
        cfg.eval.generate_steps,
        Sampler("greedy"),
        resolve_exclude("auto", cfg.eval.filter_seen),
        seed=cfg.seed,
        device=device,
    ).metrics
