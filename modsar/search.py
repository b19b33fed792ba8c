"""`modsar search`: a design space searched by Ray Tune, every trial one Parquet row.

Each trial runs `train.run_trial` (the same function as `modsar train`) inside a Ray Tune function
trainable and reports validation metrics at every evaluation, with a checkpoint whenever the monitored
metric improves. ASHA stops weak trials early; grid enumerates the conditional grid exactly; random and
Optuna sample through Ray's OptunaSearch (RandomSampler / TPE, both seeded). A driver-side callback
writes one row per trial as it ends (finished, stopped by ASHA, or error); after the search the best AE
and best AR trial (best validation epoch) are tested from their best checkpoints and marked selected.

Layout: ``<results>/<experiment>/{search.json, trials/*.parquet, ray/ (Tune state and checkpoints)}``.
A killed driver is resumed with ``--resume`` (Tuner.restore): unfinished trials continue from their last
checkpoint (the latest improvement) with the optimizer and RNG states saved beside it, so results equal an
uninterrupted run (tested),
errored trials are retried, finished rows are kept as they are.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.fs as pafs
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import ConcurrencyLimiter

from modsar.config import Config, apply_overrides, parse_override
from modsar.data.store import data_root, load_dataset
from modsar.errors import ModsarError
from modsar.results import differing_keys, read_rows, remove_partial_rows, result_row, write_row
from modsar.space_check import SpaceCheck, check_space, dataset_sizes
from modsar.spaces import SearchSpace, load_space

RAY_DIR = "ray"


@dataclass
class SearchRequest:
    space: str
    dataset: str  # "" only to plan without data (`modsar spaces --check`)
    experiment: str | None = None
    results: str = "results"
    search: str | None = None  # grid | random | optuna (default: the space's budget.search)
    num_samples: int | None = None
    max_epochs: int | None = None
    time_budget_s: float | None = None
    max_t: int | None = None
    grace_period: int | None = None
    reduction_factor: int | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_concurrent: int | None = None
    max_failures: int = 0
    seed: int = 0
    seeds: int = 0
    overrides: list[str] = field(default_factory=list)
    address: str | None = None
    data_dir: str | None = None
    quiet: bool = False
    resume: bool = False
    overwrite: bool = False
    dashboard: bool = False

    @property
    def experiment_name(self) -> str:
        return self.experiment or f"{Path(self.space).stem}-{self.dataset}"


# ----------------------------------------------------------------------------------------------------------
# The plan: everything derived from the request, checked before Ray starts or anything is written.


@dataclass
class Plan:
    request: SearchRequest
    space: SearchSpace
    base: dict[str, Any]  # full base config (space base + CLI overrides), nested
    search: str
    num_samples: int
    max_t: int
    grace_period: int
    reduction_factor: int
    monitor: str
    root: str  # experiment folder (path or URI)
    data_root: str
    manifest: dict  # the prepared dataset's manifest (recorded in every row)

    def check(self) -> SpaceCheck:
        """Every configuration this search can run, validated (with the dataset's sizes when there is one)."""
        sizes = dataset_sizes(self.manifest) if self.manifest else None
        return check_space(self.space, self.base, self.search, self.num_samples, sizes, self.request.dataset or None)


def make_plan(req: SearchRequest, check: bool = True) -> Plan:
    """Everything the search will do, derived and checked before Ray starts: with `check`, every configuration
    of the space is validated against the dataset (modsar.space_check) and all problems are raised at once.
    An empty `req.dataset` plans without data (`modsar spaces NAME --check` without --dataset)."""
    space = load_space(req.space)
    overrides = dict(parse_override(o) for o in req.overrides)
    if req.dataset:
        overrides["dataset"] = req.dataset
    budget = space.budget
    if req.max_epochs is not None:
        overrides["train.max_epochs"] = req.max_epochs
    overrides.setdefault("train.max_epochs", budget.get("max_epochs", Config().train.max_epochs))
    overrides.setdefault("train.eval_every", budget.get("eval_every", 1))
    overrides.setdefault("seed", req.seed)
    cfg = space.base_config(overrides)
    search = req.search or budget.get("search", "grid")
    if search not in ("grid", "random", "optuna"):
        raise ModsarError(f"--search must be grid, random or optuna; got {search!r}")
    default_samples = budget.get("num_samples") if search == budget.get("search", "grid") else None
    if req.num_samples is not None and req.num_samples < 1:
        raise ModsarError(f"--num-samples must be >= 1; got {req.num_samples}")
    num_samples = req.num_samples or default_samples or (1 if search == "grid" else 16)
    evals = max(1, math.ceil(cfg.train.max_epochs / cfg.train.eval_every))
    max_t = req.max_t or min(space.scheduler.get("max_t", evals), evals)
    grace = min(req.grace_period or space.scheduler.get("grace_period", 1), max_t)
    factor = req.reduction_factor or space.scheduler.get("reduction_factor", 2)
    if factor < 2:
        raise ModsarError(f"--reduction-factor must be >= 2; got {factor}")
    if req.cpus_per_trial <= 0:
        raise ModsarError(f"--cpus-per-trial must be > 0; got {req.cpus_per_trial}")
    if req.gpus_per_trial < 0 or (req.gpus_per_trial > 1 and req.gpus_per_trial != int(req.gpus_per_trial)):
        raise ModsarError(f"--gpus-per-trial must be a fraction in (0, 1] or a whole number; got {req.gpus_per_trial}")
    # unknown or unprepared dataset: refused here
    manifest = load_dataset(req.dataset, req.data_dir).manifest if req.dataset else {}
    plan = Plan(req, space, cfg.to_dict(), search, num_samples, max_t, grace, factor, cfg.train.monitor_key,
                req.results.rstrip("/") + "/" + req.experiment_name, str(data_root(req.data_dir).resolve()), manifest)
    if check:
        plan.check().raise_if_invalid()
    return plan


def trial_config(base: dict[str, Any], space: SearchSpace, sampled: dict[str, Any]) -> Config:
    cfg = Config.from_dict(base)
    return apply_overrides(cfg, space.expand(sampled), "trial")


def _sampled(config: dict[str, Any]) -> dict[str, Any]:
    """Tune's trial config -> the sampled dotted keys (grid wraps them under 'point')."""
    return dict(config.get("point", config))


# ----------------------------------------------------------------------------------------------------------
# The trainable: runs inside a Ray worker.


def trainable(config: dict[str, Any], *, base: dict, space: SearchSpace, data_dir: str, test: bool = False,
              plugins: tuple[str, ...] = ()) -> None:
    import ray
    import torch

    from modsar.model import registry
    from modsar.train import TrainingDiverged, load_resume_state, resolve_device, run_trial

    registry.load_plugins(list(plugins))  # the driver's plugin backbones, registered in this worker too
    cfg = trial_config(base, space, _sampled(config))
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
        restored = {"restored_curve": json.dumps([[h["epoch"], h[f"valid.{monitor}"]] for h in resume["history"]])}

    def on_eval(epoch: int, metrics: dict, improved: bool, checkpoint: Path | None, facts: dict) -> None:
        if improved:
            best.clear()
            best.update({f"best.{k}": v for k, v in metrics.items()}, best_epoch=epoch)
        report = {"epoch": epoch, **{f"valid.{k}": v for k, v in metrics.items()}, **best, **restored,
                  "trial_done": facts["last"], "epoch_time_s": facts["epoch_time_s"],
                  "eval_time_s": facts["eval_time_s"], "loss": facts["loss"],
                  "num_parameters": facts["num_parameters"], "torch_threads": torch.get_num_threads(),
                  "wall_time_s": time.perf_counter() - started, "monitor": monitor, "device": str(device), **node}
        if checkpoint is not None:
            tune.report(report, checkpoint=tune.Checkpoint.from_directory(str(checkpoint.parent)))
        else:
            tune.report(report)
        restored.clear()  # the first report after a resume carries the earlier curve; once is enough

    device = resolve_device(cfg.train.device)
    try:  # Tune copies each reported checkpoint into storage, so the local folder is scratch
        result = run_trial(cfg, on_eval=on_eval, checkpoint_path=folder / "best.pt", progress=False,
                           data_root=data_dir, evaluate_test=test, resumable=True, resume=resume)
    except TrainingDiverged as exc:
        # A diverged trial ends normally (Tune would retry an error) with one last report naming the reason.
        # Tune needs the metric in it: the best value so far, or, if no validation ran, 0.0, which is what
        # the evaluator gives a model whose scores are all NaN. The row records no valid.* in that case.
        floor = {} if best else {f"best.{monitor}": 0.0}
        tune.report({"epoch": exc.partial.epochs_run if exc.partial else 0, **best, **floor, "diverged": str(exc),
                     "trial_done": True, "monitor": monitor, **node})
        return
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if test:  # seed re-runs of selected configs (no scheduler): one more report carries the test metrics
        tune.report({"epoch": result.epochs_run, **best, "trial_done": True, "monitor": monitor, **node,
                     "num_parameters": result.num_parameters, **{f"test.{k}": v for k, v in result.test.items()}})


# ----------------------------------------------------------------------------------------------------------
# Rows: written by the driver as trials end, and reconciled from the ResultGrid after the run.


def _missing(value: Any) -> bool:
    """None, or the NaN a metrics DataFrame puts where a report lacked the key."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _plain(value: Any) -> Any:
    """numpy scalars (from a metrics DataFrame) as Python values."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def _count(value: Any) -> int | None:
    """An integral fact as int: a DataFrame column with gaps holds 7 as 7.0, and Parquet types must agree."""
    return None if value is None else int(value)


def row_from_results(plan: Plan, trial_id: str, config: dict, results: list[dict], error: str | None,
                     checkpoint: str | None, role: str = "search", tag: str = "") -> dict[str, Any]:
    sampled = plan.space.expand(_sampled(config))
    try:
        cfg = trial_config(plan.base, plan.space, sampled)
    except ModsarError:  # an invalid combination: the trial failed on it; record the values as sampled
        cfg = Config.from_dict(plan.base)
    last: dict[str, Any] = {}
    for reported in results:  # later reports win; a final test-only report keeps the earlier facts
        last.update({k: _plain(v) for k, v in reported.items() if not _missing(v)})
    if last.get("diverged"):
        status, error = "diverged", error or last["diverged"]
    else:
        status = "error" if error else ("finished" if last.get("trial_done") else "stopped")
    # best.* without a best epoch is the 0.0 floor a trial that diverged before validating reports to Tune
    valid = {k[5:]: v for k, v in last.items() if k.startswith("best.")} if "best_epoch" in last else {}
    test = {k[5:]: v for k, v in last.items() if k.startswith("test.")}
    points: dict[int, float] = {}  # epoch -> validation value; a resumed trial's redone epochs report again
    for reported in results:
        if isinstance(reported.get("restored_curve"), str):
            points.update({int(e): v for e, v in json.loads(reported["restored_curve"])})
        if not _missing(reported.get(f"valid.{plan.monitor}")):
            points[int(reported["epoch"])] = _plain(reported[f"valid.{plan.monitor}"])
    curve = [[epoch, points[epoch]] for epoch in sorted(points)]
    facts = {"best_epoch": _count(last.get("best_epoch")), "epochs_run": _count(last.get("epoch")),
             "wall_time_s": last.get("wall_time_s"), "epoch_time_s": last.get("epoch_time_s"),
             "eval_time_s": last.get("eval_time_s"), "device": last.get("device"),
             "num_parameters": _count(last.get("num_parameters")), "node_id": last.get("node_id"),
             "torch_threads": _count(last.get("torch_threads")),
             "checkpoint": checkpoint, "curve": json.dumps(curve), "reports": len(results),
             "search_algorithm": plan.search,
             "trial_index": int(tag.split("_")[0]) if tag.split("_")[0].isdigit() else None}  # creation order
    row = result_row(cfg, experiment=plan.request.experiment_name, trial_id=trial_id, status=status,
                     valid=valid, test=test, facts=facts, error=error, space=plan.space.name,
                     dataset_manifest=plan.manifest)
    row["role"] = role
    row.update({k: v for k, v in sampled.items() if row.get(k) != v})
    if last.get("host"):
        row["host"] = last["host"]
    return row


def _error_message(trial) -> str:
    """The trial's exception as one line ("ModsarError: ..."), read from the files Tune just wrote."""
    from ray import cloudpickle

    err, path = None, trial.pickled_error_file  # written locally by Trial.handle_error before callbacks run
    if path and os.path.exists(path):
        with open(path, "rb") as fh:
            err = cloudpickle.load(fh)
    if err is not None:
        cause = getattr(err, "cause", None) or err
        return f"{type(cause).__name__}: {cause}".strip().splitlines()[0][:500]
    text = ""
    if trial.error_file and os.path.exists(trial.error_file):
        text = Path(trial.error_file).read_text()
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "unknown error")[:500]


