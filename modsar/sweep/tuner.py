"""Ray and Tune: connect or start a cluster, check resources, build the Tuners, run the search, then select
and test the best AE and AR trials and re-run seeds."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import pkgutil
import socket
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.fs as pafs
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import ConcurrencyLimiter

from modsar.data.store import load_dataset
from modsar.data.views import viewed
from modsar.errors import ModsarError
from modsar.outputs import (
    RAY_ADVICE,
    atomic_write,
    check_name,
    ensure_writable_dir,
    is_uri,
    refuse_credentials,
    to_json,
    writer_lock,
)
from modsar.records.rows import differing_keys, filesystem, read_rows, remove_partial_rows
from modsar.sweep.cluster import check_address, host_and_port, is_loopback, private_token, quiet_dashboard
from modsar.sweep.credentials import environment, mlflow_session, redact, refuse_on_a_cluster, results_env
from modsar.sweep.interrupt import (
    COMPLETE,
    RUNNING,
    fitting,
    planned_trials,
    record_state,
    stops_on_ctrl_c,
)
from modsar.sweep.plan import STEPS_MAX_T, Plan, SearchRequest, make_plan
from modsar.sweep.rows import (
    SchedulerState,
    make_callbacks,
    raise_row_fault,
    reconcile_rows,
    rewrite_row,
    rows_dir,
)
from modsar.sweep.storage import never_saved, remove_partial_files, restore_snapshot, snapshots_of_tune_state
from modsar.sweep.timing import SearchClock
from modsar.sweep.trial import make_trainable

RAY_DIR = "ray"


@contextlib.contextmanager
def _loopback_only():
    """While a local Ray cluster starts, make it bind every socket to 127.0.0.1; then restore the process.

    A local search needs no network, but Ray takes the machine's outward address as its node address (and
    listens on all interfaces): it fails where that address is unusable, and exposes ports where it is.
    Ray's own switch for a local-only node (the one it uses on macOS and Windows) is ENABLE_RAY_CLUSTER:
    the child processes (GCS, raylet, workers) read it from the environment they are started with, and the
    driver, which imported Ray already, from its constant. Both go back afterwards, so a later `ray start`
    or cluster connection from this process is not affected; joining a cluster (--address) never uses this.
    Ray's switch is private: `connect_ray` checks the outcome and refuses if a Ray version ignores it."""
    from ray._private import ray_constants

    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    saved_env, saved_flag = os.environ.get(name), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[name], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved_env


@contextlib.contextmanager
def _workers_import_this_modsar():
    """Ray puts the driver's working directory first on every worker's sys.path (and starts workers there).
    Started from the folder above a checkout named `modsar`, workers would import that folder as an empty
    namespace package instead of the installed package, and every trial would die on its first import. So Ray
    is started from the folder that holds the package this driver runs: workers import the same `modsar` (and
    `hf_plugins`) first, wherever the user stands. The driver's own directory comes back at once; every path a
    trial reads (data root, storage, plugin files) is absolute by then, and so is every path the local workers
    inherit in their environment: PYTHONPATH entries (`PYTHONPATH=.` names the user's folder, as it does for
    the driver) and plugin files in $MODSAR_PLUGINS (Tune runs each trial in its own folder)."""
    import modsar
    from modsar.model.registry import PLUGINS_ENV

    here = os.getcwd()
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", PLUGINS_ENV)}
    if saved["PYTHONPATH"]:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            os.path.join(here, entry) for entry in saved["PYTHONPATH"].split(os.pathsep)
        )
    if saved[PLUGINS_ENV]:
        os.environ[PLUGINS_ENV] = ",".join(
            os.path.join(here, spec.strip()) if spec.strip().endswith(".py") else spec
            for spec in saved[PLUGINS_ENV].split(",")
        )
    os.chdir(Path(modsar.__file__).resolve().parent.parent)
    try:
        yield
    finally:
        os.chdir(here)
        for name, value in saved.items():
            if value is not None:
                os.environ[name] = value


_JOINED: dict[str, str] = {}  # the address a search asked for ("" for a local cluster) and the cluster's GCS


def connect_ray(req: SearchRequest) -> None:
    """Join the cluster at req.address (or $RAY_ADDRESS), checked first, or start a local one that makes no
    connection beyond 127.0.0.1 (modsar.sweep.cluster); where this process is connected already, keep that
    connection if it is the one asked for."""
    import ray
    import torch  # before ray.init: loaded after it, in a Ray job driver, torch's MKL failed to load

    address = req.address or os.environ.get("RAY_ADDRESS")
    address = None if address == "local" else address
    refuse_credentials("--address" if req.address else "$RAY_ADDRESS", address, RAY_ADVICE)
    if ray.is_initialized() and _keep_connection(address):
        return
    refuse_on_a_cluster(address, req.mlflow, req.results)  # the cluster records this driver's command line
    os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    try:
        if address:
            _join(address)
        else:
            _start_local(req, torch.cuda.device_count())
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = (
            (
                "; the cluster uses token authentication: set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the "
                "cluster's token"
            )
            if "token" in str(exc).lower() or "auth" in str(exc).lower()
            else ""
        )
        raise ModsarError(
            f"cannot connect to Ray{' at ' + redact(address) if address else ''}: {redact(first)}{hint}"
        ) from None
    _JOINED.update(wanted=address or "", gcs=ray.get_runtime_context().gcs_address)


