"""After a search's Tuners: the best trial of each compared model selected by validation and tested from its
best checkpoint, what a search whose model has no selectable trial must say, and the selected configs
re-run on other seeds (with the budget their search trial had)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from ray import tune

from modsar.data.store import load_dataset
from modsar.data.views import viewed
from modsar.outputs import is_uri
from modsar.records.rows import differing_keys, read_rows
from modsar.sweep.carry_on import row_point
from modsar.sweep.interrupt import (
    fitting,
)
from modsar.sweep.plan import STEPS_MAX_T, Plan, trial_config
from modsar.sweep.restore import restored_tuner, restoring
from modsar.sweep.rows import (
    make_callbacks,
    reconcile_rows,
    rewrite_row,
    rows_dir,
)
from modsar.sweep.search_folder import RAY_DIR, drop_resume_state, experiment_folder
from modsar.sweep.trial import make_trainable

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
    # a value no ranking metric can have (inf from a damaged row) is never the best
    scores = pd.to_numeric(rows[column], errors="coerce")
    candidates = rows[rows["status"].isin(["finished", "stopped"]) & scores.between(0.0, 1.0)]
    by = MODEL + plan.space.arms
    # (task, backbone, *arms) -> the best row
    winners = {
        key: group.sort_values([column, "trial_id"], ascending=[False, True]).iloc[0].to_dict()
        for key, group in candidates.groupby(by)
    }
    tested = {w["trial_id"] for w in winners.values() if _tested(w, plan.monitor)}
    _unmark_earlier(plan, every, rows, winners, by, tested)
    if not winners:
        return {}
    return _test_winners(plan, rows, winners, column, tested)


def _tested(row: dict, monitor: str) -> bool:
    """Whether a winner is already marked selected with its test metrics: an earlier run of the search
    selected and tested it (a trial that ended no longer changes, and testing is exact, so again would give
    the same figures; its checkpoint may not even be here: a folder of committed rows)."""
    selected, value = row.get("selected"), row.get(f"test.{monitor}")
    return bool(pd.notna(selected) and selected) and bool(pd.notna(value))


def _unmark_earlier(
    plan: Plan,
    every: pd.DataFrame,
    rows: pd.DataFrame,
    winners: dict[Any, dict],
    by: list[str],
    tested: set[str],
) -> None:
    """Before the winners are marked, earlier selections lose their mark and test metrics (unmarking first,
    a crash leaves none selected rather than two), but for winners `tested` already, and seed re-runs of a
    winner that is no longer one, or whose config now differs, are kept as superseded: no report cell uses
    them."""
    for earlier in rows[rows["selected"].astype(bool) & ~rows["trial_id"].isin(tested)].to_dict("records"):
        cleared = {k: None for k in earlier if k.startswith(("test.", "generate.", "test_from"))}
        earlier.update(cleared, selected=False)
        rewrite_row(plan, earlier)
    for key, seeds in every[every["role"] == "seed"].groupby(by):  # re-runs of an earlier winner
        winner = rows[rows["trial_id"] == winners[key]["trial_id"]] if key in winners else rows.iloc[:0]
        for seed_row in seeds.to_dict("records"):
            if not len(winner) or not is_replica(plan, winner, seed_row):
                rewrite_row(plan, {**seed_row, "role": "superseded"})


def is_replica(plan: Plan, winner: pd.DataFrame, seed_row: dict) -> bool:
    """Whether a seed row re-ran the winner (a one-row frame): their configs agree once the winner is given
    the budget its replicates run with. Where ASHA ended the search trial, its row says train.max_steps 0
    and a replicate's says the step ASHA stopped at (asha_budget); compared as stored, every resumed search
    would set its finished replicates aside and train them again."""
    expected = winner.assign(**asha_budget(plan, winner.iloc[0]))
    return not differing_keys(pd.concat([expected, pd.DataFrame([seed_row])]))


def _test_winners(
    plan: Plan, rows: pd.DataFrame, winners: dict[Any, dict], column: str, tested: set[str]
) -> dict[str, dict]:
    """Each winner tested on the CPU from its best checkpoint (and its rollouts measured), its row rewritten
    as selected, but for those `tested` already, whose row is kept; returns model_key -> its trial,
    validation and main test values."""
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
        key = model_key(task, backbone, backbones, tuple(arms))
        if best["trial_id"] in tested:
            selected[key] = _selected_entry(plan, best, column, best)
            continue
        if not _checkpoint_here(plan, best.get("checkpoint")):
            best.update(_tested_by_training(plan, best), selected=True)
            rewrite_row(plan, best)
            selected[key] = _selected_entry(plan, best, column, best)
            continue
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
        best.update({f"test.{k}": v for k, v in test.items()}, selected=True, test_from="checkpoint")
        best.update({f"generate.{k}": v for k, v in generation.items()})
        rewrite_row(plan, best)
        selected[key] = _selected_entry(plan, best, column, {f"test.{k}": v for k, v in test.items()})
    return selected


def _checkpoint_here(plan: Plan, where: Any) -> bool:
    """Whether a row's checkpoint can be read here: one on an object store (rows on a URI) is taken as there
    (reading it says otherwise in one line); a local one must be a file, or a trial's folder holding its
    best.pt (a replayed trial's holds none: carry_on)."""
    from modsar.training.checkpoints import CHECKPOINT_FILE

    if not isinstance(where, str) or not where.strip():
        return False
    if is_uri(where) or is_uri(plan.request.results):
        return True
    path = Path(where).expanduser()
    return path.is_file() or (path / CHECKPOINT_FILE).is_file()


def _selected_entry(plan: Plan, best: dict, column: str, test: dict) -> dict:
    """What the search returns of a selected trial: its id, validation and main test values."""
    keys = [f"test.{k}" for k in (plan.monitor, "recall@10", "ndcg@10")]
    return {"trial_id": best["trial_id"], column: best[column], **{k: test[k] for k in keys if k in test}}


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


def asha_budget(plan: Plan, row: pd.Series) -> dict[str, int]:
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
    if train.get("max_steps") and train["max_steps"] <= steps:  # the base's own budget ends it first
        return {}
    return {"train.max_steps": steps} if steps < per_epoch * train["max_epochs"] else {}


def rerun_seeds(plan: Plan, selected: dict[str, dict]) -> None:
    """Re-train each selected config on seeds 0..K-1 (tested in-trial); rows role=seed. A replicate gets the
    budget its search trial had: its patience, and ASHA's max_t where that ends a trial before its epochs do
    (the default search's last rung, 18,000 steps, comes before 200 epochs on Beauty)."""
    if not selected:
        return
    rows = read_rows(rows_dir(plan), plan.request.experiment_name)
    every: list[dict] = []  # seeds 0..K-1 of each selected config
    points = []  # those without a row yet, or with an errored one
    for info in selected.values():
        wanted, missing = _replicates_of(plan, rows, info["trial_id"])
        every += wanted
        points += missing
    if not points:
        return
    ray_path = f"{experiment_folder(plan)}/{RAY_DIR}-seeds"
    fn = make_trainable(plan, test=True)
    # an interrupted re-run goes on from each replicate's last pass, where what it has left is what is wanted
    restored = (
        restored_tuner(ray_path, fn, runs=_goes_on_with(every, points, rows)) if plan.request.resume else None
    )
    tuner = (
        restored
        if restored is not None
        else tune.Tuner(
            fn,
            param_space={"point": tune.grid_search(points)},
            tune_config=tune.TuneConfig(  # --max-concurrent holds here too (a GPU's memory, say)
                metric=f"best.{plan.monitor}", mode="max", max_concurrent_trials=plan.request.max_concurrent
            ),
            run_config=tune.RunConfig(
                name=f"{RAY_DIR}-seeds",
                storage_path=experiment_folder(plan),
                verbose=0,
                callbacks=make_callbacks(plan, role="seed"),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2),  # as a direction's Tuner
                failure_config=tune.FailureConfig(max_failures=plan.request.max_failures),
            ),
        )
    )
    with fitting(), restoring(ray_path, restored is not None):
        grid = tuner.fit()
    # a seed's row the disk refused ended the fit: said in one line; a row the killed driver missed: written
    reconcile_rows(plan, grid, role="seed")
    drop_resume_state(grid)


