"""A trial: config -> data -> model -> training with early stopping -> validation/test of the best epoch.

`run_trial` is the single function behind `modsar train` and every Ray Tune trial; it runs a `Trainer`,
whose steps are `setup` (data, `Training`: model, optimizer, batches; resume state), `fit` (the epochs, in
one loop) and `test`. The search's cost probe times `Training`'s steps, so it times the step a trial takes.
Model selection uses validation only: the best epoch is the one with the highest monitored validation
metric, and test metrics are computed once, from that epoch's weights. What a run saves (checkpoint, resume
state) lives in `modsar.training.state`, the optimizer and its learning rate in `modsar.training.optim`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from modsar import devices
from modsar.config import Config
from modsar.data.batches import Batch, TrainBatches
from modsar.data.split import LeaveOneOut, TemporalSplit, make_split
from modsar.data.store import StoredDataset, dataset_identity, load_dataset, window
from modsar.data.views import viewed
from modsar.errors import ModsarError
from modsar.evaluation.ranking import Evaluator, model_scorer, popularity_scorer
from modsar.evaluation.rollouts import trial_rollouts
from modsar.memory import check_model
from modsar.model import registry
from modsar.model.interface import Recommender, encode
from modsar.model.losses import training_loss
from modsar.randomness import global_states, seed_everything, untouched
from modsar.training.feasible import validate_for_dataset, validate_split
from modsar.training.flops import epoch_flops, utilisation
from modsar.training.heap import bound_heap, roomy_heap
from modsar.training.optim import LearningRate, make_optimizer
from modsar.training.state import TrainState, save_checkpoint, save_resume_state

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
    passes: int = 0  # validation passes run
    steps_per_epoch: float = math.nan
    popularity_level: float = math.nan  # the monitored metric of a most-popular ranking on validation
    escape_steps: int | None = None  # steps at the first validation clearly above it (None: never left it)
    setup_s: float = math.nan  # from the trainer's start to its first step: data, split, model, evaluator
    checkpoint_s: float = 0.0  # writing checkpoints and resume states, in all


# a run has left the popularity level once validation reaches 1.25 x the most-popular ranking's value:
# plateaus measured on Video and MovieLens sat within 0.9-1.2 x of it, trained models at 2-6 x
PLATEAU_FACTOR = 1.25


def popularity_level(evaluator: Evaluator, split, device: torch.device, monitor: str) -> float:
    """The validation `monitor` of the most-popular ranking: the level a run must clear before its ranking
    means more than popularity (docs/training.md#plateau)."""
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


def resolve_device(name: str, option: str = "train.device") -> torch.device:
    """`name` (auto, cpu, cuda, cuda:N) on this machine; `option` is where it was given, for the message."""
    return devices.resolve(name, option)


def build_model(cfg: Config, num_items: int, num_users: int, max_len: int) -> Recommender:
    """The configured backbone from the registry: every one has the same interface, training, evaluation."""
    return registry.build(cfg, num_items, num_users, max_len)


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
    # a backbone's own extra term (DuoRec's contrastive views)
    regularizer = getattr(model, "regularizer", None)
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


def train_batches(split, cfg: Config, max_len: int) -> TrainBatches:
    """The training batches of `cfg`, seeded by it: every option named, grouped by the setting it comes from
    (the one place a config becomes batches: the trainer and the search's cost estimate both call it)."""
    return TrainBatches(
        split,
        cfg.task,
        max_len,
        cfg.data.batch_size,
        seed=cfg.seed,
        # data.*: how rows are cut and grouped
        padding_free=cfg.data.padding_free,
        batching=cfg.data.batching,
        samples=cfg.data.samples,
        # the objective: AE's masks, DuoRec's same-target partners
        mask_prob=cfg.mask_prob,
        partners=registry.needs_partners(cfg),  # DuoRec's same-target prefixes
        # model.*: stochastic shared embeddings, the times a time-biased model reads
        item_sse_prob=cfg.model.item_sse_prob,
        user_sse_prob=cfg.model.user_sse_prob,
        sse_style=cfg.model.sse_style,
        times=cfg.model.timed,
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


def train_step(
    model: Recommender,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    cfg: Config,
    per_batch: float,
    epoch: int = 0,
    rate: LearningRate | None = None,
) -> float:
    """One optimizer step on `batch`; its loss, read back. Raises TrainingDiverged on a NaN/inf loss."""
    loss = batch_loss(model, batch, cfg, per_batch)
    if not torch.isfinite(loss):
        raise TrainingDiverged(
            f"loss became {loss.item()} at epoch {epoch}; lower train.lr or add train.grad_clip"
        )
    optimizer_step(model, optimizer, loss, cfg, rate)
    return loss.item()


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
        total += train_step(model, optimizer, batches.make(rows).to(device), cfg, per_batch, epoch, rate)
        count += 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return total / max(count, 1)


@dataclass
class Training:
    """What an optimizer step needs, built once from a config: the model on its device, its optimizer and
    learning rate, and the seeded training batches. The trainer trains with it; the search's cost probe
    times its steps (`sample_steps`), so both take the same step."""

    cfg: Config
    model: Recommender
    optimizer: torch.optim.Optimizer
    batches: TrainBatches
    rate: LearningRate
    device: torch.device

    @classmethod
    def build(
        cls, cfg: Config, dataset: StoredDataset, split, max_len: int, device: torch.device
    ) -> Training:
        """In the order of the random draws a run makes: the model's weights from the seeded global
        generators, then the batches, which seed their own."""
        model = build_model(cfg, dataset.num_items, dataset.num_users, max_len).to(device)
        optimizer = make_optimizer(model, cfg)
        return cls(cfg, model, optimizer, train_batches(split, cfg, max_len), LearningRate.of(cfg), device)

    def epoch(self, epoch: int) -> float:
        """Train one pass over the batches; its mean loss."""
        return train_epoch(self.model, self.optimizer, self.batches, self.cfg, self.device, epoch, self.rate)

    def sample_steps(self, count: int) -> list[Callable[[], float]]:
        """`count` + 1 optimizer steps of one epoch's plan, their batches made, ready to take: a warm-up on
        the epoch's largest batch, then batches at evenly spaced quantiles of the epoch's batch sizes in
        positions (so the mean of their times is the epoch's mean step)."""
        plan = self.batches.epoch_plan()
        per_batch = self.batches.num_targets / max(len(plan), 1)
        by_size = sorted(plan, key=lambda rows: int(self.batches.row_lengths[rows].sum()))
        picks = [by_size[int((k + 0.5) * len(by_size) / count)] for k in range(count)]
        made = [self.batches.make(rows).to(self.device) for rows in [by_size[-1], *picks]]
        self.model.train()
        step = partial(
            train_step, self.model, self.optimizer, cfg=self.cfg, per_batch=per_batch, rate=self.rate
        )
        return [partial(step, batch) for batch in made]


class Trainer:
    """One trial: `setup` builds the run from its config, `fit` trains with early stopping, `test` scores the
    best epoch once; `outcome` is what the run reached, as a TrialResult.

    What one step leaves for the next lives here, on the trainer. The steps keep the order of every random
    draw (seed, model, batches, resume state, epochs), so one config and seed give one curve."""

    # set by setup(), read by fit(), test() and outcome()
    device: torch.device
    split: LeaveOneOut
    max_len: int
    training: Training  # the model, its optimizer and learning rate, the batches
    evaluator: Evaluator
    state: TrainState  # the curve, the best epoch and its weights, the times; what a resume restores
    popularity: float  # the monitored metric of a most-popular ranking on validation
    meta: dict[str, Any]  # written into each checkpoint: what `modsar evaluate` checks the data against
    first_epoch: int  # 1, or the epoch after a resumed run's last validation pass
    epoch: int  # the last epoch trained so far
    facts_of_run: dict[str, Any]  # what every report carries unchanged: split facts, sizes, FLOPs

    def __init__(
        self,
        cfg: Config,
        on_eval: EvalCallback | None = None,
        checkpoint_path: str | Path | None = None,
        progress: bool = True,
        resumable: bool = False,
    ) -> None:
        self.started = time.perf_counter()
        self.cfg, self.on_eval, self.progress, self.resumable = cfg, on_eval, progress, resumable
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path else None
        self.monitor = cfg.train.monitor_key

    def setup(
        self,
        dataset: StoredDataset | None = None,
        data_root: str | Path | None = None,
        resume: dict | None = None,
        device: torch.device | None = None,
    ) -> Trainer:
        """Seed, data and split, model and batches, evaluator, then the resume state, in this order: the
        model draws its weights from the seeded global generators, the batches seed their own, and a resume
        state overwrites both last. `device`: where the caller resolved train.device already. Returns the
        trainer, ready to fit."""
        setup_started = time.perf_counter()
        cfg = self.cfg
        bound_heap()
        if cfg.train.threads > 0:
            torch.set_num_threads(cfg.train.threads)
        self.device = device if device is not None else resolve_device(cfg.train.device)
        seed_everything(cfg.seed)
        dataset = viewed(dataset or load_dataset(cfg.dataset, data_root), cfg.data.view)
        self.split = make_split(cfg, dataset)
        self.max_len = max_len = window(cfg.data.max_len, dataset.default_max_len)
        validate_for_dataset(cfg, dataset.num_items, "config", self.split, max_len=max_len)
        validate_split(cfg, self.split)
        check_model(cfg, dataset.num_items, dataset.num_users, max_len)  # counted on the meta device first
        self.training = run = Training.build(cfg, dataset, self.split, max_len, self.device)
        if not len(run.batches):
            raise ModsarError(
                f"dataset '{cfg.dataset}' has no user with 2+ training items: nothing to train on"
            )
        self.evaluator = Evaluator.of(self.split, cfg, max_len, self.device)
        self.state = TrainState(run.optimizer, run.batches, self.device, run.rate)
        self.popularity = popularity_level(self.evaluator, self.split, self.device, self.monitor)
        self.meta = {
            "num_items": dataset.num_items,
            "num_users": dataset.num_users,
            "max_len": max_len,
            **dataset_identity(dataset.manifest),
        }
        self.first_epoch = 1
        if resume is not None:  # a retried or resumed search trial: continue bit for bit after its last pass
            self.first_epoch = self.state.load(resume, run.model) + 1
            self.started -= float(resume["wall_time_s"])
        self.epoch = self.first_epoch - 1
        output_flops, model_flops = epoch_flops(
            run.model, cfg, int(run.batches.row_lengths.sum()), run.batches.num_targets, dataset.num_items
        )
        self.facts_of_run = {
            "protocol": split_facts(self.split),
            "num_parameters": sum(p.numel() for p in run.model.parameters()),
            "output_flops": output_flops,
            "model_flops": model_flops,
        }
        self.state.times["setup_s"] += time.perf_counter() - setup_started  # after a resume's earlier ones
        return self

    def fit(self) -> None:
        """The epochs from `first_epoch` until patience, the step budget or `train.max_epochs`: train, and
        where a pass is due, validate, keep an improvement, report and decide. A TrainingDiverged leaves with
        what the run had reached (`partial`: the best epoch so far, no test)."""
        cfg, run, state = self.cfg, self.training, self.state
        # resumed at a pass that ended the run (its last epoch, its step budget, patience): nothing to train
        ended = self.first_epoch > 1 and self._stops(self.first_epoch - 1)
        bar = self._progress_bar(ended)
        run.model.train()
        try:
            for epoch in bar:
                self.epoch = epoch
                tick = time.perf_counter()
                loss = run.epoch(epoch)
                state.epoch_times.append(time.perf_counter() - tick)
                if epoch % cfg.train.eval_every and epoch != cfg.train.max_epochs:  # no pass due
                    bar.set_postfix(loss=f"{loss:.4f}")
                    continue
                if not weights_finite(run.model):  # the last step can turn weights NaN after a finite loss
                    raise TrainingDiverged(
                        f"weights became NaN or infinite in epoch {epoch}; lower train.lr or set "
                        "train.grad_clip"
                    )
                training_rng = global_states(self.device)  # the next epoch continues from here, as a resume
                # validate, keep and report: nothing here may shift the training stream (modsar.randomness)
                with untouched(self.device):
                    metrics = self._validate(epoch)
                    improved = state.record(run.model, epoch, metrics, self.monitor, loss)
                    self._checkpoint(epoch, metrics, improved, training_rng)
                    last = self._stops(epoch)
                    self._report(epoch, metrics, improved, loss, last, bar)
                if last:
                    break
        except TrainingDiverged as exc:
            exc.partial = self.outcome({})
            raise
        finally:
            bar.close()
        if ended and self.on_eval is not None:  # say it ended, with its last pass again
            last_pass = state.history[-1]
            metrics = {k.removeprefix("valid."): v for k, v in last_pass.items() if k.startswith("valid.")}
            self.on_eval(last_pass["epoch"], metrics, False, None, self.facts(True, last_pass["loss"]))

    def _progress_bar(self, ended: bool) -> tqdm:
        """The epochs still to train (none where the run `ended`), as a progress bar."""
        cfg = self.cfg
        return tqdm(
            range(self.first_epoch, cfg.train.max_epochs + 1 if not ended else self.first_epoch),
            desc=f"{cfg.task.label} {cfg.dataset}",
            unit="epoch",
            disable=not self.progress,
            dynamic_ncols=True,
            initial=self.first_epoch - 1,
            total=cfg.train.max_epochs,
        )

    def _report(
        self, epoch: int, metrics: dict[str, float], improved: bool, loss: float, last: bool, bar: tqdm
    ) -> None:
        """A validation pass on the progress bar, and to `on_eval` (a search reports it to Tune)."""
        state = self.state
        bar.set_postfix(
            loss=f"{loss:.4f}",
            **{
                self.cfg.train.monitor: f"{metrics[self.monitor]:.4f}",
                "best": f"{state.best_value:.4f}@{state.best_epoch}",
            },
        )
        if self.on_eval is not None:  # a resumable run's folder changes at every pass: its resume state
            checkpoint = self.checkpoint_path if improved or self.resumable else None
            self.on_eval(epoch, metrics, improved, checkpoint, self.facts(last, loss))

    def _validate(self, epoch: int) -> dict[str, float]:
        """The validation metrics of the model as it stands (in eval mode, back to training mode after),
        timed; a metric that is not finite ends the run."""
        model = self.training.model
        tick = time.perf_counter()
        model.eval()
        with roomy_heap():
            metrics = self.evaluator(model_scorer(model), "valid")
        model.train()
        self.state.eval_times.append(time.perf_counter() - tick)
        broken = sorted(k for k, v in metrics.items() if not math.isfinite(v))
        if broken:
            raise TrainingDiverged(f"validation {', '.join(broken)} not finite at epoch {epoch}")
        return metrics

    def _checkpoint(
        self, epoch: int, metrics: dict[str, float], improved: bool, training_rng: dict[str, Any]
    ) -> None:
        """Save a new best epoch (where the run has a checkpoint path) and, if resumable, the resume state of
        every pass."""
        if not self.checkpoint_path or not (improved or self.resumable):
            return
        tick = time.perf_counter()
        if improved:
            meta = {**self.meta, "epoch": epoch, "valid": metrics}
            save_checkpoint(self.checkpoint_path, self.training.model, self.cfg, meta)
        if self.resumable:
            elapsed = time.perf_counter() - self.started
            save_resume_state(
                self.checkpoint_path, self.state, elapsed, training_rng, self.training.model, epoch
            )
        self.state.times["checkpoint_s"] += time.perf_counter() - tick

    def _stops(self, epoch: int) -> bool:
        """Whether training ends after this validation pass: `train.patience` passes without an improvement
        (never before `train.min_steps` optimizer steps), `train.max_steps` reached, or the last epoch."""
        train = self.cfg.train
        patient = self.training.rate.steps < train.min_steps  # no stop on a plateau before min_steps
        stale = bool(train.patience and self.state.stale >= train.patience and not patient)
        return stale or self._spent(self.training.rate.steps) or epoch == train.max_epochs

    def _spent(self, steps: int) -> bool:
        """Whether `steps` optimizer steps use up `train.max_steps` (0: no step budget)."""
        return bool(self.cfg.train.max_steps and steps >= self.cfg.train.max_steps)

    def test(self) -> TrialResult:
        """Test the best epoch's weights once, and roll out from them (eval.generate_steps)."""
        if self.state.best_weights is None:  # every run validates at its last epoch, so this cannot happen
            raise RuntimeError("no validation pass ran: there is no best epoch to test")
        self.training.model.load_state_dict(self.state.best_weights)
        self.training.model.eval()
        with roomy_heap(), untouched(self.device):
            test = self.evaluator(model_scorer(self.training.model), "test")
            generation = trial_rollouts(self.training.model, self.split, self.cfg, self.max_len, self.device)
        return self.outcome(test, generation)

    def facts(self, last: bool, loss: float) -> dict[str, Any]:
        """What `on_eval` gets besides the metrics: whether this pass is the last, times, speed, progress."""
        return {
            "last": last,
            "epoch_time_s": float(np.mean(self.state.epoch_times)),
            "num_parameters": self.facts_of_run["num_parameters"],
            "eval_time_s": float(np.mean(self.state.eval_times)),
            "loss": loss,
            **self.speed(),
            **self.facts_of_run["protocol"],
            **self.advance(),
            **self.state.times,
        }

    def advance(self) -> dict[str, Any]:
        """Steps taken, and whether validation has left the popularity level (PLATEAU_FACTOR)."""
        epochs_done = len(self.state.epoch_times)  # restored with the rest on a resume
        steps = self.training.rate.steps
        return {
            "steps": steps,
            "passes": len(self.state.eval_times),  # validation passes (restored on a resume, as the times)
            "steps_per_epoch": steps / epochs_done if epochs_done else math.nan,
            "popularity_level": self.popularity,
            "escape_steps": escape_steps(self.state.history, self.monitor, self.popularity),
        }

    def speed(self) -> dict[str, Any]:
        """Model GFLOP per epoch, achieved GFLOP/s and MFU over the epochs so far."""
        model_flops, output_flops = self.facts_of_run["model_flops"], self.facts_of_run["output_flops"]
        flops = {"epoch_gflop": model_flops / 1e9, "output_gflop": output_flops / 1e9}
        if not self.state.epoch_times:
            return {**flops, "gflops": math.nan, "mfu": math.nan}
        seconds = float(np.mean(self.state.epoch_times))
        return {
            **flops,
            "gflops": model_flops / seconds / 1e9,
            "mfu": utilisation(model_flops, seconds, self.device, output_dtype(self.cfg)),
        }

    def outcome(self, test: dict[str, float], generation: dict[str, float] | None = None) -> TrialResult:
        """The run so far as a TrialResult (`test` empty where the best epoch was not tested)."""
        state = self.state
        return TrialResult(
            **self.speed(),
            **self.advance(),
            setup_s=self.state.times["setup_s"],
            checkpoint_s=self.state.times["checkpoint_s"],
            protocol=self.facts_of_run["protocol"],
            generation=generation or {},
            valid=state.best_valid,
            test=test,
            best_epoch=state.best_epoch,
            epochs_run=self.epoch,
            wall_time_s=time.perf_counter() - self.started,
            epoch_time_s=float(np.mean(state.epoch_times)) if state.epoch_times else math.nan,
            eval_time_s=float(np.mean(state.eval_times)) if state.eval_times else math.nan,
            device=str(self.device),
            num_parameters=self.facts_of_run["num_parameters"],
            history=state.history,
            checkpoint=str(self.checkpoint_path) if self.checkpoint_path else None,
            monitor=self.monitor,
        )


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
    device: torch.device | None = None,
) -> TrialResult:
    """Train `cfg`, select the best epoch on validation, and (unless told not to) test that epoch.

    `on_eval(epoch, valid_metrics, improved, checkpoint, facts)` (EvalCallback) runs after every validation
    pass; a search reports from it. Searches pass evaluate_test=False: only the selected trials are ever
    tested. `resumable` also writes RESUME_FILE (weights, optimizer, RNG states, history) beside the best
    checkpoint at every validation pass; `resume` (from load_resume_state) continues from there exactly as
    the interrupted run would have.
    `device`: train.device as the caller resolved it (resolved here where it is not given).
    """
    trainer = Trainer(cfg, on_eval, checkpoint_path, progress, resumable).setup(
        dataset, data_root, resume, device
    )
    trainer.fit()
    return trainer.test() if evaluate_test else trainer.outcome({})
