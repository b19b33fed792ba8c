"""The search: plan it, run one Tuner (and its early stopping) per direction on the cluster ray_session
connects, record its state and clock in search.json, then select, test and re-run seeds (selection)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from typing import Any

import pandas as pd
import pyarrow.fs as pafs
from ray import tune
from ray.tune.schedulers import ASHAScheduler

from modsar.errors import ModsarError
from modsar.outputs import (
    PARTIAL_PREFIX,
    check_name,
    ensure_writable_dir,
    is_uri,
    writer_lock,
)
from modsar.records.rows import filesystem, read_rows, remove_partial_rows
from modsar.sweep.carry_on import Carried, carried_rows, repeated_rows, replays_of
from modsar.sweep.credentials import environment, mlflow_session, redact, results_env
from modsar.sweep.halving import SuccessiveHalving, halving_time
from modsar.sweep.interrupt import (
    COMPLETE,
    RUNNING,
    STATE_LOCK,
    fitting,
    planned_trials,
    record_state,
    stops_on_ctrl_c,
)
from modsar.sweep.plan import Plan, SearchRequest, make_plan
from modsar.sweep.ray_session import check_resources, connect_ray, trial_slots
from modsar.sweep.restore import (
    check_same_search,
    restored_tuner,
    restoring,
    search_settings,
)
from modsar.sweep.row_audit import check_resumed_rows
from modsar.sweep.rows import (
    SchedulerState,
    make_callbacks,
    reconcile_rows,
    result_trial,
    rewrite_row,
    rows_dir,
)
from modsar.sweep.search_folder import (
    RAY_DIR,
    drop_resume_state,
    experiment_folder,
    fs_exists,
    read_json,
    write_json,
)
from modsar.sweep.selection import rerun_seeds, search_problem, select_and_test
from modsar.sweep.storage import snapshots_of_tune_state
from modsar.sweep.timing import SearchClock, against_estimate
from modsar.sweep.trial import make_trainable


def make_scheduler(plan: Plan, concurrent: int) -> ASHAScheduler | SuccessiveHalving:
    """The plan's early stopping: Ray's asynchronous ASHA, or synchronous successive halving (which resumes
    promoted trials within `concurrent` at once)."""
    if plan.scheduler == "asha":
        return ASHAScheduler(
            time_attr=plan.time_attr,
            max_t=plan.max_t,
            grace_period=plan.grace_period,
            reduction_factor=plan.reduction_factor,
        )
    return SuccessiveHalving(
        time_attr=halving_time(plan),
        max_t=plan.max_t,
        grace_period=plan.grace_period,
        reduction_factor=plan.reduction_factor,
        max_running=concurrent,
    )


def build_tuner(
    plan: Plan, total: dict[str, float], task: str, fn, carried: Carried | None = None
) -> tune.Tuner:
    """A fresh Tuner for one direction, or for what is left of it after the ended trials `carried` (the
    direction goes on from their rows: modsar.sweep.carry_on). Note: constructing it writes tuner.pkl into
    its folder."""
    req = plan.request
    storage = experiment_folder(plan)
    concurrent = trial_slots(req, total)
    metric = f"best.{plan.monitor}"  # the scheduler compares each trial's best validation value so far
    scheduler = make_scheduler(plan, concurrent)
    search_alg, param_space = None, {}
    space = plan.space.for_task(task)
    samples = plan.samples_of(task)
    if plan.search_of(task) == "grid":
        left = carried if carried and not carried.replay else None  # else every point runs, its row replayed
        points = left.grid_left(space, samples) if left else space.grid_points()
        param_space, samples = {"point": tune.grid_search(points)}, 1 if left else samples
    else:
        from modsar.sweep.searcher import sampled_search

        search_alg = sampled_search(space.suggest, plan.search_of(task), metric, req.seed, concurrent)
        if carried:
            carried.tell_sampler(search_alg.searcher, space, plan.monitor)
            samples = samples if carried.replay else max(0, samples - len(carried))
    if carried and isinstance(scheduler, ASHAScheduler):
        carried.record_rungs(scheduler, plan)
    tune_config = tune.TuneConfig(
        metric=metric,
        mode="max",
        scheduler=scheduler,
        search_alg=search_alg,
        num_samples=samples,
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


def run_search(
    req: SearchRequest, plan: Plan | None = None, predicted: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run the search `req` asks for; `plan` is its make_plan(req) where the caller already made it, and
    `predicted` its cost estimate (CostEstimate.to_dict), kept in search.json beside the time it took."""
    plan = plan or make_plan(req)
    name = check_name(req.experiment_name, "experiment")
    storage = experiment_folder(plan)
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
    if req.resume and (kept := _with_stored_seeds(req, search_json)) is not req:
        print(
            f"--seeds {kept.seeds}: the seed re-runs this search was started with (a resume runs no fewer)",
            flush=True,
        )
        req = plan.request = kept
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
    if req.overwrite and not req.resume and fs_exists(storage):
        fs, path = filesystem(storage)
        fs.delete_dir(path)
    ended = _record_start(req, plan, search_json, predicted)
    started = time.perf_counter()
    # the clock is written as the run goes and when it ends, whatever ends it (clock_kept)
    with snapshots_of_tune_state(), stops_on_ctrl_c(plan, search_json), clock_kept(search_json, clock):
        trials, errors = _run_directions(req, plan, storage, total, clock, ended)
        with clock.part("select_test_s"):
            selected = select_and_test(plan)
        if req.seeds:
            with clock.part("seeds_s"):
                rerun_seeds(plan, selected)
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
        "against_estimate": _against_estimate(search_json, rows),
        "results": storage,
        "problem": search_problem(
            plan, rows, selected, f"{trials} trials: {errors} errors, {diverged} diverged"
        ),
    }