QUIET: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR", "configure_logging": True}


def _join(address: str) -> None:
    """ray.init on an existing cluster, once something answers at its address. A cluster on this machine
    named by a loopback address keeps it: Ray would replace it by the machine's outward address, which it
    finds by a connection towards 8.8.8.8."""
    import ray

    check_address(address)
    with (
        _workers_import_this_modsar(),
        _loopback_only() if is_loopback(address) else contextlib.nullcontext(),
    ):
        ray.init(address=address, **QUIET)


def _start_local(req: SearchRequest, gpus: int) -> None:
    """A local cluster on 127.0.0.1 only, that reaches no other address, with a private token file."""
    import ray

    with _loopback_only(), _workers_import_this_modsar(), quiet_dashboard(), private_token():
        ray.init(
            num_cpus=os.cpu_count() or 1,
            num_gpus=gpus,
            include_dashboard=req.dashboard,
            dashboard_host="127.0.0.1",
            object_store_memory=256 * 1024 * 1024,
            **QUIET,
        )
    if (node_ip := ray.util.get_node_ip_address()) != "127.0.0.1":
        ray.shutdown()
        raise ModsarError(
            f"the local Ray cluster took the address {node_ip} instead of 127.0.0.1 (this Ray "
            "version ignores its local-only switch); run inside a private network namespace "
            "(unshare -n) or start Ray yourself and pass --address"
        )


def _keep_connection(address: str | None) -> bool:
    """Whether a search asking for `address` (None: a local cluster) runs on the Ray this process is connected
    to. A cluster an earlier search of this process started or joined is left for another address; one the
    caller connected to (ray.init) serves a search without an address, or with its own address, and any
    other address is refused in one line."""
    import ray

    current = ray.get_runtime_context().gcs_address
    if _JOINED.get("gcs") == current:
        if _JOINED.get("wanted") == (address or ""):
            return True
        ray.shutdown()
        _JOINED.clear()
        return False
    if not address or address == "auto" or _same_cluster(address, current):
        return True
    raise ModsarError(
        f"this process is connected to the Ray cluster at {current} already (ray.init ran before), not to "
        f"--address {redact(address)}; call ray.shutdown() first, or leave the address out to search there"
    )


def _same_cluster(address: str, gcs: str) -> bool:
    """Whether a Ray address names the cluster whose GCS is at `gcs` (HOST:PORT)."""
    found = host_and_port(address)
    host, _, port = gcs.rpartition(":")
    if found is None or str(found[1]) != port:
        return False
    if is_loopback(address):
        return True
    try:
        return socket.gethostbyname(found[0]) == host.strip("[]")
    except OSError:
        return False


def check_resources(req: SearchRequest) -> dict[str, float]:
    """Refuse requests the cluster can never satisfy (they would sit PENDING forever)."""
    import ray

    total = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    best_cpu = max((n["Resources"].get("CPU", 0) for n in nodes), default=total.get("CPU", 0))
    best_gpu = max((n["Resources"].get("GPU", 0) for n in nodes), default=total.get("GPU", 0))
    if req.gpus_per_trial > 0 and best_gpu == 0:
        raise ModsarError(
            f"--gpus-per-trial {req.gpus_per_trial} asks for a GPU, but the Ray cluster has none "
            "(CPU only); drop --gpus-per-trial or connect to a GPU cluster with --address"
        )
    if req.gpus_per_trial > best_gpu:
        raise ModsarError(
            f"--gpus-per-trial {req.gpus_per_trial} exceeds the largest node's {best_gpu:g} GPUs"
        )
    if req.cpus_per_trial > best_cpu:
        raise ModsarError(
            f"--cpus-per-trial {req.cpus_per_trial:g} exceeds the largest node's {best_cpu:g} CPUs; lower it"
        )
    return total


def _storage(plan: Plan) -> str:
    """The experiment folder: storage_path of every Tuner of this search."""
    root = plan.root
    return root if is_uri(root) else os.path.abspath(os.path.expanduser(root))


def drop_resume_state(grid) -> None:
    """Trials that ended need only their weights: delete their resume state (Adam moments are 2x the weights).

    Not before the Tuner returns: a trial that ended after Tune's last experiment-state save is resumed
    again after a kill and needs it. Errored trials keep it; --resume retries them from their checkpoint."""
    from modsar.training.state import RESUME_FILE

    for result in grid:
        if result.error is None and result.path:
            fs = result.filesystem
            for info in fs.get_file_info(
                pafs.FileSelector(result.path, recursive=True, allow_not_found=True)
            ):
                if info.base_name == RESUME_FILE:
                    fs.delete_file(info.path)