def _rows_dir(plan: Plan) -> str:
    return plan.request.results.rstrip("/")


class ResultRows(tune.Callback):
    """Writes a trial's Parquet row the moment it ends, so a killed driver loses nothing finished."""

    def __init__(self, plan: Plan, role: str) -> None:
        self.plan, self.role = plan, role
        self.results: dict[str, list[dict]] = {}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.results.setdefault(trial.trial_id, []).append(dict(result))

    def _write(self, trial, error: str | None) -> None:
        checkpoint = trial.checkpoint.path if trial.checkpoint else None
        row = row_from_results(self.plan, trial.trial_id, trial.config, self.results.get(trial.trial_id, []),
                               error, checkpoint, self.role, trial.experiment_tag)
        write_row(_rows_dir(self.plan), row)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._write(trial, None)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._write(trial, _error_message(trial))


class LiveTable(tune.Callback):
    """A compact live table of trials (status, epoch, best validation metric), at most every 5 s."""

    def __init__(self, plan: Plan) -> None:
        self.plan, self.shown = plan, 0.0

    def _show(self, trials, force: bool = False) -> None:
        if not force and time.time() - self.shown < 5:
            return
        self.shown = time.time()
        plan, counts = self.plan, dict[str, int]()
        for t in trials:
            counts[t.status] = counts.get(t.status, 0) + 1
        lines = [f"[{time.strftime('%H:%M:%S')}] {plan.request.experiment_name}: "
                 + ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))]
        lines.append(f"  {'trial':<14}{'task':<6}{'status':<11}{'epoch':>6}{'best ' + plan.monitor:>14}")
        for t in trials[-12:]:
            r = t.last_result or {}
            value = r.get(f"best.{plan.monitor}")
            task = _sampled(t.config).get("task", plan.base["task"])
            shown = f"{value:.4f}" if isinstance(value, float) else "-"
            status = "diverged" if r.get("diverged") else t.status.lower()  # Tune calls it terminated
            lines.append(f"  {t.trial_id:<14}{task:<6}{status:<11}{r.get('epoch', '-')!s:>6}{shown:>14}")
        if len(trials) > 12:
            lines.append(f"  ... {len(trials) - 12} more (modsar results --experiment {plan.request.experiment_name})")
        print("\n".join(lines), flush=True)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._show(trials)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._show(trials)

    def on_experiment_end(self, trials, **info):
        self._show(trials, force=True)