def _replicates_of(plan: Plan, rows: pd.DataFrame, trial_id: str) -> tuple[list[dict], list[dict]]:
    """The replicates of the selected trial `trial_id` on seeds 0..K-1 that a seeds' Tuner may run (its own
    seed's left out where the trial's own row stands for it: written here), and those still to train: no
    row yet, or an errored one (kept as superseded, and retried as search trials are)."""
    row = rows[rows["trial_id"] == trial_id].iloc[0]
    sampled = row_point(plan.space, row)
    task = sampled.get("task", plan.base["task"])
    backbone = sampled.get("model.backbone", plan.base["model"]["backbone"])
    same = (rows["task"] == task) & (rows["model.backbone"] == backbone)
    for arm in plan.space.arms:  # a seed of another arm of this task is not one of these
        same &= rows[arm] == row[arm]
    mine = rows[(rows["role"] == "seed") & same] if "role" in rows else rows.iloc[:0]
    for failed in mine[mine["status"] == "error"].to_dict("records"):  # retried below, as search trials are
        rewrite_row(plan, {**failed, "role": "superseded"})
    done = set(mine[mine["status"] != "error"]["seed"])
    budget = asha_budget(plan, row)
    own = int(row["seed"])  # the search's seed: that replicate is the search trial's own run
    stands_for_it = _ran_its_replicate(plan, row, budget)
    if own < plan.request.seeds and own not in done and stands_for_it:
        rewrite_row(plan, _own_replicate(row, budget))
        done.add(own)
    taken = {own} if own in done and stands_for_it else set()
    replicates = [{**sampled, **budget, "seed": s} for s in range(plan.request.seeds)]
    wanted = [p for p in replicates if p["seed"] not in taken]  # a Tuner that trains the trial again: not
    return wanted, [p for p in replicates if p["seed"] not in done]  # resumed: the rest