def _fs_exists(path: str) -> bool:
    fs, p = filesystem(path)
    return fs.get_file_info(p).type != pafs.FileType.NotFound


def _check_same_search(plan: Plan, stored: dict, settings: dict) -> None:
    """A resumed search must be the search that was started: Tune restores its trials and their configs,
    and seed re-runs would be trained on a different base than the trials they replicate."""
    from modsar.config import flatten

    if isinstance(stored.get("asha"), dict):  # searches before scheduler units counted validation passes
        stored = {**stored, "asha": {"unit": "passes", **stored["asha"]}}
    was, now = flatten({k: stored[k] for k in settings if k in stored}), flatten(settings)
    changed = [f"{k} {was[k]!r} -> {now.get(k)!r}" for k in sorted(was) if was[k] != now.get(k)]
    if changed:
        name = plan.request.experiment_name
        # a grid search of a paper space started before its default became a sampled one
        hint = (
            f"; a full-grid search resumes with --full-grid --experiment {name} --resume"
            if stored.get("search") == "grid" and plan.search != "grid" and plan.space.full_grid is not None
            else ""
        )
        raise ModsarError(
            f"--resume must repeat the search that was started as '{name}', "
            f"but {', '.join(changed[:4])} changed (your options, or the space file since the search "
            "started, e.g. a bundled space a newer ModSAR revised); drop the changed options (only "
            f"--seeds may differ) or start a new --experiment{hint}"
        )


def _read_json(path: str) -> dict:
    fs, p = filesystem(path)
    with fs.open_input_stream(p) as stream:
        return json.loads(stream.read().decode())


def _write_json(path: str, data: dict) -> None:
    fs, p = filesystem(path)
    with atomic_write(p, fs) as tmp, fs.open_output_stream(tmp) as out:
        out.write(to_json(data, default=str).encode())