class SchedulerState(tune.Callback):
    """Saves ASHA's rung records with Tune's experiment state and restores them on --resume.

    Tune checkpoints the searcher but not the scheduler (ray-project/ray#30838): a resumed search would judge
    its remaining trials against empty rungs and stop fewer of them than the uninterrupted search. Tune
    pickles this callback and the scheduler together in tuner.pkl, so the reference survives a restore."""

    def __init__(self, scheduler: ASHAScheduler) -> None:
        self.scheduler = scheduler

    def get_state(self) -> dict:
        return {"scheduler": dict(self.scheduler.__dict__)}  # what ASHAScheduler.save pickles

    def set_state(self, state: dict) -> None:
        self.scheduler.__dict__.update(state["scheduler"])


def make_callbacks(plan: Plan, role: str = "search") -> list[tune.Callback]:
    return [ResultRows(plan, role)] + ([] if plan.request.quiet else [LiveTable(plan)])


def reconcile_rows(plan: Plan, grid, role: str = "search") -> None:
    """Write rows for trials whose end the callback missed (driver killed between state save and row)."""
    existing = read_rows(_rows_dir(plan), plan.request.experiment_name)
    have = set(existing["trial_id"]) if len(existing) else set()
    for result in grid:
        # trial folders are named <trainable>_<trial id>_<index>_<params>; ids may hold one "_"
        match = re.match(r"^[^_]+_([0-9a-f]+(?:_\d{5})?)_(\d+_.*)$", Path(result.path).name if result.path else "")
        trial_id = (result.metrics or {}).get("trial_id") or (match.group(1) if match else None)
        tag = match.group(2) if match else ""
        if not trial_id or trial_id in have:
            continue
        frame = result.metrics_dataframe
        history = frame.to_dict("records") if frame is not None else []
        error = f"{type(result.error).__name__}: {result.error}".splitlines()[0] if result.error else None
        checkpoint = result.checkpoint.path if result.checkpoint else None
        write_row(_rows_dir(plan), row_from_results(plan, trial_id, result.config, history, error, checkpoint, role,
                                                    tag))