def _tested_by_training(plan: Plan, best: dict) -> dict[str, Any]:
    """The test (and rollout) figures of a winner whose checkpoint is not here (its direction went on from
    its rows on another machine: carry_on): its configuration trained again on its seed, to its trial's
    budget, on its trial's device and threads (more threads sum in another order), then tested. Bit for bit
    the trial's model only on its kind of CPU: the row says its figures are the retrained model's."""
    from modsar.config import set_value
    from modsar.randomness import caller_state_kept
    from modsar.training.trainer import run_trial

    row = pd.Series(best)
    point = {**row_point(plan.space, row), **asha_budget(plan, row), "seed": int(row["seed"])}
    cfg = trial_config(plan.base, plan.space, point)
    set_value(cfg, "train.threads", trial_threads(plan, row), "the selected trial's retraining")
    if str(row.get("device") or "cpu").startswith("cpu"):  # a driver's GPU would sum otherwise still
        set_value(cfg, "train.device", "cpu", "the selected trial's retraining")
    print(
        f"modsar: {row['task'].upper()}: the selected trial {row['trial_id']}'s checkpoint is not here; "
        "training it again on its seed to test it",
        file=sys.stderr,
        flush=True,
    )
    with caller_state_kept():  # the driver's generators and threads, as they were
        result = run_trial(cfg, progress=False, data_root=plan.data_root)
    was, now = row[f"valid.{plan.monitor}"], result.valid.get(plan.monitor)
    if now != was:
        print(
            f"modsar: warning: trial {row['trial_id']} trained again gives validation {plan.monitor} {now} "
            f"where its row has {was} ({_machines(row)}); its test figures are of the model trained here",
            file=sys.stderr,
            flush=True,
        )
    return {
        **{f"test.{k}": v for k, v in result.test.items()},
        **{f"generate.{k}": v for k, v in result.generation.items()},
        "test_from": "retrained",
        "test_from_valid": now,  # the retrained model's validation value of the monitored metric
    }