def _against_estimate(search_json: str, rows: pd.DataFrame) -> str:
    """timing.against_estimate of the search as search.json keeps it; best effort, like the clock itself."""
    try:
        return against_estimate(read_json(search_json), rows)
    except Exception:  # timing is a fact about the search, never a reason for it to fail
        return ""


def _record_start(req: SearchRequest, plan: Plan, search_json: str, predicted: dict | None) -> set[str]:
    """Write search.json for a new search (its request, settings and estimate), or check that a resumed one
    repeats its search and mark it running again; returns the directions an earlier run saw to their end."""
    settings = search_settings(plan)
    if req.resume:
        stored = read_json(search_json)
        check_same_search(plan, stored, settings)
        check_resumed_rows(plan)  # none of another search, none damaged: selection and seeds read them
        remove_partial_rows(rows_dir(plan), req.experiment_name)  # a row the killed driver was writing
        asked = stored.get("request") or {}
        more_seeds = {"request": {**asked, "seeds": req.seeds}} if req.seeds > asked.get("seeds", 0) else {}
        # the record says how many seed re-runs the search holds, however many runs asked for them
        record_state(search_json, RUNNING, trials_planned=planned_trials(plan), **more_seeds)
        return directions_ended(stored, plan.space.tasks())
    argv = [redact(arg) for arg in sys.argv]  # no password of a URI is written (sweep.credentials)
    state = {"status": RUNNING, "trials_planned": planned_trials(plan)}
    estimate = {"estimate": predicted} if predicted else {}
    write_json(
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
    return set()


def _with_stored_seeds(req: SearchRequest, search_json: str) -> SearchRequest:
    """A resumed search re-runs its picks on the seeds its record asks for, or on more where this run asks
    for more: a resume without --seeds once ended such a search complete without its seed re-runs."""
    asked = read_json(search_json).get("request") or {}
    stored = asked.get("seeds", 0)
    return replace(req, seeds=stored) if isinstance(stored, int) and stored > req.seeds else req


def _check_start(req: SearchRequest, plan: Plan, storage: str, search_json: str) -> None:
    """Refused before Ray starts: resuming what is not there, replacing what is there unasked, and a CUDA
    device for trials that hold no GPU."""
    if req.resume and not fs_exists(search_json):
        raise ModsarError(f"nothing to resume: no search in {storage}; run without --resume")
    if not req.resume and not req.overwrite and fs_exists(search_json):
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
    if foreign := _no_search_wrote(storage):
        raise ModsarError(
            f"--overwrite: {storage} also holds what no search wrote ({_first_three(foreign)}); "
            "nothing was deleted. Move those out of the folder, or choose another --experiment"
        )
    if added := _added_by_train(storage):
        name = storage.rstrip("/").rpartition("/")[2]
        raise ModsarError(
            f"--overwrite: {storage} also holds what `modsar train --experiment {name}` added to the search "
            f"({_first_three(added)}); nothing was deleted. Move those out of the folder (e.g. into "
            "another experiment's trials/ and checkpoints/), or choose another --experiment"
        )


def _first_three(names: list[str]) -> str:
    """Up to three names of a refusal, and how many more."""
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"{', '.join(names[:3])}{more}"


SEARCH_ROLES = frozenset({"search", "seed", "superseded"})  # the `role` of every row a search writes


OS_LITTER = (".DS_Store", ".nfs", "Thumbs.db")  # what a file browser or NFS leaves in any folder


def _no_search_wrote(storage: str) -> list[str]:
    """What lies at the top of a search's folder that neither a search (search.json, trials/, Tune's ray-*
    folders, a write in progress) nor `modsar train` (checkpoints/: _added_by_train) puts there: a user's
    notes, a report written into it. --overwrite must not delete them."""
    fs, path = filesystem(storage)
    entries = fs.get_file_info(pafs.FileSelector(path))
    ours = {"search.json", "trials", "checkpoints", *(f"{RAY_DIR}-{role}" for role in ("ae", "ar", "seeds"))}
    return sorted(
        info.base_name + ("/" if info.type == pafs.FileType.Directory else "")
        for info in entries
        if info.base_name not in ours and not info.base_name.startswith((PARTIAL_PREFIX, *OS_LITTER))
    )


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
        stored = read_json(search_json)
    except (OSError, ValueError):
        return False
    return isinstance(stored, dict) and isinstance(stored.get("request"), dict) and "base" in stored


CLOCK_EVERY_S = 30.0  # how often a running search writes its clock: what a driver killed unwarned loses


@contextlib.contextmanager
def clock_kept(search_json: str, clock: SearchClock, every_s: float = CLOCK_EVERY_S) -> Iterator[None]:
    """Write this run's clock to search.json at once, every `every_s` seconds (a thread) while the block
    runs, and when it ends: a driver killed without warning (a session's end, the OOM killer) keeps its run's
    seconds but the last few, where a clock written only after each direction lost the whole run."""
    stop = threading.Event()

    def keep() -> None:
        while True:
            clock.sample_load()
            _record_clock(search_json, clock)
            if stop.wait(every_s):
                return

    keeper = threading.Thread(target=keep, name="modsar-search-clock", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()
        _record_clock(search_json, clock)


def _record_clock(search_json: str, clock: SearchClock) -> None:
    """Put this run's clock in search.json's `timing` (one entry per run of the search), as the run goes
    (clock_kept) and when the run ends. Best effort: a search.json it cannot read or
    write keeps its earlier entries, and never replaces the fault that ended the search."""
    try:
        with STATE_LOCK:
            stored = read_json(search_json)
            runs = stored.get("timing") if isinstance(stored, dict) else None
            runs = [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []
            if clock.recorded:  # this run's entry is the last one: replace it
                runs = runs[:-1]
            record_state(search_json, stored.get("status", RUNNING), timing=[*runs, clock.record()])
            clock.recorded = True
    except Exception:  # timing is a fact about the search, never a reason for it to fail
        pass


def _run_directions(
    req: SearchRequest,
    plan: Plan,
    storage: str,
    total: dict[str, float],
    clock: SearchClock,
    ended: set[str],
) -> tuple[int, int]:
    """One Tuner (and its early stopping) per direction, as the original experiments, restored where a resumed
    search left one; each direction's rows are written as it ends. A direction in `ended` whose Tune state is
    gone (a folder of committed rows, another machine) keeps its rows and is not run again; one cut off
    mid-way goes on from its ended trials' rows (carry_on). Returns (trials, errors)."""
    trials, errors = 0, 0
    search_json = f"{storage}/search.json"
    for task in plan.space.tasks():
        ray_path = f"{storage}/{RAY_DIR}-{task}"
        if req.resume and task in ended and not tune.Tuner.can_restore(ray_path):
            if _rows_whole(plan, task):
                kept, failed = _kept_rows(plan, task)
                trials, errors = trials + kept, errors + failed
                continue
            ended.discard(task)  # a row lost since it ended: it goes on from its rows, as one cut off
        fn = make_trainable(plan, replays=_replays(plan, task) if req.resume else None)
        # restored before a fresh Tuner could write its tuner.pkl there
        restored = restored_tuner(ray_path, fn) if req.resume else None
        carried = _carried_on(plan, task, ray_path) if req.resume and restored is None else None
        if carried is not None and carried.all_ended(plan):  # every trial ended; the record had not
            kept, failed = _kept_rows(plan, task)
            trials, errors = trials + kept, errors + failed
            ended.add(task)
            record_state(search_json, RUNNING, directions_ended=sorted(ended))
            continue
        tuner = restored if restored is not None else build_tuner(plan, total, task, fn, carried)
        # Ctrl-C: Tune saves and ends this fit, and the search stops after it
        with fitting(), clock.part(f"direction:{task}"), restoring(ray_path, restored is not None):
            grid = tuner.fit()
        reconcile_rows(plan, grid)
        if req.resume:
            _set_aside_repeats(plan, task, grid)
        drop_resume_state(grid)
        ended.add(task)
        record_state(search_json, RUNNING, directions_ended=sorted(ended))
        trials, errors = trials + len(grid), errors + grid.num_errors
        if carried is not None and not carried.replay:  # the ended trials it did not run again (no errors)
            trials += len(carried)
    return trials, errors


def directions_ended(stored: dict[str, Any], tasks: list[str]) -> set[str]:
    """The directions (ae, ar) whose Tuner an earlier run of the search saw to its end, from its search.json:
    as recorded, or every one where a search from before the record is complete."""
    recorded = stored.get("directions_ended")
    if isinstance(recorded, list):
        return {t for t in tasks if t in recorded}
    return set(tasks) if stored.get("status") == COMPLETE else set()


def _direction_rows(plan: Plan, task: str) -> pd.DataFrame:
    """A direction's search-trial rows (role search)."""
    rows = read_rows(rows_dir(plan), plan.request.experiment_name)
    if not len(rows):
        return rows
    return rows[(rows["role"] == "search") & (rows["task"] == task)]


def _kept_rows(plan: Plan, task: str) -> tuple[int, int]:
    """A direction that ended in an earlier run keeps its rows and trains nothing: (its trials, its errors),
    said in one line."""
    mine = _direction_rows(plan, task)
    if not plan.request.quiet:
        print(f"{task.upper()}: ended in an earlier run; its {len(mine)} rows are kept", flush=True)
    return len(mine), int((mine["status"] == "error").sum()) if len(mine) else 0


def _rows_whole(plan: Plan, task: str) -> bool:
    """Whether a direction that ended in an earlier run still has a row for each trial it ran: a row deleted
    since (a committed folder edited, a file lost) would leave its grid point or sample out of the search
    for good, and the search would still say complete. A direction a time budget ended ran what it ran."""
    carried = carried_rows(_direction_rows(plan, task), task)
    left = carried.trials_left(plan)
    if left == 0 or plan.request.time_budget_s:
        return True
    if not plan.request.quiet:
        print(
            f"{task.upper()}: ended in an earlier run, but {_trials(left)} of its "
            f"{left + len(carried)} {'has' if left == 1 else 'have'} no row now; it runs again",
            flush=True,
        )
    return False


def _carried_on(plan: Plan, task: str, ray_path: str) -> Carried | None:
    """What a resumed direction without Tune state goes on from: the rows its trials wrote (carry_on), said
    in one line; None where it has none and starts afresh. Set aside first, as superseded: a second row of one
    point (a replay cut off), an error (retried, as Tune retries one), and under successive halving a row no
    replay can make again (its point trains again)."""
    halving = plan.scheduler == "halving"
    carried = carried_rows(_direction_rows(plan, task), task, replay=halving)
    if not len(carried):
        return None
    drop = {r["trial_id"] for r in repeated_rows(carried, plan.space.for_task(task), keep=set())}
    rows = carried.rows[~carried.rows["trial_id"].isin(drop)]
    keep = Carried(task, rows, halving).replayable(plan.unit) if halving else rows[rows["status"] != "error"]
    for row in carried.rows.drop(keep.index).to_dict("records"):
        rewrite_row(plan, {**row, "role": "superseded"})
    carried = Carried(task, keep, halving)
    if not len(carried):
        return None
    if not plan.request.quiet and not carried.all_ended(plan):
        how = "whose passes it replays untrained" if carried.replay else "which it does not train again"
        print(
            f"{task.upper()}: no Tune state to go on from in {redact(ray_path)}; it goes on from the rows of "
            f"{_trials(len(carried))}, {how}, and runs the {carried.trials_left(plan)} left",
            flush=True,
        )
    return carried


def _replays(plan: Plan, task: str) -> dict[str, list[dict]] | None:
    """Under successive halving, a resumed direction's trials with rows, as the reports a fresh trial of
    their point makes again (carry_on.replays_of): a trial Tune restores as pending without a checkpoint, or
    one a carry-on makes again, replays its row instead of training what the row holds."""
    if plan.scheduler != "halving":
        return None
    carried = carried_rows(_direction_rows(plan, task), task, replay=True)
    if not len(carried):
        return None
    rows = Carried(task, carried.replayable(plan.unit), replay=True)
    return replays_of(rows, plan.space.for_task(task), plan.monitor)


def _set_aside_repeats(plan: Plan, task: str, grid) -> None:
    """After a resumed direction's fit: a point with two rows keeps the one this fit's trial wrote."""
    keep = {trial_id for trial_id, _ in map(result_trial, grid) if trial_id}
    carried = carried_rows(_direction_rows(plan, task), task)
    for row in repeated_rows(carried, plan.space.for_task(task), keep) if len(carried) else []:
        rewrite_row(plan, {**row, "role": "superseded"})


def _trials(count: int) -> str:
    """'1 trial', '2 trials'."""
    return f"{count} trial{'' if count == 1 else 's'}"