# ----------------------------------------------------------------------------------------------------------
# Ray: connect or start, and check resources before anything is written.


def connect_ray(req: SearchRequest) -> None:
    import ray
    import torch  # before ray.init: loaded after it, in a Ray job driver, torch's MKL failed to load

    if ray.is_initialized():
        return
    address = req.address or os.environ.get("RAY_ADDRESS")
    os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR", "configure_logging": True}
    try:
        if address:
            ray.init(address=address, **quiet)
        else:
            ray.init(num_cpus=os.cpu_count() or 1, num_gpus=torch.cuda.device_count(),
                     include_dashboard=req.dashboard, dashboard_host="127.0.0.1",
                     object_store_memory=256 * 1024 * 1024, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = ("; the cluster uses token authentication: set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the "
                "cluster's token") if "token" in str(exc).lower() or "auth" in str(exc).lower() else ""
        raise ModsarError(f"cannot connect to Ray{' at ' + address if address else ''}: {first}{hint}") from None


def check_resources(req: SearchRequest) -> dict[str, float]:
    """Refuse requests the cluster can never satisfy (they would sit PENDING forever)."""
    import ray

    total = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    best_cpu = max((n["Resources"].get("CPU", 0) for n in nodes), default=total.get("CPU", 0))
    best_gpu = max((n["Resources"].get("GPU", 0) for n in nodes), default=total.get("GPU", 0))
    if req.gpus_per_trial > 0 and best_gpu == 0:
        raise ModsarError(f"--gpus-per-trial {req.gpus_per_trial} asks for a GPU, but the Ray cluster has none "
                          "(CPU only); drop --gpus-per-trial or connect to a GPU cluster with --address")
    if req.gpus_per_trial > best_gpu:
        raise ModsarError(f"--gpus-per-trial {req.gpus_per_trial} exceeds the largest node's {best_gpu:g} GPUs")
    if req.cpus_per_trial > best_cpu:
        raise ModsarError(f"--cpus-per-trial {req.cpus_per_trial:g} exceeds the largest node's {best_cpu:g} CPUs; "
                          "lower it")
    return total


# ----------------------------------------------------------------------------------------------------------
# The search.


def _storage(plan: Plan) -> str:
    """The experiment folder: storage_path of every Tuner of this search."""
    root = plan.root
    return root if "://" in root else os.path.abspath(os.path.expanduser(root))


def drop_resume_state(grid) -> None:
    """Trials that ended need only their weights: delete their resume state (Adam moments are 2x the weights).

    Not before the Tuner returns: a trial that ended after Tune's last experiment-state save is resumed
    again after a kill and needs it. Errored trials keep it; --resume retries them from their checkpoint."""
    from modsar.train import RESUME_FILE

    for result in grid:
        if result.error is None and result.path:
            fs = result.filesystem
            for info in fs.get_file_info(pafs.FileSelector(result.path, recursive=True, allow_not_found=True)):
                if info.base_name == RESUME_FILE:
                    fs.delete_file(info.path)


def _fs_exists(path: str) -> bool:
    fs, p = pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)
    return fs.get_file_info(p).type != pafs.FileType.NotFound