def _machines(row: pd.Series) -> str:
    """Where a trial and its retraining ran, as far as its row says (arithmetic differs across instruction
    sets, thread counts and devices)."""
    from modsar.devices import cpu_identity

    ran, here = row.get("cpu"), cpu_identity()
    if not isinstance(ran, str):
        return f"its row does not say which CPU trained it; this one is {here}"
    if ran != here:
        return f"it trained on {ran}, this on {here}"
    return f"both on {here}"


def trial_threads(plan: Plan, row: pd.Series) -> int:
    """The torch threads a search trial trained on: its row's record, else the CPUs each trial is given."""
    recorded = pd.to_numeric(pd.Series([row.get("torch_threads")]), errors="coerce").iloc[0]
    return int(recorded) if pd.notna(recorded) and recorded >= 1 else max(1, int(plan.request.cpus_per_trial))


def _ran_its_replicate(plan: Plan, row: pd.Series, budget: dict[str, int]) -> bool:
    """Whether the search trial `row` already ran its own seed's replicate: one config and seed give one
    curve, so where the replicate's budget would end it where the trial ended (patience or its epochs ended
    the trial before the budget, or the last rung stopped it at the replicate's step budget), training it
    again only repeats the trial to the last bit (as every committed seed re-run of a search's own seed
    did). A trial an earlier rung stopped did not: its replicate trains on to the budget."""
    steps, cap = pd.to_numeric(row.get("steps"), errors="coerce"), budget.get("train.max_steps")
    if pd.isna(steps):  # a row from before steps were recorded: train the replicate
        return False
    if row["status"] == "finished":
        return cap is None or steps <= cap
    return row["status"] == "stopped" and plan.unit == "steps" and cap is not None and steps >= cap


def _own_replicate(row: pd.Series, budget: dict[str, int]) -> dict[str, Any]:
    """The search trial's row as its own seed's replicate (role seed, `replica_of` its trial), with the
    budget a replicate is given, and ended as that replicate ends, on its own (finished: the last rung's stop
    is its step budget); its test figures are the selection's."""
    return {
        **row.to_dict(),
        **budget,
        "trial_id": f"{row['trial_id']}-seed{int(row['seed'])}",
        "status": "finished",
        "role": "seed",
        "selected": False,
        "replica_of": row["trial_id"],
    }


def _goes_on_with(every: list[dict], wanted: list[dict], rows: pd.DataFrame) -> Callable[[list], bool]:
    """Whether the seeds' Tuner an interrupted re-run left is to go on (given its trials: status, config,
    id): each trial it would run again, or that ended without a row (written from Tune's record after the
    fit), is a replicate of the current selection and seeds (not of an earlier winner, nor a seed --seeds no
    longer asks for), and each replicate still wanted is one of those. Else a fresh Tuner runs the wanted."""
    recorded = set(rows["trial_id"]) if len(rows) else set()

    def key(point: dict) -> str:  # JSON of the point; a value's type drifting (2 vs 2.0) only means afresh
        return json.dumps(point, sort_keys=True, default=str)

    current, missing = set(map(key, every)), set(map(key, wanted))

    def goes_on(trials: list) -> bool:
        left = {
            key(t.config["point"]) for t in trials if t.status != "TERMINATED" or t.trial_id not in recorded
        }
        return left <= current and missing <= left

    return goes_on