def trial_slots(req: SearchRequest, total: dict[str, float]) -> int:
    """Trials at once: what the cluster's CPUs (and GPUs) hold at the request's share each, or
    --max-concurrent."""
    slots = max(1, int(total.get("CPU", 1) // req.cpus_per_trial))
    if req.gpus_per_trial:
        slots = min(slots, max(1, int(total.get("GPU", 0) / req.gpus_per_trial)))
    return req.max_concurrent or slots


def build_tuner(plan: Plan, total: dict[str, float], task: str, fn) -> tune.Tuner:
    """A fresh Tuner for one direction. Note: constructing it writes tuner.pkl into its folder."""
    req = plan.request
    storage = _storage(plan)
    concurrent = trial_slots(req, total)
    metric = f"best.{plan.monitor}"  # ASHA compares each trial's best validation value so far
    scheduler = ASHAScheduler(
        time_attr=plan.time_attr,
        max_t=plan.max_t,
        grace_period=plan.grace_period,
        reduction_factor=plan.reduction_factor,
    )
    search_alg, param_space = None, {}
    space = plan.space.for_task(task)
    search = plan.search_of(task)
    if search == "grid":
        param_space = {"point": tune.grid_search(space.grid_points())}
    else:
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        sampler = (
            optuna.samplers.RandomSampler(seed=req.seed)
            if search == "random"
            else optuna.samplers.TPESampler(seed=req.seed)
        )
        search_alg = ConcurrencyLimiter(
            OptunaSearch(space=space.suggest, metric=metric, mode="max", sampler=sampler),
            max_concurrent=concurrent,
        )
    tune_config = tune.TuneConfig(
        metric=metric,
        mode="max",
        scheduler=scheduler,
        search_alg=search_alg,
        num_samples=plan.samples_of(task),
        time_budget_s=req.time_budget_s / len(plan.space.tasks()) if req.time_budget_s else None,
        max_concurrent_trials=concurrent if search_alg is None else None,
        # reuse saves an actor start (torch import, dataset load) per trial, but
        # Tune hands a finished trial's actor to a trial still waiting for its
        # own, so a slow-starting node can be left without work
        reuse_actors=not req.fresh_actors,
    )
    run_config = tune.RunConfig(
        name=f"{RAY_DIR}-{task}",
        storage_path=storage,
        verbose=0,
        callbacks=[*make_callbacks(plan), SchedulerState(scheduler)],
        failure_config=tune.FailureConfig(max_failures=req.max_failures),
        # two, not one: Tune deletes the older checkpoint before saving the experiment state that names the
        # newer, so with one a driver killed in between would resume a trial from a deleted checkpoint (with
        # two, one step remains: the registration that deletes the saved state's latest forces the next save)
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
    )
    return tune.Tuner(fn, param_space=param_space, tune_config=tune_config, run_config=run_config)


class _RestoreFailed(Exception):
    """Tune could not read back a search's state (and would have started the search again)."""


class _RefuseRestart(logging.Filter):
    """On Tune's controller logger while a search is restored. When Tune cannot read the search's state back
    it logs "Failed to restore the run state." and runs the search as if it were new (unless fail_fast, which
    a search cannot set: it would also end the search at its first trial error); from a restored searcher that
    ran a few trials, or none, and exited 0: a resumed search that silently lost trials. This turns that log
    record into an exception, before any trial runs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Failed to restore the run state"):
            raise _RestoreFailed(record.exc_info[1] if record.exc_info else record.getMessage())
        return True


@contextlib.contextmanager
def restore_or_refuse(ray_path: str) -> Iterator[None]:
    """Raise one ModsarError naming the cause where Tune fails to restore the search at `ray_path`."""
    controller = logging.getLogger("ray.tune.execution.tune_controller")
    refuse = _RefuseRestart()
    controller.addFilter(refuse)
    try:
        yield
    except Exception as error:
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, (_RestoreFailed, ModuleNotFoundError)):
            cause = cause.__cause__ or cause.__context__
        if isinstance(cause, ModuleNotFoundError) and (cause.name or "").startswith("modsar"):
            raise ModsarError(
                f"--resume cannot restore the search in {ray_path}: its Tune state was saved by "
                f"another ModSAR, which had a module {cause.name} that this one has not; resume "
                "it with the ModSAR that started it, or start the search afresh with --overwrite"
            ) from None
        if cause is None or isinstance(cause, ModuleNotFoundError):
            raise
        reason = cause.args[0] if cause.args else "unknown"
        hint = (
            " (a file another user's Ray left; give each user a Ray temp folder of their own with RAY_TMPDIR)"
            if isinstance(reason, PermissionError)
            else ""
        )
        raise ModsarError(
            f"--resume cannot restore the search's Tune state in {ray_path}: "
            f"{type(reason).__name__ + ': ' if isinstance(reason, BaseException) else ''}{reason}"
            f"{hint}; nothing was run. Fix the cause and resume again, or start the search afresh "
            "with --overwrite"
        ) from None
    finally:
        controller.removeFilter(refuse)


EARLIER_NAMES = ("modsar.search",)  # this package's names before 0.3 (`modsar.search` is now the Python API)
# modules a search's tuner.pkl may name (its plan holds the space's SearchSpace) by where they were before 0.4
MOVED_MODULES = {
    "modsar.spaces": "modsar.sweep.spaces",
    "modsar.space_check": "modsar.sweep.space_check",
    "modsar.submit": "modsar.sweep.submit",
    "modsar.rows": "modsar.records.rows",
    "modsar.runs": "modsar.records.run",
    "modsar.checkpoints": "modsar.training.checkpoints",
    "modsar.feasible": "modsar.training.feasible",
    "modsar.flops": "modsar.training.flops",
    "modsar.heap": "modsar.training.heap",
    "modsar.optim": "modsar.training.optim",
    "modsar.generate": "modsar.evaluation.rollouts",
    "modsar.diagnostics": "modsar.analysis.diagnostics",
    "modsar.analyze": "modsar.analysis.analyze",
    "modsar.analyze_output": "modsar.analysis.output",
}


@contextlib.contextmanager
def modules_under_earlier_names() -> Iterator[None]:
    """While a search started by an earlier ModSAR is restored: its tuner.pkl names the Tune callbacks by the
    package's earlier names (modsar.search.<name>, modsar.search.rows.<name>) and the space by its module's
    earlier place (modsar.spaces), so those names are made to resolve to today's modules, in sys.modules only
    (the `modsar` package's attributes, the Python API, stay as they are), and are removed again
    afterwards."""
    from modsar import sweep

    modules = {}
    for info in pkgutil.iter_modules(sweep.__path__):  # every one, imported yet or not
        with contextlib.suppress(ImportError):  # one that needs an optional package it was resumed without
            modules[info.name] = importlib.import_module(f"modsar.sweep.{info.name}")
    aliases: dict[str, types.ModuleType] = {}
    for old in EARLIER_NAMES:
        aliases[old] = sweep
        aliases |= {f"{old}.{name}": module for name, module in modules.items()}
    for old, new in MOVED_MODULES.items():
        with contextlib.suppress(ImportError):
            aliases[old] = importlib.import_module(new)
    added = [name for name in aliases if name not in sys.modules]
    sys.modules.update({name: aliases[name] for name in added})
    try:
        yield
    finally:
        for name in [*added, *(n for n in sys.modules if n.split(".")[:2] == ["modsar", "search"])]:
            sys.modules.pop(name, None)


def run_search(
    req: SearchRequest, plan: Plan | None = None, predicted: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run the search `req` asks for; `plan` is its make_plan(req) where the caller already made it, and
    `predicted` its cost estimate (CostEstimate.to_dict), kept in search.json beside the time it took."""
    plan = plan or make_plan(req)
    name = check_name(req.experiment_name, "experiment")
    storage = _storage(plan)
    ensure_writable_dir(storage, "--results")  # before Ray starts: search.json and the rows are written there
    # one writer per experiment: another search or a training of it is refused, never interleaved with this
    # one (the trials' rows are written by this driver, which holds the lock for the whole search)
    with (
        environment(results_env(req.results)),  # S3 keys taken out of --results (sweep.credentials)
        writer_lock(storage.rpartition("/")[0], name, f"experiment '{name}' in {req.results}"),
    ):
        return _run_locked(req, plan, storage, predicted)


def _run_locked(req: SearchRequest, plan: Plan, storage: str, predicted: dict | None) -> dict[str, Any]:
    """run_search's work, while this process holds the experiment's lock."""
    search_json = f"{storage}/search.json"
    _check_start(req, plan, storage, search_json)
    clock = SearchClock()
    with clock.part("connect_s"):
        connect_ray(req)
    # after ray.init: no Ray process inherits them; MLflow's variables as they were after the search
    with mlflow_session(req.mlflow):
        return _run_connected(req, plan, storage, search_json, clock, predicted)


def _run_connected(
    req: SearchRequest, plan: Plan, storage: str, search_json: str, clock: SearchClock, predicted: dict | None
) -> dict[str, Any]:
    """The search, on the cluster it runs on; search.json records its status (running, interrupted,
    complete) for `modsar report`, and where each run of it spent its time (modsar.sweep.timing)."""
    total = check_resources(req)
    clock.slots = trial_slots(req, total)
    if req.overwrite and not req.resume and _fs_exists(storage):
        fs, path = filesystem(storage)
        fs.delete_dir(path)
    settings = _search_settings(plan)
    if req.resume:
        _check_same_search(plan, _read_json(search_json), settings)
        remove_partial_rows(rows_dir(plan), req.experiment_name)  # a row the killed driver was writing
        record_state(search_json, RUNNING, trials_planned=planned_trials(plan))
    else:
        argv = [redact(arg) for arg in sys.argv]  # no password of a URI is written (sweep.credentials)
        state = {"status": RUNNING, "trials_planned": planned_trials(plan)}
        estimate = {"estimate": predicted} if predicted else {}
        _write_json(
            search_json,
            {
                "request": asdict(req),
                "space_file": plan.space.path,
                **settings,
                "argv": argv,
                **state,
                **estimate,
            },
        )
    started = time.perf_counter()
    try:
        with snapshots_of_tune_state(), stops_on_ctrl_c(plan, search_json):
            trials, errors = _run_directions(req, plan, storage, total, clock)
            with clock.part("select_test_s"):
                selected = select_and_test(plan)
            if req.seeds:
                with clock.part("seeds_s"):
                    rerun_seeds(plan, selected)
    finally:
        _record_clock(search_json, clock)
    rows = read_rows(rows_dir(plan), req.experiment_name)
    record_state(
        search_json, COMPLETE, trials_ended=int((rows["role"] == "search").sum()) if len(rows) else 0
    )
    diverged = int((rows["status"] == "diverged").sum()) if len(rows) else 0
    return {
        "experiment": req.experiment_name,
        "trials": trials,
        "errors": errors,
        "diverged": diverged,
        "selected": selected,
        "wall_time_s": time.perf_counter() - started,
        "results": storage,
        "problem": search_problem(
            plan, rows, selected, f"{trials} trials: {errors} errors, {diverged} diverged"
        ),
    }


def _check_start(req: SearchRequest, plan: Plan, storage: str, search_json: str) -> None:
    """Refused before Ray starts: resuming what is not there, replacing what is there unasked, and a CUDA
    device for trials that hold no GPU."""
    if req.resume and not _fs_exists(search_json):
        raise ModsarError(f"nothing to resume: no search in {storage}; run without --resume")
    if not req.resume and not req.overwrite and _fs_exists(search_json):
        raise ModsarError(
            f"experiment '{req.experiment_name}' already exists in {req.results}; pass --resume to "
            "continue it, --overwrite to replace it, or choose another --experiment"
        )
    if req.overwrite and not req.resume:
        _check_overwrite(storage, search_json)
    device = plan.base["train"]["device"]
    if (
        device.startswith("cuda") and not req.gpus_per_trial
    ):  # Ray hides every GPU from a trial that holds none
        raise ModsarError(
            f"train.device={device}, but a trial sees a GPU only when --gpus-per-trial gives it one; "
            "pass --gpus-per-trial (e.g. 1, or 0.5 to share), or leave train.device=auto"
        )


def _check_overwrite(storage: str, search_json: str) -> None:
    """--overwrite deletes only what it recognises as a search ModSAR wrote (its search.json): never a folder
    that holds something else (another command's rows, a user's files), nor the target of a symbolic link,
    which may lie outside the results root. A missing or empty folder has nothing to lose."""
    fs, path = filesystem(storage)
    if not is_uri(storage) and os.path.islink(path):
        raise ModsarError(
            f"--overwrite: {storage} is a symbolic link (to {os.path.realpath(path)}); nothing was deleted. "
            "ModSAR deletes only a search folder of its own, never where a link points: remove the link "
            "yourself, or choose another --experiment"
        )
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return
    if not fs.get_file_info(pafs.FileSelector(path)):
        return
    if not _is_search(search_json):
        raise ModsarError(
            f"--overwrite: {storage} holds no search that modsar search wrote (no readable search.json); "
            "nothing was deleted. Remove it yourself if it should go, or choose another --experiment"
        )
    if added := _added_by_train(storage):
        name = storage.rstrip("/").rpartition("/")[2]
        more = f" and {len(added) - 3} more" if len(added) > 3 else ""
        raise ModsarError(
            f"--overwrite: {storage} also holds what `modsar train --experiment {name}` added to the search "
            f"({', '.join(added[:3])}{more}); nothing was deleted. Move those out of the folder (e.g. into "
            "another experiment's trials/ and checkpoints/), or choose another --experiment"
        )


SEARCH_ROLES = frozenset({"search", "seed", "superseded"})  # the `role` of every row a search writes


def _added_by_train(storage: str) -> list[str]:
    """What `modsar train` added to a search's folder, which --overwrite must not delete: its checkpoints/
    folder (a search keeps its checkpoints under ray-*/), and the row files in trials/ whose `role` is no
    search's (result_row makes a training's "train"); paths relative to the folder. A file there that is no
    readable row with a role is no training's: the search's folder goes with it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, path = filesystem(storage)
    added = ["checkpoints/"] if fs.get_file_info(f"{path}/checkpoints").type != pafs.FileType.NotFound else []
    for info in fs.get_file_info(pafs.FileSelector(f"{path}/trials", allow_not_found=True)):
        if info.type != pafs.FileType.File or info.base_name.startswith(".") or info.extension != "parquet":
            continue
        try:
            roles = pq.read_table(info.path, columns=["role"], filesystem=fs).column("role").to_pylist()
        except (OSError, ValueError, pa.ArrowException):  # no Parquet, or no `role` column
            continue
        if set(roles) - SEARCH_ROLES:
            added.append(f"trials/{info.base_name}")
    return sorted(added)


def _is_search(search_json: str) -> bool:
    """Whether `search_json` is a search.json as run_search writes it (its request and base config)."""
    try:
        stored = _read_json(search_json)
    except (OSError, ValueError):
        return False
    return isinstance(stored, dict) and isinstance(stored.get("request"), dict) and "base" in stored


def _search_settings(plan: Plan) -> dict[str, Any]:
    """What search.json records of the plan, and what a resumed search must share with it."""
    return {
        "base": plan.base,
        "search": plan.search,
        "num_samples": plan.num_samples,
        "directions": plan.per_task,
        "full_grid": plan.request.full_grid,
        "asha": {
            "max_t": plan.max_t,
            "grace_period": plan.grace_period,
            "reduction_factor": plan.reduction_factor,
            "unit": plan.unit,
        },
    }


def _record_clock(search_json: str, clock: SearchClock) -> None:
    """Put this run's clock in search.json's `timing` (one entry per run of the search), after each direction
    and when the run ends: a driver killed later keeps what it had timed. Best effort: a search.json it cannot
    read or write keeps its earlier entries, and never replaces the fault that ended the search."""
    try:
        stored = _read_json(search_json)
        runs = stored.get("timing") if isinstance(stored, dict) else None
        runs = [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []
        if clock.recorded:  # this run's entry is the last one: replace it
            runs = runs[:-1]
        record_state(search_json, stored.get("status", RUNNING), timing=[*runs, clock.record()])
        clock.recorded = True
    except Exception:  # timing is a fact about the search, never a reason for it to fail
        pass


def _run_directions(
    req: SearchRequest, plan: Plan, storage: str, total: dict[str, float], clock: SearchClock
) -> tuple[int, int]:
    """One Tuner (and ASHA bracket) per direction, as the original experiments, restored where a resumed
    search left one; each direction's rows are written as it ends. Returns (trials, errors)."""
    trials, errors = 0, 0
    for task in plan.space.tasks():
        fn = make_trainable(plan)
        ray_path = f"{storage}/{RAY_DIR}-{task}"
        restorable = req.resume and tune.Tuner.can_restore(ray_path)  # before a fresh Tuner writes tuner.pkl
        if restorable and never_saved(ray_path):  # killed before Tune's first save: nothing ran, start afresh
            fs, path = filesystem(ray_path)
            fs.delete_dir(path)
            restorable = False
        if restorable:
            remove_partial_files(ray_path)
            restore_snapshot(ray_path)  # Tune's state files as one save wrote them, whenever the kill came
            with modules_under_earlier_names(), restore_or_refuse(ray_path):
                tuner = tune.Tuner.restore(
                    ray_path, trainable=fn, resume_unfinished=True, resume_errored=True
                )
                with fitting(), clock.part(f"direction:{task}"):
                    grid = tuner.fit()
        else:
            tuner = build_tuner(plan, total, task, fn)
            # Ctrl-C: Tune saves and ends this fit, and the search stops after it
            with fitting(), clock.part(f"direction:{task}"):
                grid = tuner.fit()
        _record_clock(f"{storage}/search.json", clock)
        reconcile_rows(plan, grid)
        drop_resume_state(grid)
        trials, errors = trials + len(grid), errors + grid.num_errors
    return trials, errors


MODEL = ["task", "model.backbone"]  # what a selection picks one trial of: a direction of one backbone


def model_key(task: str, backbone: str, backbones: int, arms: tuple = ()) -> str:
    """The name of a selection: the task alone ("ae", "ar") when the experiment has one backbone, as every
    AE-vs-AR space; "<backbone>/<task>" when it compares backbones (the residual_models space); then the
    values of the space's `arms`, if any ("ar/target_aligned/token")."""
    return "/".join([task if backbones == 1 else f"{backbone}/{task}", *map(str, arms)])


def select_and_test(plan: Plan) -> dict[str, dict]:
    """Best trial per task (per task and backbone in a space that varies the backbone) by its best validation
    epoch; test it from its best checkpoint; mark it selected.

    Exactly one row per task (and backbone) is selected afterwards: a resumed or retried search may pick
    another trial than an earlier run did, so earlier selections are unmarked (and their test metrics
    dropped) first. A diverged or errored trial is never a candidate."""
    every = read_rows(rows_dir(plan), plan.request.experiment_name)
    column = f"valid.{plan.monitor}"
    if not len(every) or column not in every:
        return {}
    rows = every[every["role"] == "search"]
    candidates = rows[rows["status"].isin(["finished", "stopped"]) & rows[column].notna()]
    by = MODEL + plan.space.arms
    # (task, backbone, *arms) -> the best row
    winners = {
        key: group.sort_values([column, "trial_id"], ascending=[False, True]).iloc[0].to_dict()
        for key, group in candidates.groupby(by)
    }
    _unmark_earlier(plan, every, rows, winners, by)
    if not winners:
        return {}
    return _test_winners(plan, rows, winners, column)


def _unmark_earlier(
    plan: Plan, every: pd.DataFrame, rows: pd.DataFrame, winners: dict[Any, dict], by: list[str]
) -> None:
    """Before the winners are marked, earlier selections lose their mark and test metrics (unmarking first,
    a crash leaves none selected rather than two), and seed re-runs of a winner that is no longer one, or
    whose config now differs, are kept as superseded: no report cell uses them."""
    for earlier in rows[rows["selected"].astype(bool)].to_dict("records"):
        earlier.update({k: None for k in earlier if k.startswith(("test.", "generate."))}, selected=False)
        rewrite_row(plan, earlier)
    for key, seeds in every[every["role"] == "seed"].groupby(by):  # re-runs of an earlier winner
        winner = rows[rows["trial_id"] == winners[key]["trial_id"]] if key in winners else rows.iloc[:0]
        for seed_row in seeds.to_dict("records"):
            if not len(winner) or differing_keys(pd.concat([winner, pd.DataFrame([seed_row])])):
                rewrite_row(plan, {**seed_row, "role": "superseded"})


def _test_winners(plan: Plan, rows: pd.DataFrame, winners: dict[Any, dict], column: str) -> dict[str, dict]:
    """Each winner tested on the CPU from its best checkpoint (and its rollouts measured), its row rewritten
    as selected; returns model_key -> its trial, validation and main test values."""
    import torch

    from modsar.data.split import LeaveOneOut, make_split
    from modsar.evaluation.ranking import Evaluator, model_scorer
    from modsar.evaluation.rollouts import trial_rollouts
    from modsar.training.checkpoints import load_checkpoint, local_checkpoint

    stored = load_dataset(plan.request.dataset, plan.request.data_dir)
    splits: dict[tuple, LeaveOneOut] = {}  # one protocol per search (spaces cannot vary it); keyed to be sure
    selected = {}
    backbones = rows["model.backbone"].nunique()
    for (task, backbone, *arms), best in winners.items():
        with local_checkpoint(best["checkpoint"]) as path:
            model, cfg, payload = load_checkpoint(path)
        protocol = (
            cfg.data.view,
            cfg.data.split,
            cfg.data.split_valid,
            cfg.data.split_test,
            cfg.data.split_dates,
            cfg.data.split_targets,
        )
        if protocol not in splits:
            splits[protocol] = make_split(cfg, viewed(stored, cfg.data.view))
        split = splits[protocol]
        test = Evaluator.of(split, cfg, payload["max_len"], torch.device("cpu"))(model_scorer(model), "test")
        generation = trial_rollouts(model, split, cfg, payload["max_len"], torch.device("cpu"))
        best.update({f"test.{k}": v for k, v in test.items()}, selected=True)
        best.update({f"generate.{k}": v for k, v in generation.items()})
        rewrite_row(plan, best)
        selected[model_key(task, backbone, backbones, tuple(arms))] = {
            "trial_id": best["trial_id"],
            column: best[column],
            **{f"test.{k}": test[k] for k in (plan.monitor, "recall@10", "ndcg@10") if k in test},
        }
    return selected


def search_problem(plan: Plan, rows: pd.DataFrame, selected: dict[str, dict], counts: str) -> str | None:
    """Why the search has no answer for a model it trained (a task; per backbone and arm where the space
    varies them), or None: no trial of it ended with a validation score (all errored or diverged), so none
    was selected. The CLI exits non-zero with this line: a script never takes a failed search for a result."""
    search = rows[rows["role"] == "search"] if len(rows) else rows
    name = plan.request.experiment_name
    see = f"see `modsar results --results {plan.request.results} --experiment {name}`"
    if not len(search):
        budget = plan.request.time_budget_s
        why = (
            f"--time-budget {budget:g} s ran out before any trial reported; raise it"
            if budget
            else f"see `modsar results --results {plan.request.results} --experiment {name}`"
        )
        return f"search '{name}' selected nothing: it wrote no trial row ({counts}); {why}"
    backbones = search["model.backbone"].nunique()
    models = [
        model_key(task, backbone, backbones, tuple(arms))
        for (task, backbone, *arms), _ in search.groupby(MODEL + plan.space.arms)
    ]
    missing = [m if "/" in m else m.upper() for m in models if m not in selected]
    if not missing:
        return None
    errors = search[search["status"].isin(["error", "diverged"])].sort_values("trial_id")["error"].dropna()
    first = f"; first error: {(str(errors.iloc[0]).strip().splitlines() or ['?'])[0]}" if len(errors) else ""
    what = (
        "nothing: no trial"
        if len(missing) == len(models)
        else f"no {', '.join(missing)}: no trial of {'it' if len(missing) == 1 else 'them'}"
    )
    return f"search '{name}' selected {what} ended with a validation score ({counts}{first}); {see}"


def _asha_budget(plan: Plan, row: pd.Series) -> dict[str, int]:
    """train.max_steps for a replicate where ASHA's max_t ended its search trial before train.max_epochs:
    the run then stops at the same validation pass, its learning-rate schedule (which counts max_epochs)
    untouched. In passes, max_t passes of the row's steps per epoch (exact for batches of users; token
    batches vary by a step or two an epoch, so a replicate may run one pass more)."""
    train = plan.base["train"]
    per_epoch = float(row.get("steps_per_epoch") or 0)
    if not per_epoch > 0 or (plan.unit == "steps" and plan.max_t >= STEPS_MAX_T):
        return {}
    passes = round(plan.max_t * train["eval_every"] * per_epoch)  # max_t passes, in steps
    steps = plan.max_t if plan.unit == "steps" else passes
    return {"train.max_steps": steps} if steps < per_epoch * train["max_epochs"] else {}


def rerun_seeds(plan: Plan, selected: dict[str, dict]) -> None:
    """Re-train each selected config on seeds 0..K-1 (tested in-trial); rows role=seed. A replicate gets the
    budget its search trial had: its patience, and ASHA's max_t where that ends a trial before its epochs do
    (the default search's last rung, 18,000 steps, comes before 200 epochs on Beauty)."""
    if not selected:
        return
    rows = read_rows(rows_dir(plan), plan.request.experiment_name)
    points = []
    for info in selected.values():
        row = rows[rows["trial_id"] == info["trial_id"]].iloc[0]
        sampled: dict[str, Any] = {}
        for p in plan.space.params:  # the selected trial's own sampled values, conditions included
            if p.active(sampled):
                sampled[p.key] = row[p.key].item() if hasattr(row[p.key], "item") else row[p.key]
        task = sampled.get("task", plan.base["task"])
        backbone = sampled.get("model.backbone", plan.base["model"]["backbone"])
        same = (rows["task"] == task) & (rows["model.backbone"] == backbone)
        for arm in plan.space.arms:  # a seed of another arm of this task is not one of these
            same &= rows[arm] == row[arm]
        mine = rows[(rows["role"] == "seed") & same] if "role" in rows else rows.iloc[:0]
        for failed in mine[mine["status"] == "error"].to_dict(
            "records"
        ):  # retried below, as search trials are
            rewrite_row(plan, {**failed, "role": "superseded"})
        done = set(mine[mine["status"] != "error"]["seed"])
        budget = _asha_budget(plan, row)
        points += [
            {**sampled, **budget, "seed": s} for s in range(plan.request.seeds) if s not in done
        ]  # resumed: the rest
    if not points:
        return
    storage = _storage(plan)
    tuner = tune.Tuner(
        make_trainable(plan, test=True),
        param_space={"point": tune.grid_search(points)},
        tune_config=tune.TuneConfig(metric=f"best.{plan.monitor}", mode="max"),
        run_config=tune.RunConfig(
            name=f"{RAY_DIR}-seeds",
            storage_path=storage,
            verbose=0,
            callbacks=make_callbacks(plan, role="seed"),
            failure_config=tune.FailureConfig(max_failures=plan.request.max_failures),
        ),
    )
    with fitting():
        grid = tuner.fit()
    raise_row_fault(plan)  # a seed's row the disk refused ended the fit: said in one line
    drop_resume_state(grid)