def _check_same_search(plan: Plan, stored: dict, settings: dict) -> None:
    """A resumed search must be the search that was started: Tune restores its trials and their configs,
    and seed re-runs would be trained on a different base than the trials they replicate."""
    from modsar.config import flatten

    was, now = flatten({k: stored[k] for k in settings if k in stored}), flatten(settings)
    changed = [f"{k} {was[k]!r} -> {now.get(k)!r}" for k in sorted(was) if was[k] != now.get(k)]
    if changed:
        raise ModsarError(f"--resume must repeat the search that was started as '{plan.request.experiment_name}', "
                          f"but {', '.join(changed[:4])} changed; drop the changed options (only --seeds may "
                          "differ) or start a new --experiment")


def _read_json(path: str) -> dict:
    fs, p = pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)
    with fs.open_input_stream(p) as stream:
        return json.loads(stream.read().decode())


def _write_json(path: str, data: dict) -> None:
    fs, p = pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)
    fs.create_dir(p.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(p + ".tmp") as out:
        out.write(json.dumps(data, indent=2).encode())
    fs.move(p + ".tmp", p)


def make_trainable(plan: Plan, test: bool = False):
    from modsar.model import registry

    return tune.with_resources(tune.with_parameters(trainable, base=plan.base, space=plan.space,
                                                    data_dir=plan.data_root, test=test,
                                                    plugins=tuple(registry.loaded_plugins())),
                               {"cpu": plan.request.cpus_per_trial, "gpu": plan.request.gpus_per_trial})


def build_tuner(plan: Plan, total: dict[str, float], task: str, fn) -> tune.Tuner:
    """A fresh Tuner for one direction. Note: constructing it writes tuner.pkl into its folder."""
    req = plan.request
    storage = _storage(plan)
    slots = max(1, int(total.get("CPU", 1) // req.cpus_per_trial))
    if req.gpus_per_trial:
        slots = min(slots, max(1, int(total.get("GPU", 0) / req.gpus_per_trial)))
    concurrent = req.max_concurrent or slots
    metric = f"best.{plan.monitor}"  # ASHA compares each trial's best validation value so far
    scheduler = ASHAScheduler(time_attr="training_iteration", max_t=plan.max_t, grace_period=plan.grace_period,
                              reduction_factor=plan.reduction_factor)
    search_alg, param_space = None, {}
    space = plan.space.for_task(task)
    if plan.search == "grid":
        param_space = {"point": tune.grid_search(space.grid_points())}
    else:
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        sampler = (optuna.samplers.RandomSampler(seed=req.seed) if plan.search == "random"
                   else optuna.samplers.TPESampler(seed=req.seed))
        search_alg = ConcurrencyLimiter(OptunaSearch(space=space.suggest, metric=metric, mode="max",
                                                     sampler=sampler), max_concurrent=concurrent)
    tune_config = tune.TuneConfig(metric=metric, mode="max", scheduler=scheduler, search_alg=search_alg,
                                  num_samples=plan.num_samples,
                                  time_budget_s=req.time_budget_s / len(plan.space.tasks()) if req.time_budget_s else None,
                                  max_concurrent_trials=concurrent if search_alg is None else None,
                                  reuse_actors=True)
    run_config = tune.RunConfig(
        name=f"{RAY_DIR}-{task}", storage_path=storage, verbose=0, callbacks=[*make_callbacks(plan), SchedulerState(scheduler)],
        failure_config=tune.FailureConfig(max_failures=req.max_failures),
        # two, not one: Tune deletes the older checkpoint before saving the experiment state that names the
        # newer, so with one a driver killed in between would resume a trial from a deleted checkpoint
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2))
    return tune.Tuner(fn, param_space=param_space, tune_config=tune_config, run_config=run_config)


def run_search(req: SearchRequest) -> dict[str, Any]:
    plan = make_plan(req)
    storage = _storage(plan)
    search_json = f"{storage}/search.json"
    if req.resume and not _fs_exists(search_json):
        raise ModsarError(f"nothing to resume: no search in {storage}; run without --resume")
    if not req.resume and not req.overwrite and _fs_exists(search_json):
        raise ModsarError(f"experiment '{req.experiment_name}' already exists in {req.results}; pass --resume to "
                          "continue it, --overwrite to replace it, or choose another --experiment")
    connect_ray(req)
    total = check_resources(req)
    if req.overwrite and not req.resume and _fs_exists(storage):
        fs, path = pafs.FileSystem.from_uri(storage) if "://" in storage else (pafs.LocalFileSystem(), storage)
        fs.delete_dir(path)
    settings = {"base": plan.base, "search": plan.search, "num_samples": plan.num_samples,
                "asha": {"max_t": plan.max_t, "grace_period": plan.grace_period,
                         "reduction_factor": plan.reduction_factor}}
    if req.resume:
        _check_same_search(plan, _read_json(search_json), settings)
        remove_partial_rows(_rows_dir(plan), req.experiment_name)  # a row the killed driver was writing
    else:
        _write_json(search_json, {"request": asdict(req), "space_file": plan.space.path, **settings,
                                  "argv": sys.argv})
    started, trials, errors = time.perf_counter(), 0, 0
    for task in plan.space.tasks():  # one Tuner (and ASHA bracket) per direction, as the original experiments
        fn = make_trainable(plan)
        ray_path = f"{storage}/{RAY_DIR}-{task}"
        if req.resume and tune.Tuner.can_restore(ray_path):  # checked before a fresh Tuner writes tuner.pkl
            tuner = tune.Tuner.restore(ray_path, trainable=fn, resume_unfinished=True, resume_errored=True)
        else:
            tuner = build_tuner(plan, total, task, fn)
        grid = tuner.fit()
        reconcile_rows(plan, grid)
        drop_resume_state(grid)
        trials, errors = trials + len(grid), errors + grid.num_errors
    selected = select_and_test(plan)
    if req.seeds:
        rerun_seeds(plan, selected)
    rows = read_rows(_rows_dir(plan), req.experiment_name)
    diverged = int((rows["status"] == "diverged").sum()) if len(rows) else 0
    return {"experiment": req.experiment_name, "trials": trials, "errors": errors, "diverged": diverged,
            "selected": selected, "wall_time_s": time.perf_counter() - started, "results": storage}


def _rewrite(plan: Plan, row: dict[str, Any]) -> None:
    """Write back a row read from Parquet (NaN where the row had no value becomes missing again)."""
    write_row(_rows_dir(plan), {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()})


def select_and_test(plan: Plan) -> dict[str, dict]:
    """Best trial per task by its best validation epoch; test it from its best checkpoint; mark it selected.

    Exactly one row per task is selected afterwards: a resumed or retried search may pick another trial than
    an earlier run did, so earlier selections are unmarked (and their test metrics dropped) first. A
    diverged or errored trial is never a candidate."""
    import torch

    from modsar.data.split import LeaveOneOut
    from modsar.evaluate import Evaluator, model_scorer
    from modsar.train import load_checkpoint

    every = read_rows(_rows_dir(plan), plan.request.experiment_name)
    column = f"valid.{plan.monitor}"
    if not len(every) or column not in every:
        return {}
    rows = every[every["role"] == "search"]
    candidates = rows[rows["status"].isin(["finished", "stopped"]) & rows[column].notna()]
    winners = {task: group.sort_values([column, "trial_id"], ascending=[False, True]).iloc[0].to_dict()
               for task, group in candidates.groupby("task")}
    for earlier in rows[rows["selected"].astype(bool)].to_dict("records"):  # unmark before marking: a crash
        earlier.update({k: None for k in earlier if k.startswith("test.")}, selected=False)  # leaves none
        _rewrite(plan, earlier)
    for task, seeds in every[every["role"] == "seed"].groupby("task"):  # re-runs of an earlier winner
        winner = rows[rows["trial_id"] == winners[task]["trial_id"]] if task in winners else rows.iloc[:0]
        for seed_row in seeds.to_dict("records"):
            if not len(winner) or differing_keys(pd.concat([winner, pd.DataFrame([seed_row])])):
                _rewrite(plan, {**seed_row, "role": "superseded"})  # kept, but no report cell uses it
    if not winners:
        return {}
    data = load_dataset(plan.request.dataset, plan.request.data_dir)
    split = LeaveOneOut.from_log(data.user, data.item, data.num_users, data.num_items)
    selected = {}
    for task, best in winners.items():
        with _local_copy(best["checkpoint"]) as path:
            model, cfg, payload = load_checkpoint(path)
        test = Evaluator.of(split, cfg, payload["max_len"], torch.device("cpu"))(model_scorer(model), "test")
        best.update({f"test.{k}": v for k, v in test.items()}, selected=True)
        _rewrite(plan, best)
        selected[task] = {"trial_id": best["trial_id"], column: best[column],
                          **{f"test.{k}": test[k] for k in (plan.monitor, "recall@10", "ndcg@10") if k in test}}
    return selected


class _local_copy:
    """A checkpoint folder (local path or URI) as a local best.pt path."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.tmp: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> str:
        if "://" not in self.folder:
            return str(Path(self.folder) / "best.pt")
        self.tmp = tempfile.TemporaryDirectory()
        fs, path = pafs.FileSystem.from_uri(self.folder)
        pafs.copy_files(f"{path}/best.pt", f"{self.tmp.name}/best.pt", source_filesystem=fs)
        return f"{self.tmp.name}/best.pt"

    def __exit__(self, *exc) -> None:
        if self.tmp:
            self.tmp.cleanup()


def rerun_seeds(plan: Plan, selected: dict[str, dict]) -> None:
    """Re-train each selected config on seeds 0..K-1 (full training, tested in-trial); rows role=seed."""
    if not selected:
        return
    rows = read_rows(_rows_dir(plan), plan.request.experiment_name)
    points = []
    for info in selected.values():
        row = rows[rows["trial_id"] == info["trial_id"]].iloc[0]
        sampled: dict[str, Any] = {}
        for p in plan.space.params:  # the selected trial's own sampled values, conditions included
            if p.active(sampled):
                sampled[p.key] = row[p.key].item() if hasattr(row[p.key], "item") else row[p.key]
        task = sampled.get("task", plan.base["task"])
        mine = rows[(rows["role"] == "seed") & (rows["task"] == task)] if "role" in rows else rows.iloc[:0]
        for failed in mine[mine["status"] == "error"].to_dict("records"):  # retried below, as search trials are
            _rewrite(plan, {**failed, "role": "superseded"})
        done = set(mine[mine["status"] != "error"]["seed"])
        points += [{**sampled, "seed": s} for s in range(plan.request.seeds) if s not in done]  # resumed: the rest
    if not points:
        return
    storage = _storage(plan)
    tuner = tune.Tuner(make_trainable(plan, test=True), param_space={"point": tune.grid_search(points)},
                       tune_config=tune.TuneConfig(metric=f"best.{plan.monitor}", mode="max"),
                       run_config=tune.RunConfig(name=f"{RAY_DIR}-seeds", storage_path=storage, verbose=0,
                                                 callbacks=make_callbacks(plan, role="seed"),
                                                 failure_config=tune.FailureConfig(max_failures=plan.request.max_failures)))
    drop_resume_state(tuner.fit())
