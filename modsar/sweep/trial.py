"""The Ray Tune function trainable: one trial is one `training.run_trial`, run inside a Ray worker."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from ray import tune

from modsar.sweep.plan import Plan, sampled_values, trial_config
from modsar.sweep.spaces import SearchSpace


def trainable(
    config: dict[str, Any],
    *,
    base: dict,
    space: SearchSpace,
    data_dir: str,
    test: bool = False,
    plugins: tuple[str, ...] = (),
) -> None:
    import ray
    import torch

    from modsar.model import registry
    from modsar.records.rows import PROGRESS_FACTS, PROTOCOL_FACTS, SPEED_FACTS
    from modsar.training.trainer import TrainingDiverged, load_resume_state, resolve_device, run_trial

    registry.load_plugins(list(plugins))  # the driver's plugin backbones, registered in this worker too
    cfg = trial_config(base, space, sampled_values(config))
    assigned = ray.get_runtime_context().get_assigned_resources()
    torch.set_num_threads(max(1, int(assigned.get("CPU", 1))))
    if assigned.get("GPU", 0) > 0:
        cfg.train.device = "cuda"  # Ray restricts CUDA_VISIBLE_DEVICES to the trial's GPU
    monitor = cfg.train.monitor_key
    node = {"host": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id()}
    started = time.perf_counter()
    best: dict[str, Any] = {}
    folder = Path(tempfile.mkdtemp(prefix="modsar-trial-"))
    resume, restored = None, {}
    if (checkpoint := tune.get_checkpoint()) is not None:  # a resumed search or a retried trial
        with checkpoint.as_directory() as directory:
            resume = load_resume_state(directory)
    if resume is not None:  # run_trial continues after the checkpointed epoch; the reports continue with it
        best.update({f"best.{k}": v for k, v in resume["valid"].items()}, best_epoch=resume["epoch"])
        started -= resume["wall_time_s"]
        # this driver may not have seen the earlier reports (a killed one did), but the row's curve needs them
        restored = {
            "restored_curve": json.dumps([[h["epoch"], h[f"valid.{monitor}"]] for h in resume["history"]])
        }

    def on_eval(epoch: int, metrics: dict, improved: bool, checkpoint: Path | None, facts: dict) -> None:
        if improved:
            best.clear()
            best.update({f"best.{k}": v for k, v in metrics.items()}, best_epoch=epoch)
        report = {
            "epoch": epoch,
            **{f"valid.{k}": v for k, v in metrics.items()},
            **best,
            **restored,
            "trial_done": facts["last"],
            "epoch_time_s": facts["epoch_time_s"],
            "eval_time_s": facts["eval_time_s"],
            "loss": facts["loss"],
            **{k: facts[k] for k in (*SPEED_FACTS, *PROTOCOL_FACTS, *PROGRESS_FACTS) if k in facts},
            "num_parameters": facts["num_parameters"],
            "torch_threads": torch.get_num_threads(),
            "wall_time_s": time.perf_counter() - started,
            "monitor": monitor,
            "device": str(device),
            **node,
        }
        if checkpoint is not None:
            tune.report(report, checkpoint=tune.Checkpoint.from_directory(str(checkpoint.parent)))
        else:
            tune.report(report)
        restored.clear()  # the first report after a resume carries the earlier curve; once is enough

    device = resolve_device(cfg.train.device)
    try:  # Tune copies each reported checkpoint into storage, so the local folder is scratch
        result = run_trial(
            cfg,
            on_eval=on_eval,
            checkpoint_path=folder / "best.pt",
            progress=False,
            data_root=data_dir,
            evaluate_test=test,
            resumable=True,
            resume=resume,
        )
    except TrainingDiverged as exc:
        # A diverged trial ends normally (Tune would retry an error) with one last report naming the reason.
        # Tune needs the metric in it: the best value so far, or, if no validation ran, 0.0, which is what
        # the evaluator gives a model whose scores are all NaN. The row records no valid.* in that case.
        floor = {} if best else {f"best.{monitor}": 0.0}
        steps = {"steps": exc.partial.steps} if exc.partial else {}  # a scheduler in steps reads it
        tune.report(
            {
                "epoch": exc.partial.epochs_run if exc.partial else 0,
                **best,
                **floor,
                **steps,
                "diverged": str(exc),
                "trial_done": True,
                "monitor": monitor,
                **node,
            }
        )
        return
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if test:  # seed re-runs of selected configs (no scheduler): one more report carries the test metrics
        tune.report(
            {
                "epoch": result.epochs_run,
                **best,
                "trial_done": True,
                "monitor": monitor,
                **node,
                "num_parameters": result.num_parameters,
                **{f"test.{k}": v for k, v in result.test.items()},
                **{f"generate.{k}": v for k, v in result.generation.items()},
            }
        )


def make_trainable(plan: Plan, test: bool = False):
    from modsar.model import registry

    return tune.with_resources(
        tune.with_parameters(
            trainable,
            base=plan.base,
            space=plan.space,
            data_dir=plan.data_root,
            test=test,
            plugins=tuple(registry.loaded_plugins()),
        ),
        {"cpu": plan.request.cpus_per_trial, "gpu": plan.request.gpus_per_trial},
    )
