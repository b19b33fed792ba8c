"""The Ray Tune function trainable: one trial is one `training.run_trial`, run inside a Ray worker."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray import tune

from modsar.sweep.carry_on import point_key
from modsar.sweep.halving import halving_rungs, halving_time
from modsar.sweep.pickled import pickled
from modsar.sweep.plan import Plan, sampled_values, trial_config
from modsar.sweep.spaces import SearchSpace

# A trial's folder goes to Tune at each improvement and, between them, at most this often: each checkpoint is
# a copy into storage, and every CheckpointConfig.num_to_keep of a trial's make Tune save the experiment's
# state. An interrupted trial loses the passes since its folder last went to Tune: at most about this long,
# or one pass where a pass takes longer (its resume state is written at every pass).
CHECKPOINT_EVERY_S = 120.0

if TYPE_CHECKING:
    from modsar.config import Config
    from modsar.training.trainer import TrainingDiverged, TrialResult


@pickled
def trainable(
    config: dict[str, Any],
    *,
    base: dict,
    space: SearchSpace,
    data_dir: str,
    test: bool = False,
    plugins: tuple[str, ...] = (),
    rungs: tuple[int, ...] = (),
    time_attr: str = "steps",
    replays: dict[str, list[dict]] | None = None,
) -> None:
    """One trial of a search: the sampled point trained by `run_trial` on the worker's share of the node,
    every validation pass reported to Tune (with the trial's folder, best.pt and resume.pt, at an improvement,
    at the first report past each of the scheduler's `rungs` (where successive halving pauses it) and every
    CHECKPOINT_EVERY_S), continued from the trial's last checkpoint when Tune restores, retries or unpauses
    it. A point in `replays` (a direction going on from its rows: carry_on) first makes its row's reports
    again without training, and trains (those passes again, unreported: one curve) only where it goes on."""
    from modsar.model import registry
    from modsar.records.rows import PROGRESS_FACTS, PROTOCOL_FACTS, SPEED_FACTS, TIME_FACTS
    from modsar.training.trainer import TrainingDiverged, resolve_device, run_trial

    registry.load_plugins(list(plugins))  # the driver's plugin backbones, registered in this worker too
    cfg = trial_config(base, space, sampled_values(config))
    _use_assigned_resources(cfg)
    facts = (*SPEED_FACTS, *PROTOCOL_FACTS, *PROGRESS_FACTS, *TIME_FACTS)
    reports = _TrialReports(cfg.train.monitor_key, facts, _node_facts(), json.dumps(cfg.to_dict()))
    reports.rungs, reports.time_attr = rungs, time_attr
    folder = Path(tempfile.mkdtemp(prefix="modsar-trial-"))
    resume = restore_into(tune.get_checkpoint(), folder)  # a resumed search or a retried trial
    if resume is not None:  # run_trial continues after the checkpointed epoch; the reports continue with it
        reports.resume_from(resume)
    reports.repeat_rung_report(folder)  # restored from a rung's checkpoint (a replay's holds no weights)
    replay = (replays or {}).get(point_key(sampled_values(config)))
    if replay is not None and resume is None and reports.replay(replay, folder):
        shutil.rmtree(folder, ignore_errors=True)
        return  # it ended where its row ended
    device = resolve_device(cfg.train.device)  # once: the trainer runs on it, every report names it
    reports.device = str(device)
    try:  # Tune copies each reported checkpoint into storage, so the local folder is scratch
        result = run_trial(
            cfg,
            on_eval=reports.on_eval,
            checkpoint_path=folder / "best.pt",
            progress=False,
            data_root=data_dir,
            evaluate_test=test,
            resumable=True,
            resume=resume,
            device=device,
        )
    except TrainingDiverged as exc:
        reports.diverged(exc)
        return
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if test:  # seed re-runs of selected configs (no scheduler): one more report carries the test metrics
        reports.tested(result)


REPORT_FILE = "report.json"  # beside best.pt and resume.pt: the report its checkpoint went to Tune with


def _write_report(folder: Path, report: dict, at_rung: bool) -> None:
    """The report a checkpoint goes to Tune with, in its folder (JSON: the report's values are plain)."""
    text = json.dumps({"report": report, "at_rung": at_rung}, default=float)
    (folder / REPORT_FILE).write_text(text)


def _read_report(folder: Path) -> dict | None:
    """What _write_report left in a restored checkpoint's folder, or None (an older checkpoint: none)."""
    try:
        return json.loads((folder / REPORT_FILE).read_text())
    except (OSError, ValueError):
        return None


def restore_into(checkpoint: tune.Checkpoint | None, folder: Path) -> dict | None:
    """The resume state of the checkpoint Tune restores a trial from (None: a fresh start), its files copied
    into the trial's own `folder` first: a pass after the resume that does not improve reports that folder
    too, and it must hold the best epoch's best.pt."""
    from modsar.training.state import load_resume_state

    if checkpoint is None:
        return None
    with checkpoint.as_directory() as directory:
        shutil.copytree(directory, folder, dirs_exist_ok=True)
    return load_resume_state(folder)


def _use_assigned_resources(cfg: Config) -> None:
    """Torch threads as many as the CPUs Ray gave the trial, and the GPU where it gave one (Ray restricts
    CUDA_VISIBLE_DEVICES to the trial's GPU), so trials sharing a node do not oversubscribe it."""
    import ray
    import torch

    assigned = ray.get_runtime_context().get_assigned_resources()
    torch.set_num_threads(max(1, int(assigned.get("CPU", 1))))
    if assigned.get("GPU", 0) > 0:
        cfg.train.device = "cuda"


def _node_facts() -> dict[str, str]:
    """Where the trial runs, carried by every report so the row says which machine measured it."""
    import ray

    from modsar.devices import cpu_identity

    node = ray.get_runtime_context().get_node_id()
    return {"host": socket.gethostname(), "cpu": cpu_identity(), "node_id": node}


@dataclass
class _TrialReports:
    """What a trial tells Tune: the state its reports share (the best validation so far, the wall clock,
    the earlier curve of a resumed trial) and the report of each validation pass, divergence or test."""

    monitor: str
    facts: tuple[str, ...]  # the trainer's facts a report carries where the trainer gives them
    node: dict[str, str]  # where it runs
    # the config this worker runs (its device set), for the row: in its first report after each (re)start
    ran_config: str = ""
    started: float = field(default_factory=time.perf_counter)
    best: dict[str, Any] = field(default_factory=dict)
    restored: dict[str, Any] = field(default_factory=dict)
    device: str = ""
    report_s: float = 0.0  # in tune.report before this report: Tune copying checkpoints into storage
    checkpointed: float = field(default_factory=time.perf_counter)  # when the folder last went to Tune
    rungs: tuple[int, ...] = ()  # successive halving's rungs: a pass past one goes to Tune with its folder
    time_attr: str = "steps"  # what the rungs count: a fact the trainer reports (steps or passes)
    time: int = 0  # the trial's time in that unit at its last report
    replayed_epochs: int = 0  # epochs whose reports a replay made: trained again unreported (one curve)

    def _ran(self) -> dict[str, str]:
        """The config this worker runs, once: the driver keeps the last value a key was reported with."""
        ran, self.ran_config = self.ran_config, ""
        return {"ran_config": ran} if ran else {}

    def resume_from(self, resume: dict) -> None:
        """Continue a restored trial's best value, clock and curve where its checkpoint left them."""
        self.best.update({f"best.{k}": v for k, v in resume["valid"].items()}, best_epoch=resume["epoch"])
        self.started -= resume["wall_time_s"]
        # this driver may not have seen the earlier reports (a killed one did), but the row's curve needs them
        self.restored = {
            "restored_curve": json.dumps(
                [[h["epoch"], h[f"valid.{self.monitor}"]] for h in resume["history"]]
            ),
            "restored_steps": json.dumps(
                [[h["epoch"], h["steps"]] for h in resume["history"] if "steps" in h]
            ),
        }

    def on_eval(
        self, epoch: int, metrics: dict, improved: bool, checkpoint: Path | None, facts: dict
    ) -> None:
        """run_trial's callback after each validation pass: one report (the scheduler stops trials on these),
        with the trial's folder at an improvement, at a rung and every CHECKPOINT_EVERY_S."""
        import torch

        if improved:
            self.best.clear()
            self.best.update({f"best.{k}": v for k, v in metrics.items()}, best_epoch=epoch)
        if epoch <= self.replayed_epochs:  # reported by the replay: trained again to go on from here
            self.time = int(facts.get(self.time_attr, 0))
            return
        report = {
            "epoch": epoch,
            **{f"valid.{k}": v for k, v in metrics.items()},
            **self.best,
            **self.restored,
            "trial_done": facts["last"],
            "epoch_time_s": facts["epoch_time_s"],
            "eval_time_s": facts["eval_time_s"],
            "loss": facts["loss"],
            **{k: facts[k] for k in self.facts if k in facts},
            "num_parameters": facts["num_parameters"],
            "torch_threads": torch.get_num_threads(),
            "wall_time_s": time.perf_counter() - self.started,
            "report_s": self.report_s,
            "monitor": self.monitor,
            "device": self.device,
            **self.node,
            **self._ran(),
        }
        before, self.time = self.time, int(facts.get(self.time_attr, 0))
        at_rung = any(before < rung <= self.time for rung in self.rungs)  # successive halving pauses it here
        if at_rung:  # its row is written there (ResultRows)
            report["at_rung"] = True
        tick = time.perf_counter()
        if checkpoint is not None and (improved or at_rung or tick - self.checkpointed >= CHECKPOINT_EVERY_S):
            if self.rungs:  # what a resume from this checkpoint repeats, if it was taken at a rung
                _write_report(checkpoint.parent, report, at_rung)
            tune.report(report, checkpoint=tune.Checkpoint.from_directory(str(checkpoint.parent)))
            self.checkpointed = tick
        else:
            tune.report(report)
        self.report_s += time.perf_counter() - tick
        self.restored.clear()  # the first report after a resume carries the earlier curve; once is enough

    def repeat_rung_report(self, folder: Path) -> None:
        """A trial resumed from a checkpoint taken at a rung report repeats that report (marked `repeat`)
        before it trains on: successive halving decides on it again, so a trial that was waiting there when
        the search stopped waits again instead of training a pass past its rung, and its row gets the facts
        of its last pass. A promoted trial's repeat is below its next rung and changes nothing."""
        saved = _read_report(folder)
        if saved is None:
            return
        self.time = int(saved["report"].get(self.time_attr, 0))  # where the rungs are counted from
        if not saved["at_rung"]:
            return
        report = {**saved["report"], **self.restored, "repeat": True, **self.node, **self._ran()}
        tune.report(report, checkpoint=tune.Checkpoint.from_directory(str(folder)))
        self.checkpointed = time.perf_counter()
        self.restored.clear()

    def replay(self, passes: list[dict], folder: Path) -> bool:
        """Make again the reports of a trial's row (carry_on.replays_of) after those an earlier process of
        this trial made (its checkpoint's report), each at a rung with a checkpoint that holds no weights
        but that report (`repeat_rung_report` makes it again on a restore); returns whether the trial ended
        there. Training goes on past them: run_trial trains the replayed epochs again, unreported."""
        saved = (_read_report(folder) or {}).get("report", {})
        done = int(saved.get("passes", 0)) if saved.get("replayed") else 0
        if done:  # restored from a replay's checkpoint (repeat_rung_report made its report again)
            self.best = {k: v for k, v in saved.items() if k.startswith("best") and v is not None}
        for report in passes[done:]:
            self.best = {k: v for k, v in report.items() if k.startswith("best")}
            before, self.time = self.time, int(report.get(self.time_attr, 0))
            at_rung = any(before < rung <= self.time for rung in self.rungs)
            # the row's host and CPU, where it ran: never this machine's CPU (a row that did not say: unknown)
            node = {k: v for k, v in self.node.items() if k != "cpu"}
            full = {**node, **report, "replayed": True, **self._ran()}
            if at_rung:
                full["at_rung"] = True
                _write_report(folder, full, at_rung)
                tune.report(full, checkpoint=tune.Checkpoint.from_directory(str(folder)))
            else:
                tune.report(full)
        self.replayed_epochs = int(passes[-1]["epoch"])
        return bool(passes[-1].get("trial_done"))

    def diverged(self, exc: TrainingDiverged) -> None:
        """A diverged trial ends normally (Tune would retry an error) with one last report naming the reason.
        Tune needs the metric in it: the best value so far, or, if no validation ran, 0.0, which is what the
        evaluator gives a model whose scores are all NaN. The row records no valid.* in that case."""
        floor = {} if self.best else {f"best.{self.monitor}": 0.0}
        steps = {"steps": exc.partial.steps} if exc.partial else {}  # a scheduler in steps reads it
        tune.report(
            {
                "epoch": exc.partial.epochs_run if exc.partial else 0,
                **self.best,
                **floor,
                **steps,
                "diverged": str(exc),
                "trial_done": True,
                "monitor": self.monitor,
                **self.restored,  # diverging at the first pass after a resume: the earlier curve, still
                **self.node,
                **self._ran(),
            }
        )

    def tested(self, result: TrialResult) -> None:
        """The last report of a seed re-run: the test (and generation) metrics of the finished trial."""
        tune.report(
            {
                "epoch": result.epochs_run,
                **self.best,
                "trial_done": True,
                "monitor": self.monitor,
                **self.restored,
                **self.node,
                **self._ran(),
                "num_parameters": result.num_parameters,
                **{f"test.{k}": v for k, v in result.test.items()},
                **{f"generate.{k}": v for k, v in result.generation.items()},
            }
        )


def make_trainable(plan: Plan, test: bool = False, replays: dict[str, list[dict]] | None = None):
    """`trainable` bound to the plan's base config, space and data, with the plan's resources per trial:
    what Tune pickles and ships to every worker. The base goes as the plain tree `Config.to_dict` writes, not
    as a Config: a worker must load the driver's plugins before a config naming a plugin's backbone (or
    holding its settings section, a class of the plugin's module) can exist there, and it builds the trial's
    Config from the tree and the point in one validation (`trial_config`)."""
    from modsar.model import registry

    return tune.with_resources(
        tune.with_parameters(
            trainable,
            base=plan.base,
            space=plan.space,
            data_dir=plan.data_root,
            test=test,
            plugins=tuple(registry.loaded_plugins()),
            rungs=() if test else halving_rungs(plan),  # seed re-runs have no scheduler
            time_attr=halving_time(plan),
            replays=replays,
        ),
        {"cpu": plan.request.cpus_per_trial, "gpu": plan.request.gpus_per_trial},
    )
