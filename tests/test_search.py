"""`modsar search` on a real local Ray cluster (in-process), tiny spaces on synthetic data."""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
import torch
from test_pickle_contract import modsar_globals  # tests/ is on sys.path (no package)

from modsar.cli import main
from modsar.devices import cpu_identity
from modsar.records.rows import read_rows
from modsar.sweep.selection import trial_threads
from modsar.sweep.spaces import load_space
from modsar.sweep.storage import SNAPSHOT

SPACES = Path(__file__).parent / "spaces"


def search(*args: str) -> int:
    return main(
        ["search", "--quiet", "--no-estimate", *args]
    )  # the estimate's probe: tests/test_search_cost.py


def test_grid_asha_one_row_per_trial_and_selection(local_ray, data_dir, tmp_path, capsys):
    out = tmp_path / "results"
    assert (
        search(
            "--space",
            str(SPACES / "asha.yaml"),
            "--dataset",
            "synthetic",
            "--results",
            str(out),
            "--max-concurrent",
            "1",
            "--experiment",
            "g",
        )
        == 0
    )
    rows = read_rows(str(out), "g")
    space = load_space(str(SPACES / "asha.yaml"))
    points = space.grid_points()
    assert len(rows) == len(points) == 12 and rows["trial_id"].is_unique
    seen = {
        (r["task"], r["mask_prob"] if r["task"] == "ae" else None, r["model.dropout"], r["train.lr"])
        for _, r in rows.iterrows()
    }
    expected = {(p["task"], p.get("mask_prob"), p["model.dropout"], p["train.lr"]) for p in points}
    assert seen == expected  # grid covers every point, AR without the AE-only mask grid
    assert (rows["model.attn_dropout"] == rows["model.dropout"]).all()  # `also` keys follow
    stopped = rows[rows["status"] == "stopped"]
    assert len(stopped) >= 2 and (stopped["epochs_run"] < 4).all()  # ASHA stopped weak trials early
    assert (stopped["train.lr"] == 1e-6).sum() >= 2  # the trials that cannot learn go first
    assert (rows[rows["status"] == "finished"]["epochs_run"] == 4).all()
    assert set(rows["status"]) <= {"finished", "stopped"}
    assert rows["valid.ndcg@10"].notna().all() and rows["space"].eq("asha").all()
    selected = rows[rows["selected"]]
    assert sorted(selected["task"]) == ["ae", "ar"]  # the best AE and the best AR, tested
    assert (selected["train.lr"] == 0.005).all()
    assert selected["test.ndcg@10"].notna().all() and rows[~rows["selected"]]["test.ndcg@10"].isna().all()
    for _, group in rows.groupby("task"):
        best = group.loc[group["valid.ndcg@10"].idxmax()]
        assert best["selected"]
    assert "best AR" in capsys.readouterr().out

    # Where the time went: each trial's parts (set-up, epochs, validation, checkpoints, reports) fit in its
    # wall-clock, and the trials fit in the slot-seconds of the Tuners search.json timed (1 slot here)
    from modsar.sweep.timing import breakdown

    for column in ("setup_s", "checkpoint_s", "report_s"):
        assert (rows[column] >= 0).all(), column
    assert (rows["setup_s"] > 0).all() and (rows[rows["checkpoint_s"] > 0]["best_epoch"] >= 1).all()
    assert (rows["passes"] == rows["reports"]).all()  # one report a validation pass (no trial was resumed)
    parts = rows["setup_s"] + rows["epoch_time_s"] * rows["epochs_run"] + rows["eval_time_s"] * rows["passes"]
    assert (parts + rows["checkpoint_s"] + rows["report_s"] <= rows["wall_time_s"] + 1e-6).all()
    stored = json.loads((out / "g" / "search.json").read_text())
    (run,) = stored["timing"]
    assert run["slots"] == 1 and set(run["directions"]) == {"ae", "ar"} and run["connect_s"] > 0
    assert run["wall_s"] >= sum(run["directions"].values()) + run["select_test_s"] > 0
    table = breakdown(stored["timing"], rows).set_index("part")
    assert table.loc["search", "trials"] == 12 and table.loc["ae", "trials"] == 8
    assert 0 < table.loc["search", "trial_s"] <= table.loc["search", "slot_s"]  # busy <= 1
    assert table.loc["search", "idle_s"] == table.loc["search", "slot_s"] - table.loc["search", "trial_s"]

    # A selection left by an earlier run (a resume that retried trials) is undone: one selected row per task.
    from modsar.records.rows import write_row
    from modsar.sweep import SearchRequest, make_plan, select_and_test

    stale = rows[~rows["selected"]].iloc[0].to_dict()
    write_row(str(out), {**stale, "selected": True, "test.ndcg@10": 0.99})
    select_and_test(
        make_plan(
            SearchRequest(
                space=str(SPACES / "asha.yaml"), dataset="synthetic", results=str(out), experiment="g"
            )
        )
    )
    again = read_rows(str(out), "g")
    assert sorted(again[again["selected"]]["trial_id"]) == sorted(selected["trial_id"])
    assert again.set_index("trial_id").loc[stale["trial_id"], "test.ndcg@10"] != 0.99

    # `modsar evaluate` of a selected trial's checkpoint folder finds its row and equals its test.* values
    for row in again[again["selected"]].to_dict("records"):
        capsys.readouterr()
        assert main(["evaluate", "--checkpoint", row["checkpoint"], "--json"]) == 0
        scores = json.loads(capsys.readouterr().out)
        assert scores["row"] == row["trial_id"] and scores["row_differences"] == {}
        assert scores["metrics"] == {
            k.removeprefix("test."): v for k, v in row.items() if k.startswith("test.")
        }


@pytest.mark.slow
@pytest.mark.long
def test_seed_reruns_on_a_uri_store(local_ray, data_dir, tmp_path, capsys):
    uri = f"file://{tmp_path}/store"
    assert (
        search(
            "--space",
            str(SPACES / "seeds.yaml"),
            "--dataset",
            "synthetic",
            "--results",
            uri,
            "--experiment",
            "s",
            "--seeds",
            "2",
            "--cpus-per-trial",
            "2",
        )
        == 0
    )
    rows = read_rows(uri, "s")
    search_rows, seed_rows = rows[rows["role"] == "search"], rows[rows["role"] == "seed"]
    assert len(search_rows) == 2 and search_rows["selected"].all()
    assert sorted(zip(seed_rows["task"], seed_rows["seed"], strict=True)) == [
        ("ae", 0),
        ("ae", 1),
        ("ar", 0),
        ("ar", 1),
    ]
    assert seed_rows["test.ndcg@10"].notna().all() and (seed_rows["status"] == "finished").all()
    assert (rows["torch_threads"] == 2).all()  # torch threads follow the CPUs a trial holds
    ar = seed_rows[seed_rows["task"] == "ar"].sort_values("seed")
    assert ar["test.ndcg@10"].iloc[0] != ar["test.ndcg@10"].iloc[1]  # different seeds, different runs

    # --resume must repeat the search: a changed base is refused before anything runs
    assert (
        search(
            "--space",
            str(SPACES / "seeds.yaml"),
            "--dataset",
            "synthetic",
            "--results",
            uri,
            "--experiment",
            "s",
            "--seeds",
            "3",
            "--resume",
            "--max-epochs",
            "3",
        )
        == 2
    )
    assert "train.max_epochs 2 -> 3 changed" in capsys.readouterr().err

    # --resume with more seeds trains the missing ones and retries an errored one (an AE seed-1 node died)
    from modsar.records.rows import write_row

    lost = seed_rows[(seed_rows["task"] == "ae") & (seed_rows["seed"] == 1)].iloc[0].to_dict()
    lost = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in lost.items()}  # as stored
    write_row(uri, {**lost, "status": "error", "error": "RayActorError: the node died", "test.ndcg@10": None})
    assert (
        search(
            "--space",
            str(SPACES / "seeds.yaml"),
            "--dataset",
            "synthetic",
            "--results",
            uri,
            "--experiment",
            "s",
            "--seeds",
            "3",
            "--cpus-per-trial",
            "2",
            "--resume",
        )
        == 0
    )
    again = read_rows(uri, "s")
    seed_rows = again[again["role"] == "seed"]
    assert sorted(zip(seed_rows["task"], seed_rows["seed"], strict=True)) == [
        ("ae", 0),
        ("ae", 1),
        ("ae", 2),
        ("ar", 0),
        ("ar", 1),
        ("ar", 2),
    ]
    assert (seed_rows["status"] == "finished").all()
    assert set(ar["trial_id"]) <= set(seed_rows["trial_id"])  # AR seeds 0 and 1 were not trained again
    assert again.set_index("trial_id").loc[lost["trial_id"], "role"] == "superseded"

    # A seed re-run of another configuration (an earlier winner) is superseded when the selection is redone
    from modsar.sweep import SearchRequest, make_plan, select_and_test

    stale = {**ar.iloc[0].to_dict(), "trial_id": "old-winner-seed0", "train.lr": 0.5}
    write_row(uri, stale)
    select_and_test(
        make_plan(
            SearchRequest(space=str(SPACES / "seeds.yaml"), dataset="synthetic", results=uri, experiment="s")
        )
    )
    roles = read_rows(uri, "s").set_index("trial_id")["role"]
    assert roles["old-winner-seed0"] == "superseded" and (roles[list(seed_rows["trial_id"])] == "seed").all()


@pytest.mark.slow
@pytest.mark.long
def test_the_search_trial_stands_for_its_own_seed_and_equals_a_real_rerun(local_ray, data_dir, tmp_path):
    """--seeds 2 after a search on seed 0 trains only seed 1: seed 0's replicate is the selected trial's own
    row (replica_of). The same search on seed 1 trains seed 0 for real, and the two agree to the last bit
    both ways: the row taken as a replicate is the run a replicate trains (one config and seed, one curve)."""
    out = str(tmp_path / "results")
    for seed in (0, 1):
        assert (
            search(
                "--space",
                str(SPACES / "seeds.yaml"),
                "--dataset",
                "synthetic",
                "--results",
                out,
                "--experiment",
                f"s{seed}",
                "--seed",
                str(seed),
                "--seeds",
                "2",
            )
            == 0
        )
    facts = ["steps", "epochs_run", "best_epoch", "curve", "valid.ndcg@10", "test.ndcg@10", "test.recall@10"]
    replicas = {}
    for seed in (0, 1):
        rows = read_rows(out, f"s{seed}")
        seeds = rows[rows["role"] == "seed"].set_index(["task", "seed"]).sort_index()
        chosen = rows[rows["selected"].astype(bool)].set_index("task")
        assert list(seeds.index) == [("ae", 0), ("ae", 1), ("ar", 0), ("ar", 1)]
        for task in ("ae", "ar"):
            own = seeds.loc[(task, seed)]
            assert own["replica_of"] == chosen.loc[task, "trial_id"]
            assert own["trial_id"] == f"{chosen.loc[task, 'trial_id']}-seed{seed}"
            other = seeds.loc[(task, 1 - seed)]
            assert pd.isna(other.get("replica_of")), "the other seed was trained"
        trained = [d for d in (Path(out) / f"s{seed}" / "ray-seeds").iterdir() if d.is_dir()]
        assert len(trained) == 2, trained  # the seeds' Tuner trained one replicate a direction, not two
        replicas[seed] = seeds
    assert replicas[0][facts].equals(replicas[1][facts]), replicas[0][facts].compare(replicas[1][facts])


@pytest.mark.slow
def test_trial_error_is_recorded_and_search_completes(local_ray, data_dir, tmp_path, capsys):
    out = tmp_path / "results"
    assert (
        search(
            "--space",
            str(SPACES / "errors.yaml"),
            "--dataset",
            "synthetic",
            "--results",
            str(out),
            "--experiment",
            "e",
        )
        == 0
    )  # one trial errored, the other was selected: the search answered
    assert "2 trials (1 errors, 0 diverged)" in capsys.readouterr().out
    rows = read_rows(str(out), "e").set_index("train.device")
    assert rows.loc["cpu", "status"] == "finished" and rows.loc["cpu", "selected"]
    assert rows.loc["cuda:9", "status"] == "error" and not rows.loc["cuda:9", "selected"]
    assert "cuda" in rows.loc["cuda:9", "error"].lower()


@pytest.mark.slow
def test_a_search_whose_every_trial_fails_exits_non_zero_saying_why(local_ray, data_dir, tmp_path, capsys):
    """The trials raise in their first forward pass (a plugin backbone that passes every check): before, the
    search printed "2 trials (2 errors, 0 diverged)", selected nothing and exited 0. --json still prints its
    summary, as strict JSON."""
    from modsar.model import registry

    plugin = Path(__file__).parent / "plugins" / "failing_backbone.py"
    space = tmp_path / "failing.yaml"
    space.write_text(
        "description: every trial raises\nbase:\n  model.backbone: failing\n"
        "  model.hidden_size: 8\nparams:\n  task: {grid: [ar]}\n"
        "  train.lr: {grid: [0.01, 0.001]}\n"
        "budget: {search: grid, num_samples: 1, max_epochs: 1, eval_every: 1}\n"
    )
    registry.load_plugins([str(plugin)])
    try:
        out = tmp_path / "results"
        code = search(
            "--space",
            str(space),
            "--dataset",
            "synthetic",
            "--results",
            str(out),
            "--experiment",
            "f",
            "--json",
        )
    finally:
        registry.unregister("failing")
    captured = capsys.readouterr()
    summary = json.loads(captured.out, parse_constant=lambda name: pytest.fail(f"{name} in search --json"))
    assert code == 2 and summary["trials"] == 2 and summary["errors"] == 2 and summary["selected"] == {}
    errors = [line for line in captured.err.splitlines() if line.startswith("modsar:")]
    assert errors == [
        "modsar: error: search 'f' selected nothing: no trial ended with a validation score (2 trials: "
        "2 errors, 0 diverged; first error: RuntimeError: the failing test backbone refuses every forward "
        f"pass); see `modsar results --results {out} --experiment f`"
    ]
    assert summary["problem"] == errors[0].removeprefix("modsar: error: ")
    rows = read_rows(str(out), "f")
    assert len(rows) == 2 and rows["status"].eq("error").all() and not rows["selected"].any()
    assert json.loads((out / "f" / "search.json").read_text(), parse_constant=pytest.fail)["search"] == "grid"


def test_a_model_none_of_whose_trials_could_be_selected_fails_the_search(tmp_path):
    """AE all errored, AR selected: half an AE-vs-AR answer is none (no Ray: rows as a search leaves them)."""
    from modsar.records.rows import write_row
    from modsar.sweep import SearchRequest, make_plan
    from modsar.sweep.selection import search_problem

    out = str(tmp_path / "results")
    plan = make_plan(
        SearchRequest(space=str(SPACES / "tiny.yaml"), dataset="synthetic", results=out, experiment="p"),
        check=False,
    )
    common = {"experiment": "p", "role": "search", "model.backbone": "modular", "selected": False}
    write_row(out, {**common, "trial_id": "t1", "task": "ae", "status": "error", "error": "OSError: boom"})
    write_row(out, {**common, "trial_id": "t2", "task": "ae", "status": "diverged", "error": "nan loss"})
    write_row(out, {**common, "trial_id": "t3", "task": "ar", "status": "finished", "valid.ndcg@10": 0.2})
    rows = read_rows(out, "p")
    assert search_problem(plan, rows, {"ar": {"trial_id": "t3"}}, "3 trials: 1 errors, 1 diverged") == (
        "search 'p' selected no AE: no trial of it ended with a validation score (3 trials: 1 errors, "
        f"1 diverged; first error: OSError: boom); see `modsar results --results {out} --experiment p`"
    )
    assert search_problem(plan, rows, {"ae": {}, "ar": {}}, "") is None


@pytest.mark.slow
def test_diverged_trial_is_recorded_never_selected(local_ray, data_dir, tmp_path, capsys):
    out = tmp_path / "results"
    assert (
        search(
            "--space",
            str(SPACES / "diverge.yaml"),
            "--dataset",
            "synthetic",
            "--results",
            str(out),
            "--experiment",
            "d",
            "--max-failures",
            "2",
        )
        == 0
    )
    assert "2 trials (0 errors, 1 diverged)" in capsys.readouterr().out
    rows = read_rows(str(out), "d").set_index("train.lr")
    diverged = rows.loc[1e30]
    assert diverged["status"] == "diverged" and "loss became nan at epoch 1" in diverged["error"]
    assert not diverged["selected"] and diverged["reports"] == 1  # ended once, not retried as an error
    assert math.isnan(diverged["valid.ndcg@10"])  # never validated: the 0.0 given to Tune is not a result
    assert rows.loc[0.003, "status"] == "finished" and rows.loc[0.003, "selected"]


def test_invalid_space_is_refused_before_ray_with_every_problem(tmp_path, capsys):
    out = tmp_path / "results"
    assert (
        main(
            ["search", "--space", str(SPACES / "mixed.yaml"), "--dataset", "synthetic", "--results", str(out)]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "modsar: error: space 'mixed' (grid search: AE 8, AR 8 trials): 10 of 16 configurations are invalid "
        "on dataset synthetic; nothing was run:",
        "  8 configurations with model.num_heads=3, model.dropout=0.0: 'model.hidden_size' (16) must be "
        "divisible by 'model.num_heads' (3)",
        "  2 configurations with model.backbone=llama, model.num_heads=1, model.local_heads=1, "
        "model.dropout=0.0: "
        "llama has no 'model.local_heads' (a design knob of the modular backbone; the HuggingFace model "
        "keeps its own); leave it at 0",
    ]
    assert not out.exists()


@pytest.mark.parametrize(
    "body,search,message",
    [
        (
            "  model.num_heads: {randint: [1, 5]}\n",
            "random",  # 3 lies between the bounds: checked too
            "  model.dropout=0.0, model.num_heads=3: 'model.hidden_size' (16) must be divisible by "
            "'model.num_heads' (3)",
        ),
        (
            "  train.lr: {loguniform: [1.0e-4, 1.0e+39]}\n",
            "optuna",
            "model.dropout=0.0, train.lr=1e+39: 'train.lr' must be a finite number of float32 range",
        ),
        ("  mask_prob: {uniform: [0.0, 0.5]}\n", "random", "mask_prob=0.0: 'mask_prob' must be in (0, 1)"),
    ],
)
def test_random_and_optuna_spaces_are_checked_at_bounds_and_small_ranges(
    tmp_path, capsys, body, search, message
):
    path = tmp_path / "s.yaml"
    path.write_text("base: {model.hidden_size: 16}\nparams:\n  model.dropout: {grid: [0.0]}\n" + body)
    assert main(["spaces", str(path), "--check", "--search", search]) == 2
    err = capsys.readouterr().err
    assert message in err and "nothing was run" in err and "Traceback" not in err


def test_a_condition_on_a_wide_range_is_checked_and_wide_products_stay_small(tmp_path, capsys):
    conditional = tmp_path / "c.yaml"  # num_layers=3 is inside a wide range: the check must visit it
    conditional.write_text(
        "params:\n  model.num_layers: {randint: [1, 100]}\n"
        "  model.local_heads: {grid: [1, 2], when: {model.num_layers: [3]}}\n"
    )
    assert main(["spaces", str(conditional), "--check", "--search", "random"]) == 2
    assert (
        "model.num_layers=3, model.local_heads=2: 'model.local_heads' must be between 0 and model.num_heads"
        in capsys.readouterr().err
    )
    wide = tmp_path / "w.yaml"  # 31^3 points at every value: checked at the bounds instead
    wide.write_text(
        "params:\n"
        + "".join(
            f"  {k}: {{randint: [1, 32]}}\n"
            for k in ("train.patience", "data.eval_batch_size", "data.batch_size")
        )
    )
    assert main(["spaces", str(wide), "--check", "--search", "random"]) == 0
    assert "all 8 configurations are valid" in capsys.readouterr().out


def test_without_a_dataset_no_size_is_invented(tmp_path, capsys):
    path = tmp_path / "s.yaml"  # the usual 1 + 100 sampled protocol: its size check needs the dataset
    path.write_text("base: {eval.sampled_negatives: 100}\nparams:\n  task: {grid: [ae, ar]}\n")
    assert main(["spaces", str(path), "--check"]) == 0
    assert main(["spaces", str(path), "--check", "--dataset", "synthetic"]) == 0  # 300 items
    capsys.readouterr()


def test_task_with_a_condition_and_negative_samples_are_refused(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(
        "params:\n  model.dropout: {grid: [0.0, 0.1]}\n  task: {grid: [ae, ar], when: {model.dropout: 0.1}}\n"
    )
    assert main(["spaces", str(path), "--check"]) == 2
    assert "the AE/AR switch cannot have a 'when' condition" in capsys.readouterr().err
    assert main(["spaces", "quickstart", "--check", "--search", "random", "--num-samples", "-3"]) == 2
    assert "--num-samples must be >= 1; got -3" in capsys.readouterr().err


@pytest.mark.parametrize(
    "space", sorted(p.stem for p in (Path(__file__).parent.parent / "search_spaces").glob("*.yaml"))
)
def test_every_bundled_space_passes_its_check(space, capsys):
    loaded = load_space(space)
    timed = loaded.base.get("data.split") == "temporal"  # synthetic has no timestamps (checked below)
    if any(
        p.key == "model.time_bias" for p in loaded.params
    ):  # a time bias needs timestamps whatever the split: checked without data
        assert main(["spaces", space, "--check"]) == 0
        assert "configurations are valid" in capsys.readouterr().out
        assert main(["spaces", space, "--check", "--dataset", "synthetic", "data.split=loo"]) == 2
        assert "model.time_bias=gap needs timestamps, and the dataset has none" in capsys.readouterr().err
        return
    assert (
        main(["spaces", space, "--check", "--dataset", "synthetic", *(["data.split=loo"] if timed else [])])
        == 0
    )
    out = capsys.readouterr().out.strip()
    search = loaded.budget.get("search", "grid")
    assert (
        out.startswith(f"space '{space}' ({search} search: AE ")
        and "configurations are valid on dataset synthetic" in out
    )
    if loaded.full_grid:  # the paper spaces: TPE by default, the full grid one flag away
        assert out.startswith(f"space '{space}' (optuna search: AE 20, AR ")
        assert main(["spaces", space, "--check", "--dataset", "synthetic", "--full-grid"]) == 0
        assert capsys.readouterr().out.startswith(f"space '{space}' (grid search: AE ")


@pytest.mark.slow
def test_optuna_seed_reproduces_first_configurations(local_ray, data_dir, tmp_path):
    out = tmp_path / "results"
    configs = []
    for name in ("o1", "o2"):
        assert (
            search(
                "--space",
                str(SPACES / "continuous.yaml"),
                "--dataset",
                "synthetic",
                "--results",
                str(out),
                "--experiment",
                name,
                "--seed",
                "7",
                "--max-concurrent",
                "1",
            )
            == 0
        )
        rows = read_rows(str(out), name)
        configs.append(
            rows.sort_values("trial_index")[
                ["model.dropout", "train.lr", "model.num_heads", "data.batch_size"]
            ].to_dict("records")
        )
    assert len(configs[0]) == 3 and configs[0] == configs[1]
    assert len({c["train.lr"] for c in configs[0]}) == 3  # really sampled
    assert all(1e-4 <= c["train.lr"] <= 1e-2 and 64 <= c["data.batch_size"] <= 256 for c in configs[0])


@pytest.mark.slow
def test_a_sampled_search_runs_a_small_direction_as_its_grid_and_the_full_grid_on_request(
    local_ray, data_dir, tmp_path
):
    """AE (6 points) is sampled 3 times by TPE, 3 distinct configurations; AR (2 points, fewer than 3
    samples) runs its grid, each point once; --full-grid runs all 8 into <space>-<dataset>-full-grid."""
    out, space = tmp_path / "results", str(SPACES / "tpe_small_ar.yaml")
    assert search("--space", space, "--dataset", "synthetic", "--results", str(out)) == 0
    rows = read_rows(str(out), "tpe_small_ar-synthetic")
    assert rows.groupby("task")["search_algorithm"].agg(list).to_dict() == {
        "ae": ["optuna"] * 3,
        "ar": ["grid"] * 2,
    }
    assert sorted(rows[rows.task == "ar"]["model.dropout"]) == [0.0, 0.2]
    ae = rows[rows.task == "ae"]
    assert len(set(zip(ae["model.dropout"], ae["mask_prob"], strict=True))) == 3  # no configuration twice
    # what the search pickled names modsar code by the contract's path only (modsar.sweep.pickled)
    saved = out / "tpe_small_ar-synthetic" / "ray-ae"
    states = [saved / "tuner.pkl", *saved.glob("searcher-state-*.pkl"), *saved.glob("callback-states-*.pkl")]
    assert len(states) == 3
    for state in states:
        named = modsar_globals(state.read_bytes())
        assert {n.split()[0] for n in named} <= {"modsar.sweep.pickled"}, (state.name, sorted(named))
    assert search("--space", space, "--dataset", "synthetic", "--results", str(out), "--full-grid") == 0
    full = read_rows(str(out), "tpe_small_ar-synthetic-full-grid")
    assert len(full) == 8 and set(full["search_algorithm"]) == {"grid"}
    stored = json.loads((out / "tpe_small_ar-synthetic-full-grid" / "search.json").read_text())
    assert stored["full_grid"] is True and stored["directions"] == {"ae": ["grid", 1], "ar": ["grid", 1]}


@pytest.mark.parametrize(
    "args,message",
    [
        (["--space", str(SPACES / "asha.yaml"), "--dataset", "nosuch"], "dataset 'nosuch' is not prepared"),
        (["--space", "nosuch", "--dataset", "synthetic"], "unknown space 'nosuch'"),
        (
            ["--space", str(SPACES / "asha.yaml"), "--dataset", "synthetic", "--gpus-per-trial", "0.5"],
            "asks for a GPU, but the Ray cluster has none",
        ),
        (
            ["--space", str(SPACES / "asha.yaml"), "--dataset", "synthetic", "--cpus-per-trial", "64"],
            "exceeds the largest node's 2 CPUs",
        ),
        (
            ["--space", str(SPACES / "continuous.yaml"), "--dataset", "synthetic", "--search", "grid"],
            "grid search needs grid/choice params",
        ),
        (
            ["--space", str(SPACES / "asha.yaml"), "--dataset", "synthetic", "train.device=cuda"],
            "train.device=cuda, but a trial sees a GPU only when --gpus-per-trial gives it one",
        ),
        *(
            (
                ["--space", str(SPACES / "asha.yaml"), "--dataset", "synthetic", flag, value],
                f"{flag} must be {rule}",
            )
            for flag, value, rule in (
                ("--max-t", "-3", ">= 1"),
                ("--max-t", "0", ">= 1"),
                ("--grace-period", "-2", ">= 1"),
                ("--max-concurrent", "-1", ">= 1"),
                ("--seeds", "-1", ">= 0"),
                ("--max-failures", "-2", ">= 0"),
                ("--max-epochs", "0", ">= 1"),
                ("--time-budget", "0", "> 0 seconds"),
            )
        ),
    ],
)
def test_bad_requests_fail_cleanly(local_ray, data_dir, tmp_path, capsys, args, message):
    out = tmp_path / "results"
    assert search(*args, "--results", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()


@pytest.mark.parametrize(
    "body,message",
    [
        ("params:\n  model.hiden_size: {grid: [16]}\n", "unknown key 'model.hiden_size'"),
        ("params:\n  model.dropout: {gaussian: [0, 1]}\n", "unknown field 'gaussian'"),
        ("params:\n  train.lr: {loguniform: [0, 1]}\n", "'loguniform' needs low > 0"),
        ("params:\n  mask_prob: {grid: [0.2], when: {task: ae}}\n", "'when' refers to 'task'"),
        ("params:\n  task: {grid: [ae]}\nschedule: {}\n", "unknown top-level key 'schedule'"),
        ("params:\n  model.dropout: {grid: [0.1]}\n  x: !!python/object:os.system {}\n", "not valid YAML"),
        ("params:\n  1: {grid: [1]}\n", "key 1 is not a config name"),
        ("base: {train.lr: .nan}\nparams:\n  task: {grid: [ar]}\n", "'train.lr' must be a finite number"),
        ("\udcff\udcfe", "is not a text (UTF-8) file"),
        (
            "params:\n  data.split: {grid: [loo, temporal]}\n",
            "a search cannot vary how the data is viewed or split",
        ),
    ],
)
def test_bad_space_files(tmp_path, capsys, body, message):
    path = tmp_path / "bad.yaml"
    path.write_bytes(body.encode("utf-8", "surrogateescape"))
    assert (
        main(["search", "--space", str(path), "--dataset", "synthetic", "--results", str(tmp_path / "r")])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "r").exists()


def _descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _mid_run(experiment: Path, tag: str, tuners: str = "ray-*", epochs: tuple = (2, 3)) -> bool:
    """Tune's saved experiment state (of the Tuners matching `tuners`) has the trial tagged `tag` ("": any)
    running with 3+ epochs left (or at `epochs`): a kill now lands after its first checkpoint is on record
    and before it ends."""
    for state_file in experiment.glob(f"{tuners}/experiment_state-*.json"):
        try:
            trials = json.loads(state_file.read_text())["trial_data"]
        except (OSError, ValueError, KeyError):  # being rewritten
            continue
        for trial, runtime in trials:
            last = json.loads(runtime).get("last_result") or {}
            if json.loads(trial).get("experiment_tag", "").endswith(tag) and last.get("epoch") in epochs:
                return True
    return False


def _resume_space_search(out: Path, experiment: str, *options: str) -> list[str]:
    """The command line of a search of tests/spaces/resume.yaml (one trial at a time, so that ASHA decides
    alike in every run) in a subprocess, which a test can kill."""
    return [
        sys.executable,
        "-m",
        "modsar.cli",
        "search",
        "--space",
        str(SPACES / "resume.yaml"),
        "--dataset",
        "synthetic",
        "--results",
        str(out),
        "--experiment",
        experiment,
        "--quiet",
        "--max-concurrent",
        "1",
        *options,
    ]


def _kill_with_family(proc: subprocess.Popen) -> None:
    """SIGKILL a driver and every process under it (its local Ray), as the OOM killer would."""
    family = _descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    for child in family:
        child.kill()
    proc.wait()


@pytest.mark.slow
@pytest.mark.long
def test_sigkill_driver_then_resume(data_dir, tmp_path):
    """Kill the driver (and its local Ray) while a trial is mid-run; --resume continues that trial from its
    checkpoint and ASHA from its rungs, and every row equals the row of a search that was never killed."""
    out = tmp_path / "results"
    cmd = _resume_space_search(out, "k")
    env = {**os.environ, "MODSAR_DATA": str(data_dir)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    trials = out / "k" / "trials"
    deadline = time.time() + 240  # the third trial (best lr) outlives every rung: catch it mid-run
    while time.time() < deadline and not _mid_run(out / "k", "model_dropout_0_0_train_lr_0_003"):
        time.sleep(0.05)
    _kill_with_family(proc)
    before = len(list(trials.glob("[!.]*.parquet")))  # a row being written at the kill stays a .tmp- file
    assert before == 2, "the driver was killed while the third trial ran"
    (trials / ".tmp-killed-mid-write.parquet").write_bytes(b"PAR1 half a row")  # as a kill mid-write leaves

    done = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    files = sorted(trials.glob("*.parquet"))
    assert len(files) == 6 and not list(trials.glob(".tmp*"))
    ids = [pq.read_table(f).column("trial_id")[0].as_py() for f in files]  # every file reads back
    assert len(set(ids)) == 6
    rows = read_rows(str(out), "k").set_index(["model.dropout", "train.lr"])
    assert set(rows["status"]) <= {"finished", "stopped"} and rows["selected"].sum() == 1
    continued = rows.loc[
        (0.0, 0.003)
    ]  # its curve holds epochs reported before the kill, by the killed driver
    assert continued["reports"] < len(json.loads(continued["curve"])) == continued["epochs_run"]
    at = json.loads(continued["curve_steps"])  # and the steps of those passes, from its checkpoint's history
    assert [s for _, s in at] == [e * continued["steps_per_epoch"] for e, _ in json.loads(continued["curve"])]
    assert all(Path(c).exists() for c in rows["checkpoint"]) and len(list((out / "k").rglob("best.pt"))) >= 6
    assert not list((out / "k").rglob("resume.pt"))  # the search ended: only the weights stay
    # the killed run kept its clock as it went (sweep.tuner.clock_kept): two runs, the first with its seconds
    killed, resumed_run = json.loads((out / "k" / "search.json").read_text())["timing"]
    assert killed["wall_s"] > killed["connect_s"] > 0 and killed["started_at"] < resumed_run["started_at"]

    whole = subprocess.run(
        _resume_space_search(out, "whole"), env=env, capture_output=True, text=True, timeout=600
    )
    assert whole.returncode == 0, whole.stderr[-2000:]
    facts = [
        "status",
        "epochs_run",
        "best_epoch",
        "valid.ndcg@10",
        "valid.recall@10",
        "curve",
        "selected",
        "test.ndcg@10",
    ]
    resumed, uninterrupted = (
        read_rows(str(out), name).set_index(["model.dropout", "train.lr"]).sort_index()[facts]
        for name in ("k", "whole")
    )
    assert resumed.equals(uninterrupted), resumed.compare(uninterrupted)


@pytest.mark.slow
@pytest.mark.long
def test_sigkill_during_seed_reruns_then_resume(data_dir, tmp_path):
    """Kill the driver while a seed replicate is mid-run; --resume restores the seeds' Tuner, so that
    replicate goes on from its last checkpoint instead of starting again, and every seed row equals the row
    of a search that was never killed."""
    out = tmp_path / "results"
    options = ("--no-estimate", "--seeds", "2")
    cmd = _resume_space_search(out, "k", *options)
    env = {**os.environ, "MODSAR_DATA": str(data_dir)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    # a replicate's 6 epochs take seconds: any saved state with epochs left will do
    while not (caught := _mid_run(out / "k", "", "ray-seeds", (1, 2, 3, 4))) and time.time() < deadline:
        time.sleep(0.02)
    _kill_with_family(proc)
    assert caught, "no seed replicate was seen mid-run"
    rows = read_rows(str(out), "k")
    assert (rows["role"] == "search").sum() == 6 and (rows["role"] == "seed").sum() < 2, "killed mid-seeds"

    done = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    whole = subprocess.run(
        _resume_space_search(out, "whole", *options), env=env, capture_output=True, text=True, timeout=600
    )
    assert whole.returncode == 0, whole.stderr[-2000:]
    resumed, uninterrupted = (
        read_rows(str(out), name).query("role == 'seed'").set_index("seed").sort_index()
        for name in ("k", "whole")
    )
    assert list(resumed.index) == [0, 1] and (resumed["status"] == "finished").all()
    # the replicate caught mid-run went on from its checkpoint: fewer reports than a whole run's, one curve
    assert (resumed["reports"] < uninterrupted["reports"]).any(), resumed[["reports", "epochs_run"]]
    facts = ["epochs_run", "best_epoch", "valid.ndcg@10", "curve", "test.ndcg@10", "test.recall@10"]
    assert resumed[facts].equals(uninterrupted[facts]), resumed[facts].compare(uninterrupted[facts])
    assert not list((out / "k").rglob("resume.pt"))  # the search ended: only the weights stay


@pytest.mark.slow
@pytest.mark.parametrize("space", ["hf_albert", "hf_llama", "hf_transfo_xl"])
def test_hf_spaces_run_end_to_end(local_ray, data_dir, tmp_path, space):
    out = tmp_path / "results"
    assert (
        search(
            "--space",
            space,
            "--dataset",
            "synthetic",
            "--results",
            str(out),
            "--experiment",
            space,
            "--search",
            "random",
            "--num-samples",
            "1",
            "--max-epochs",
            "1",
            "model.hidden_size=16",
            "train.eval_every=1",
        )
        == 0
    )
    rows = read_rows(str(out), space)
    assert sorted(rows["task"]) == ["ae", "ar"] and (rows["status"] == "finished").all()
    assert rows["model.backbone"].eq(space[3:]).all() and rows["test.ndcg@10"].notna().all()


def test_a_plugin_backbone_runs_a_trial_in_a_ray_worker(local_ray, data_dir, tmp_path):
    """The worker never imported the test's plugin: the search forwards the driver's loaded plugins to it; the
    space varies the plugin's own setting (model.toy.recency), and each row records the value it ran."""
    from modsar.model import registry

    plugin = Path(__file__).parent / "plugins" / "toy_backbone.py"

    space = tmp_path / "toy.yaml"
    space.write_text(
        "description: toy plugin backbone\nbase:\n  model.backbone: toy\n  model.hidden_size: 8\n"
        "params:\n  task: {grid: [ar]}\n  model.toy.recency: {grid: [0.0, 0.5]}\n"
        "budget: {search: grid, num_samples: 1, max_epochs: 1, eval_every: 1}\n"
    )
    registry.load_plugins([str(plugin)])
    try:
        out = tmp_path / "results"
        assert (
            search(
                "--space", str(space), "--dataset", "synthetic", "--results", str(out), "--experiment", "toy"
            )
            == 0
        )
    finally:
        registry.unregister("toy")
    rows = read_rows(str(out), "toy")
    assert len(rows) == 2 and rows["status"].eq("finished").all() and rows["model.backbone"].eq("toy").all()
    assert sorted(rows["model.toy.recency"]) == [0.0, 0.5]  # the plugin's own setting, searched
    assert rows["valid.ndcg@10"].nunique() == 2  # each trial's model read its own value
    assert rows.loc[rows["selected"], "test.ndcg@10"].notna().all() and rows["selected"].sum() == 1


@pytest.mark.skipif(
    not __import__("torch").cuda.is_available(),
    reason="no CUDA device here: the fractional-GPU placement test needs one",
)
def test_fractional_gpus_share_one_device(data_dir, tmp_path):
    """Four trials with --gpus-per-trial 0.25 run at the same time on one GPU, each on the device Ray gave
    it."""
    import torch

    ray.init(num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        out = tmp_path / "results"
        assert (
            search(
                "--space",
                str(SPACES / "asha.yaml"),
                "--dataset",
                "synthetic",
                "--results",
                str(out),
                "--experiment",
                "gpu",
                "--gpus-per-trial",
                "0.25",
                "--cpus-per-trial",
                "1",
            )
            == 0
        )
    finally:
        ray.shutdown()
    rows = read_rows(str(out), "gpu")
    assert len(rows) == 12 and rows["device"].str.startswith("cuda").all() and torch.cuda.device_count() >= 1
    import pandas as pd

    end = pd.to_datetime(rows["finished_at"]).astype("int64") / 1e9
    start = end - rows["wall_time_s"]
    overlapping = max(((start <= t) & (end >= t)).sum() for t in start)  # trials running at one moment
    assert overlapping >= 2  # several 0.25-GPU trials shared the single GPU


@pytest.mark.slow
def test_mlflow_gets_one_run_per_trial_with_params_and_epoch_metrics(local_ray, data_dir, tmp_path):
    from mlflow.tracking import MlflowClient

    out, store = tmp_path / "results", f"file:{tmp_path / 'mlruns'}"
    assert (
        search(
            "--space",
            str(SPACES / "tiny.yaml"),
            "--dataset",
            "synthetic",
            "--results",
            str(out),
            "--experiment",
            "tracked",
            "--mlflow",
            store,
            "--max-epochs",
            "2",
            "--max-t",
            "2",
        )
        == 0
    )
    rows = read_rows(str(out), "tracked")
    searched = rows[rows["role"] == "search"]
    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name("tracked").experiment_id])
    assert len(runs) == len(searched) == 6
    for run in runs:
        assert run.data.tags["modsar.dataset"] == "synthetic"
        assert any(key.endswith("model.dropout") for key in run.data.params), run.data.params
        steps = client.get_metric_history(run.info.run_id, "valid.ndcg_at_10")
        assert len(steps) >= 1 and all(0.0 <= s.value <= 1.0 for s in steps)
    assert sorted(len(client.get_metric_history(r.info.run_id, "valid.ndcg_at_10")) for r in runs) == sorted(
        searched["epochs_run"].astype(int)
    )  # one step per validation pass (every epoch here)


def test_mlflow_without_mlflow_installed_is_one_clear_error(tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__
    monkeypatch.setattr(
        builtins,
        "__import__",
        lambda name, *a, **k: (
            (_ for _ in ()).throw(ImportError(name)) if name == "mlflow" else real_import(name, *a, **k)
        ),
    )
    assert (
        search(
            "--space",
            str(SPACES / "tiny.yaml"),
            "--dataset",
            "synthetic",
            "--results",
            str(tmp_path),
            "--mlflow",
            "file:./mlruns",
        )
        == 2
    )
    assert "--mlflow needs MLflow: pip install 'modsar[mlflow]'" in capsys.readouterr().err


def test_tune_callbacks_unpickle_under_their_earlier_names_while_a_search_is_restored():
    """tuner.pkl of a search started with 0.2 names its callbacks modsar.search.<name> (before the package
    split) or modsar.search.rows.<name> (after it); --resume loads them under those names, and afterwards the
    name modsar.search is the Python API's again."""
    import pickle

    import modsar
    from modsar.sweep import rows, tracking
    from modsar.sweep.restore import modules_under_earlier_names

    with modules_under_earlier_names():
        for name in ("ResultRows", "LiveTable", "SchedulerState"):
            assert pickle.loads(f"cmodsar.search\n{name}\n.".encode()) is getattr(rows, name)
            assert pickle.loads(f"cmodsar.search.rows\n{name}\n.".encode()) is getattr(rows, name)
        # a search started with --mlflow names its MLflow logger too (modsar.search.tracking)
        assert pickle.loads(b"cmodsar.search.tracking\nMLflowRuns\n.") is tracking.MLflowRuns
    assert not [n for n in sys.modules if n.split(".")[:2] == ["modsar", "search"]]
    assert callable(modsar.search) and modsar.search.__module__ == "modsar.api"


def test_rows_from_a_metrics_dataframe_keep_integer_types(data_dir, tmp_path):
    """A resumed search rebuilds rows from Tune's metrics DataFrame, where a column with gaps turns 2 into 2.0
    and a missing key into NaN; the row must still say best_epoch=2 (int), and rows written with a double
    best_epoch by older versions must still read back together with int ones."""
    import pandas as pd

    from modsar.records.rows import write_row
    from modsar.sweep import SearchRequest, make_plan, row_from_results

    plan = make_plan(
        SearchRequest(
            space=str(SPACES / "asha.yaml"), dataset="synthetic", results=str(tmp_path), experiment="df"
        )
    )
    frame = pd.DataFrame(
        [
            {"epoch": 1, "valid.ndcg@10": 0.1, "best.ndcg@10": 0.1, "best_epoch": 1},
            {
                "epoch": 2,
                "valid.ndcg@10": 0.3,
                "best.ndcg@10": 0.3,
                "best_epoch": 2,
                "num_parameters": 1234,
                "trial_done": True,
            },
            {"epoch": 3, "valid.ndcg@10": 0.2, "trial_done": True},
        ]
    )
    assert frame["best_epoch"].dtype == float  # the gap in the last report made the column double
    row = row_from_results(plan, "abc", {}, frame.to_dict("records"), None, None, tag="3_x=1")
    assert row["best_epoch"] == 2 and type(row["best_epoch"]) is int
    assert row["epochs_run"] == 3 and row["num_parameters"] == 1234 and row["trial_index"] == 3
    assert row["valid.ndcg@10"] == 0.3 and row["status"] == "finished"
    write_row(str(tmp_path), row)
    write_row(str(tmp_path), {**row, "trial_id": "old", "best_epoch": 5.0})  # an older file's double column
    rows = read_rows(str(tmp_path), "df").set_index("trial_id")
    assert rows.loc["abc", "best_epoch"] == 2 and rows.loc["old", "best_epoch"] == 5


def test_a_row_records_the_config_its_worker_ran(data_dir, tmp_path):
    """A worker given a GPU sets train.device=cuda on its config after the driver planned it: the row takes
    the config the worker reported running, so its train.device and device columns agree; a trial that never
    reported gets the plan's config."""
    import json

    from modsar.config import Config
    from modsar.sweep import SearchRequest, make_plan, row_from_results

    plan = make_plan(
        SearchRequest(
            space=str(SPACES / "asha.yaml"), dataset="synthetic", results=str(tmp_path), experiment="ran"
        )
    )
    point = {"point": {"task": "ar", "train.lr": 0.005}}
    ran = Config.from_dict(plan.base)
    ran.task, ran.train.lr, ran.train.device = "ar", 0.005, "cuda"
    report = {"epoch": 1, "valid.ndcg@10": 0.1, "best.ndcg@10": 0.1, "best_epoch": 1, "device": "cuda:0"}
    row = row_from_results(
        plan, "a", point, [{**report, "ran_config": json.dumps(ran.to_dict())}], None, None
    )
    assert row["train.device"] == "cuda" and row["device"] == "cuda:0" and row["train.lr"] == 0.005
    assert "ran_config" not in row
    unreported = row_from_results(plan, "b", point, [], "RuntimeError: lost", None)
    assert unreported["train.device"] == Config.from_dict(plan.base).train.device == "auto"
    assert unreported["task"] == "ar" and unreported["status"] == "error"


def test_reconcile_writes_again_an_error_row_tune_now_holds_without_error(data_dir, tmp_path):
    """After a fit, a trial with no row gets one from Tune's record; a trial whose row says error but that
    Tune now holds without one (a resumed search retried it and its scheduler stopped it before it reported,
    so no callback wrote) gets its row again; any other row stands, whatever Tune's record says. Tune's
    record gives NaN for `repeat` where a report had none: only a repeat is left out of `reports`."""
    import pandas as pd

    from modsar.sweep import SearchRequest, make_plan, row_from_results
    from modsar.sweep.rows import reconcile_rows, write_search_row

    plan = make_plan(
        SearchRequest(
            space=str(SPACES / "asha.yaml"), dataset="synthetic", results=str(tmp_path), experiment="rc"
        )
    )
    point = {"point": {"task": "ar", "train.lr": 0.005}}
    reports = [{"epoch": 1, "valid.ndcg@10": 0.2, "best.ndcg@10": 0.2, "best_epoch": 1, "trial_done": True}]
    write_search_row(plan, row_from_results(plan, "err", point, [], "RuntimeError: node died", None))
    write_search_row(plan, row_from_results(plan, "kept", point, reports[:0], None, None))

    def result(trial_id: str, error: Exception | None = None) -> SimpleNamespace:
        frame = pd.DataFrame([*reports, {**reports[0], "repeat": True}])  # repeat: NaN on the first
        return SimpleNamespace(
            path=f"/x/trainable_{trial_id}_1_lr=0.005",
            metrics={"trial_id": trial_id},
            config=point,
            metrics_dataframe=frame,
            error=error,
            checkpoint=None,
        )

    reconcile_rows(plan, [result("err"), result("kept"), result("new"), result("bad", RuntimeError("x"))])
    rows = read_rows(str(tmp_path), "rc").set_index("trial_id")
    assert rows.loc["err", "status"] == "finished" and rows.loc["err", "valid.ndcg@10"] == 0.2
    assert rows.loc["err", "reports"] == 1  # the repeated report is no pass; the first counts
    assert pd.isna(rows.loc["kept", "valid.ndcg@10"])  # a row the callback wrote is not replaced
    assert rows.loc["new", "status"] == "finished" and rows.loc["bad", "status"] == "error"


LOOPBACK_CHECK = r"""
import os, sys, time, psutil, ray
from modsar.cli import main
from modsar.sweep import SearchRequest, connect_ray


# p's listening addresses; none for a process that ended meanwhile. A process in its exit refuses
# /proc/<pid>/fd (AccessDenied) until it is gone: asked again until it is, never skipped while alive.
def sockets(p):
    for attempt in range(20):
        try:
            return {c.laddr.ip for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            return set()
        except psutil.AccessDenied:
            if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                return set()
            if attempt == 19:
                raise
            time.sleep(0.25)


def listening():
    me, found = psutil.Process(), set()
    for p in [me, *me.children(recursive=True)]:
        try:
            found |= sockets(p)
        except psutil.NoSuchProcess:  # ended between the checks
            pass
    return sorted(found)


if sys.argv[1] == "modsar":
    connect_ray(SearchRequest(space="quickstart", dataset="synthetic"))
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ  # the process is restored after the start
else:  # the control: Ray's default
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
ray.get(ray.remote(lambda: 1).remote())  # a worker is up
print("LISTEN", listening(), ray.util.get_node_ip_address(), flush=True)
if sys.argv[1] == "modsar":
    code = main(["search", "--quiet", "--space", sys.argv[2], "--dataset", "synthetic",
                 "--results", sys.argv[3], "--experiment", "loopback"])
    print("AFTER", listening(), flush=True)  # the trial's and Tune's processes too
    sys.exit(code)
"""


NAMESPACE_SETUP = (
    "ip link set lo up && ip link add veth0 type veth peer name veth1 && ip addr add 10.9.9.9/24 "
    "dev veth0 && ip link set veth0 up && ip link set veth1 up && ip route add default dev veth0"
)


def _own_network_namespace() -> bool:
    """Whether this user may build the test's network namespace (`unshare -rn`: a user namespace maps it to
    root there, with no privilege outside it). Kernels may switch unprivileged user namespaces off, or allow
    them without the capabilities a veth pair needs (AppArmor's restriction): the setup itself is tried."""
    try:
        done = subprocess.run(
            ["unshare", "-rn", "sh", "-c", NAMESPACE_SETUP], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(
    not _own_network_namespace(),
    reason="builds a network namespace with a routable veth "
    "address, and this user cannot (`unshare -rn` with a veth pair is refused here)",
)
def test_a_local_search_binds_only_to_loopback(tmp_path):
    """In a network namespace that also has a routable non-loopback address (where Ray's default listens on
    all interfaces and takes that address as the node's), the cluster `modsar search` starts listens on
    127.0.0.1 only, and a trial runs on it. So the main job needs no private namespace (and no root). The
    namespace is the test's own (`unshare -rn`), so an ordinary user runs it too."""
    space = tmp_path / "one.yaml"
    space.write_text(
        "description: one trial\nbase:\n  model.hidden_size: 8\nparams:\n  task: {grid: [ar]}\n"
        "  train.lr: {grid: [0.01]}\nbudget: {search: grid, num_samples: 1, max_epochs: 1, eval_every: 1}\n"
    )
    script = tmp_path / "check.py"
    script.write_text(LOOPBACK_CHECK)
    setup = NAMESPACE_SETUP
    env = {**os.environ, "MODSAR_DATA": str(tmp_path / "data")}
    seen = {}
    for mode in ("default", "modsar"):
        done = subprocess.run(
            [
                "unshare",
                "-rn",
                "sh",
                "-c",
                f"{setup} && {sys.executable} {script} {mode} {space} {tmp_path / 'results'}",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        lines = [x for x in done.stdout.splitlines() if x.startswith(("LISTEN", "AFTER"))]
        assert done.returncode == 0 and lines, done.stderr[-2000:]
        seen[mode] = lines
    # the namespace does expose a routable address, which Ray's default takes and listens beyond loopback on
    assert "'0.0.0.0'" in seen["default"][0] and seen["default"][0].endswith(" 10.9.9.9"), seen["default"]
    assert seen["modsar"] == [
        "LISTEN ['127.0.0.1', '::ffff:127.0.0.1'] 127.0.0.1",
        "AFTER ['127.0.0.1', '::ffff:127.0.0.1']",
    ], seen["modsar"]
    rows = read_rows(str(tmp_path / "results"), "loopback")
    assert len(rows) == 1 and rows["status"].eq("finished").all()


@pytest.mark.slow
def test_a_temporal_split_search_records_and_reports_its_protocol(local_ray, data_dir, tmp_path, capsys):
    """A search under data.split=temporal on a timestamped log: every row records the split, its cut times and
    target counts, and the report states them."""
    import numpy as np

    from modsar.data.store import prepare_dataset

    rng = np.random.default_rng(0)
    users, items = np.repeat(np.arange(1, 41), 15), rng.integers(1, 31, 600)
    times = rng.permutation(600) * 60 + 1_000_000_000
    source = tmp_path / "ratings.csv"
    source.write_text(
        "userId,movieId,rating,timestamp\n"
        + "".join(f"{u},{i},4.0,{t}\n" for u, i, t in zip(users, items, times, strict=True))
    )
    prepare_dataset("timed", sources=[source], fmt="ml-csv", root=data_dir)
    out = tmp_path / "results"
    assert (
        search(
            "--space",
            str(SPACES / "seeds.yaml"),
            "--dataset",
            "timed",
            "--results",
            str(out),
            "--experiment",
            "t",
            "data.split=temporal",
        )
        == 0
    )
    rows = read_rows(str(out), "t")
    assert (
        len(rows) == 2 and (rows["data.split"] == "temporal").all() and (rows["status"] == "finished").all()
    )
    assert (rows["split_valid_cut"] < rows["split_test_cut"]).all() and (rows["test_targets"] > 0).all()
    assert (rows["test_targets"] < 40).all()  # one global cut: not every user has an event after it
    capsys.readouterr()
    assert main(["report", "--results", str(out), "--experiment", "t"]) == 0
    assert "protocol: data.split=temporal" in capsys.readouterr().out


@pytest.mark.slow
def test_arms_select_and_test_every_compared_model(local_ray, data_dir, tmp_path, capsys):
    """A space with `arms` selects the best trial of every task x arm value, tests it with its rollouts
    (eval.generate_steps), and the report shows one row per arm."""
    space = tmp_path / "arms.yaml"
    space.write_text("""description: arms
base: {model.hidden_size: 16, eval.generate_steps: 2}
params:
  task: {grid: [ar]}
  model.positional: {grid: [learned, target_aligned]}
  model.user_fusion: {grid: [none, token]}
  train.lr: {grid: [0.001, 0.000001]}
arms: [model.positional]
scheduler: {max_t: 2, grace_period: 2}
budget: {search: grid, max_epochs: 2, eval_every: 1}
""")
    out = tmp_path / "results"
    assert (
        search("--space", str(space), "--dataset", "synthetic", "--results", str(out), "--experiment", "a")
        == 0
    )
    rows = read_rows(str(out), "a")
    assert len(rows) == 8
    selected = rows[rows["selected"].astype(bool)]
    assert sorted(selected["model.positional"]) == ["learned", "target_aligned"]
    for _, group in rows.groupby("model.positional"):  # the best of each arm, by validation
        assert group.loc[group["valid.ndcg@10"].idxmax(), "selected"]
    assert selected["test.ndcg@10"].notna().all() and (selected["generate.steps"] == 2).all()
    assert rows[~rows["selected"].astype(bool)]["generate.steps"].isna().all()
    capsys.readouterr()
    assert main(["report", "--results", str(out), "--experiment", "a"]) == 0
    printed = capsys.readouterr().out
    assert "AR positional=learned" in printed and "AR positional=target_aligned" in printed
    assert "Generative evaluation" in printed and "top1% gen" in printed
    from modsar.records.selection import best_checkpoints as _best_checkpoints  # analyze --experiment

    assert sorted(arm for _, arm in _best_checkpoints(rows)) == [
        "positional=learned",
        "positional=target_aligned",
    ]


def test_arms_must_be_categorical_params(tmp_path, capsys):
    space = tmp_path / "bad.yaml"
    space.write_text(
        "description: x\nparams:\n  task: {grid: [ar]}\n  train.lr: {uniform: [0.001, 0.01]}\n"
        "arms: [train.lr]\n"
    )
    assert main(["spaces", str(space), "--check"]) == 2
    assert (
        "'train.lr' must be a grid or choice param other than task and model.backbone"
        in capsys.readouterr().err
    )


@pytest.mark.slow
def test_the_residual_models_space_runs_the_five_models(local_ray, data_dir, tmp_path, capsys):
    """The bundled residual_models space, one epoch each: a row per model with its own settings, one selected
    and tested per model (not one per task), and report and analyze put the five side by side."""
    out = tmp_path / "results"
    assert (
        search(
            "--space",
            "residual_models",
            "--dataset",
            "synthetic",
            "--results",
            str(out),
            "--experiment",
            "z",
            "--max-epochs",
            "1",
            "model.hidden_size=16",
            "data.max_len=20",
        )
        == 0
    )
    rows = read_rows(str(out), "z").set_index("model.backbone", append=True).reset_index(level=0, drop=True)
    rows = rows.set_index("task", append=True)
    assert sorted(rows.index) == sorted(
        [("bsarec", "ar"), ("duorec", "ar"), ("gru4rec", "ar"), ("modular", "ae"), ("modular", "ar")]
    )
    assert rows["selected"].all() and rows["test.ndcg@10"].notna().all()  # every model is its own selection
    assert (
        rows.loc[("duorec", "ar"), "loss.cl_views"] == "un"
        and rows.loc[("modular", "ar"), "loss.cl_views"] == "us_x"
    )
    assert (
        rows.loc[("gru4rec", "ar"), "model.gru_size"] == 128
        and rows.loc[("gru4rec", "ar"), "model.dropout"] == 0.3
    )
    assert rows.loc[("modular", "ar"), "model.positions_from"] == "start"
    assert rows.loc[("bsarec", "ar"), "model.positions_from"] == "end"  # BSARec's official positions
    capsys.readouterr()
    assert main(["report", "--results", str(out), "--experiment", "z"]) == 0
    assert "synthetic / residual_models:" in capsys.readouterr().out
    assert (
        main(["analyze", "--results", str(out), "--experiment", "z", "--diagnostic", "hrli", "--quiet"]) == 0
    )
    text = capsys.readouterr().out
    for name in ("SASRec", "DuoRec", "BSARec", "BERT4Rec", "GRU4Rec"):
        assert name in text


@pytest.mark.slow
def test_a_scheduler_in_optimizer_steps_decides_on_steps(local_ray, data_dir, tmp_path):
    """unit: steps counts ASHA's rungs in optimizer steps: synthetic at batch 256 takes 4 steps an epoch, so
    max_t 10 steps stops every trial at its first validation at or past 10 steps, epoch 3 (12 steps), of its
    6; the rows record the steps, the popularity level and whether each trial left it."""
    space = tmp_path / "steps.yaml"
    space.write_text(
        (SPACES / "asha.yaml")
        .read_text()
        .replace(
            "scheduler: {max_t: 4, grace_period: 1, reduction_factor: 2}",
            "scheduler: {unit: steps, max_t: 10, grace_period: 10, reduction_factor: 2}",
        )
        .replace("max_epochs: 4", "max_epochs: 6")
        .replace("train.lr: {grid: [0.005, 1.0e-6]}", "train.lr: {grid: [0.005]}")
    )
    out = tmp_path / "results"
    assert (
        search("--space", str(space), "--dataset", "synthetic", "--results", str(out), "--experiment", "s")
        == 0
    )
    rows = read_rows(str(out), "s")
    assert len(rows) == 6 and (rows["steps_per_epoch"] == 4).all()
    assert (rows["epochs_run"] == 3).all() and (rows["steps"] == 12).all()
    assert rows["popularity_level"].between(0.01, 0.2).all()
    search_json = json.loads((out / "s" / "search.json").read_text())
    assert search_json["asha"] == {
        "max_t": 10,
        "grace_period": 10,
        "reduction_factor": 2,
        "unit": "steps",
        "kind": "asha",
    }


@pytest.mark.slow
def test_a_search_whose_tune_state_cannot_be_restored_is_refused_not_rerun(
    local_ray, data_dir, tmp_path, capsys
):
    """Tune, failing to read a search's state back, logs an error and runs the search as if it were new; from
    its restored searcher that ran too few trials and exited 0 (seen with another user's Ray lock file in
    /tmp). --resume refuses instead, naming the cause, and runs nothing."""
    space = tmp_path / "two.yaml"
    space.write_text(
        "description: two trials\nbase: {task: ar, model.hidden_size: 8, model.num_layers: 1}\n"
        "params:\n  train.lr: {grid: [0.001, 0.01]}\n"
        "budget: {search: grid, num_samples: 1, max_epochs: 1, eval_every: 1}\n"
    )
    out = tmp_path / "results"
    assert (
        search("--space", str(space), "--dataset", "synthetic", "--results", str(out), "--experiment", "r")
        == 0
    )
    before = read_rows(str(out), "r")
    states = sorted((out / "r" / "ray-ar").glob("experiment_state-*.json"))
    assert states
    snapshot = out / "r" / "ray-ar" / SNAPSHOT  # Tune's state as its last save wrote it (sweep/storage.py)
    assert any(name.startswith("experiment_state-") for name in pickle.loads(snapshot.read_bytes()))
    snapshot.unlink()  # as a search started by a ModSAR before snapshots: Tune's own files are read
    for state in states:
        state.write_text("{ not json")
    capsys.readouterr()
    assert (
        search(
            "--space",
            str(space),
            "--dataset",
            "synthetic",
            "--results",
            str(out),
            "--experiment",
            "r",
            "--resume",
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"--resume cannot restore the search's Tune state in {out / 'r' / 'ray-ar'}: " in err
    assert (
        "nothing was run" in err
        and "--overwrite" in err
        and "Traceback" not in err.split("modsar: error:")[-1]
    )
    after = read_rows(str(out), "r")
    assert sorted(after["trial_id"]) == sorted(before["trial_id"])
    assert after.set_index("trial_id")["valid.ndcg@10"].equals(before.set_index("trial_id")["valid.ndcg@10"])


@pytest.mark.slow
@pytest.mark.long
def _one_epoch_grid(tmp_path: Path, more_params: str, out: Path, experiment: str) -> tuple[str, ...]:
    """A grid space of tiny models trained one epoch, AE and AR (and `more_params`), and the search options
    that run it on synthetic data into `out`/`experiment`."""
    space = tmp_path / "grid.yaml"
    space.write_text(
        "description: a tiny grid\nbase: {model.hidden_size: 8, model.num_layers: 1}\n"
        f"params:\n  task: {{grid: [ae, ar]}}\n{more_params}"
        "budget: {search: grid, num_samples: 1, max_epochs: 1, eval_every: 1}\n"
    )
    return (
        *("--space", str(space), "--dataset", "synthetic"),
        *("--results", str(out), "--experiment", experiment),
    )


def _edited(path: Path, column: str, value) -> bytes:
    """Set one column of a row file (its schema kept), as a hand or a damaged copy would; the file's bytes
    before, to put it back."""
    before = path.read_bytes()
    table = pq.read_table(path)
    field = table.schema.field(column)
    index = table.column_names.index(column)
    pq.write_table(table.set_column(index, field, pa.array([value], type=field.type)), path)
    return before


def test_a_resume_refuses_rows_of_another_search_or_damaged_and_runs_a_lost_trial_again(
    local_ray, data_dir, tmp_path, capsys
):
    """A committed folder's rows are files anyone can copy or edit: a resume takes none of another dataset or
    space, none with a metric no ranking can have, and none that lost the validation value its curve says it
    has (each would be selected, tested and re-run on seeds as this search's); and where a row is lost since
    its direction ended, that trial runs again (one config and seed: its curve comes back)."""
    out = tmp_path / "results"
    common = _one_epoch_grid(tmp_path, "  train.lr: {grid: [0.001, 0.01]}\n", out, "c")
    assert search(*common) == 0
    folder = out / "c"
    for ray_dir in folder.glob("ray-*"):  # the committed folder: rows only
        subprocess.run(["rm", "-rf", str(ray_dir)], check=True)
    before = read_rows(str(out), "c").set_index("trial_id")
    ae = before[(before["task"] == "ae") & before["selected"].astype(bool)].index[0]
    path = folder / "trials" / f"{ae}.parquet"
    for column, value, said in (
        ("dataset", "ml-1m", "a row of dataset 'ml-1m', not this search's 'synthetic', so not a trial of"),
        ("space", "loss_ce", "a row of space 'loss_ce', not this search's 'grid', so not a trial of"),
        ("valid.ndcg@10", math.inf, "its valid.ndcg@10 is inf, which no ranking metric can be"),
        ("test.recall@10", -0.5, "its test.recall@10 is -0.5, which no ranking metric can be"),
        ("valid.ndcg@10", None, "a finished trial with validation passes, but its valid.ndcg@10 is missing"),
    ):
        kept = _edited(path, column, value)
        capsys.readouterr()
        assert search(*common, "--resume") == 2, column
        err = capsys.readouterr().err
        assert f"{path}: {said}" in err and err.count("\n") == 1, err
        path.write_bytes(kept)
    assert read_rows(str(out), "c").set_index("trial_id").equals(before)  # nothing written by a refusal

    path.unlink()  # the AE winner's row, lost after its direction ended
    capsys.readouterr()
    assert main(["search", "--no-estimate", *common, "--resume"]) == 0
    said = capsys.readouterr().out
    assert "AE: ended in an earlier run, but 1 trial of its 2 has no row now; it runs again" in said
    assert "AR: ended in an earlier run; its 2 rows are kept" in said
    after = read_rows(str(out), "c").set_index("trial_id")
    ae_rows = after[(after["role"] == "search") & (after["task"] == "ae")]
    assert len(ae_rows) == 2 and ae not in ae_rows.index
    again = ae_rows[ae_rows["selected"].astype(bool)].iloc[0]  # the lost point, trained again, wins again
    for column in ("train.lr", "curve", "valid.ndcg@10", "test.ndcg@10"):
        assert again[column] == before.loc[ae, column], column
    assert json.loads((folder / "search.json").read_text())["status"] == "complete"


def test_seeds_added_from_committed_rows_and_a_direction_whose_tune_state_is_gone(
    local_ray, data_dir, tmp_path, capsys
):
    """A search folder as it is committed (search.json and rows; no Ray state, no checkpoint) gains seed
    re-runs with --resume --seeds: no trial is trained again, the selected rows keep their test figures.
    A direction that had not ended when its Tune state was lost goes on from the rows of its ended trials:
    only a trial that left none trains again (under successive halving it runs again from its start:
    tests/test_halving.py)."""
    out = tmp_path / "results"
    common = _one_epoch_grid(tmp_path, "  train.lr: {grid: [0.001, 0.01]}\n", out, "c")
    assert search(*common) == 0
    folder = out / "c"
    stored = json.loads((folder / "search.json").read_text())
    assert stored["status"] == "complete" and stored["directions_ended"] == ["ae", "ar"]
    del stored["directions_ended"]  # as a search saved before the record: complete means every direction
    (folder / "search.json").write_text(json.dumps(stored))
    for ray_dir in folder.glob("ray-*"):  # the committed folder: rows only
        subprocess.run(["rm", "-rf", str(ray_dir)], check=True)
    before = read_rows(str(out), "c").set_index("trial_id").sort_index()
    assert not any(Path(c).exists() for c in before["checkpoint"].dropna())

    capsys.readouterr()
    assert main(["search", "--no-estimate", *common, "--seeds", "2", "--resume"]) == 0
    said = capsys.readouterr().out
    assert json.loads((folder / "search.json").read_text())["request"]["seeds"] == 2  # was 0: asked on resume
    assert "AE: ended in an earlier run; its 2 rows are kept" in said
    assert "AR: ended in an earlier run; its 2 rows are kept" in said
    after = read_rows(str(out), "c").set_index("trial_id").sort_index()
    search_rows, seeds = after[after["role"] == "search"], after[after["role"] == "seed"]
    assert list(search_rows.index) == list(before.index)  # nothing trained again
    chosen = before[before["selected"].astype(bool)]
    assert len(chosen) == 2
    for column in ("selected", "valid.ndcg@10", "test.ndcg@10", "test.recall@10"):
        assert search_rows[column].equals(before[column]), column  # kept, not re-tested
    pairs = sorted(zip(seeds["task"], seeds["seed"], strict=True))
    assert pairs == [("ae", 0), ("ae", 1), ("ar", 0), ("ar", 1)]
    assert (seeds["status"] == "finished").all() and seeds["test.ndcg@10"].notna().all()
    # the search ran on seed 0: its selected trials' seed-0 re-runs are the same curves
    for task in ("ae", "ar"):
        seed0 = seeds[(seeds["task"] == task) & (seeds["seed"] == 0)].iloc[0]
        assert seed0["test.ndcg@10"] == chosen[chosen["task"] == task].iloc[0]["test.ndcg@10"]

    # AR cut off on a machine now gone while one of its trials still ran: its Tune state is lost before the
    # direction ended, and that trial wrote no row. AR goes on from its other row: only the lost trial trains.
    stored = json.loads((folder / "search.json").read_text())
    (folder / "search.json").write_text(
        json.dumps({**stored, "status": "interrupted", "directions_ended": ["ae"]})
    )
    subprocess.run(["rm", "-rf", *map(str, folder.glob("ray-*"))], check=True)
    ar_rows = search_rows[search_rows["task"] == "ar"]
    kept, lost = (
        ar_rows[ar_rows["selected"].astype(bool)].index[0],
        ar_rows[~ar_rows["selected"].astype(bool)].index[0],
    )
    (folder / "trials" / f"{lost}.parquet").unlink()
    capsys.readouterr()
    assert main(["search", "--no-estimate", *common, "--seeds", "2", "--resume"]) == 0
    said = capsys.readouterr().out
    assert (
        f"AR: no Tune state to go on from in {folder / 'ray-ar'}; it goes on from the rows of 1 trial, which "
        "it does not train again, and runs the 1 left"
    ) in said
    again = read_rows(str(out), "c").set_index("trial_id")
    assert not (again["role"] == "superseded").any() and lost not in again.index
    now = again[(again["role"] == "search") & (again["task"] == "ar")]
    assert len(now) == 2 and kept in now.index
    for column in ("valid.ndcg@10", "test.ndcg@10", "curve", "selected"):
        assert now.loc[kept, column] == ar_rows.loc[kept, column], column  # kept as it was
    retrained = now.drop(kept).iloc[0]  # the lost point, trained again: the same config and seed, one curve
    for column in ("train.lr", "curve", "valid.ndcg@10", "epochs_run", "status"):
        assert retrained[column] == ar_rows.loc[lost, column], column
    assert set(seeds.index) == set(again[again["role"] == "seed"].index)

    # AE's winner selected nowhere yet (its direction ended on a machine now gone, before selection): its
    # checkpoint is not here, so it trains again on its seed, on its trial's one thread, and its test figures
    # are the trial's own (one config and seed, one curve); the row says they come from that retraining, and
    # the driver's thread count is its own again afterwards
    winner = again[(again["role"] == "search") & (again["task"] == "ae") & again["selected"].astype(bool)]
    path = folder / "trials" / f"{winner.index[0]}.parquet"
    table = pq.read_table(path)
    for name in [n for n in table.column_names if n.startswith("test.") or n == "selected"]:
        column = table.schema.field(name)
        table = table.set_column(table.column_names.index(name), column, pa.nulls(1, column.type))
    pq.write_table(table, path)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        capsys.readouterr()
        assert main(["search", "--no-estimate", *common, "--seeds", "2", "--resume"]) == 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert f"AE: the selected trial {winner.index[0]}'s checkpoint is not here" in err
    assert "warning" not in err
    tested = read_rows(str(out), "c").set_index("trial_id").loc[winner.index[0]]
    assert tested["selected"] and tested["test_from"] == "retrained"
    assert tested["test_from_valid"] == tested["valid.ndcg@10"] == winner.iloc[0]["valid.ndcg@10"]
    for column in ("test.ndcg@10", "test.recall@10"):
        assert tested[column] == winner.iloc[0][column], column
    assert tested["cpu"] == cpu_identity() and tested["torch_threads"] == 1


def test_a_resume_without_seeds_runs_the_seed_reruns_the_search_was_started_with(
    local_ray, data_dir, tmp_path
):
    """A search started with --seeds 2 and cut off before its seed re-runs, resumed without --seeds, runs
    them (it once ended complete without them, its record still saying 2); a larger --seeds adds more."""
    out = tmp_path / "results"
    common = _one_epoch_grid(tmp_path, "", out, "s")
    assert search(*common, "--seeds", "2") == 0
    folder = out / "s"
    rows = read_rows(str(out), "s")
    seeds = rows[rows["role"] == "seed"]
    pairs = sorted(zip(seeds["task"], seeds["seed"], strict=True))  # seed 0 where its own trial stands for it
    assert {("ae", 1), ("ar", 1)} <= set(pairs) <= {("ae", 0), ("ae", 1), ("ar", 0), ("ar", 1)}
    for trial in seeds["trial_id"]:  # as if the driver had been killed before its seed re-runs
        (folder / "trials" / f"{trial}.parquet").unlink()
    subprocess.run(["rm", "-rf", str(folder / "ray-seeds")], check=True)
    stored = json.loads((folder / "search.json").read_text())
    (folder / "search.json").write_text(json.dumps({**stored, "status": "interrupted"}))

    assert search(*common, "--resume") == 0
    again = read_rows(str(out), "s")
    redone = again[again["role"] == "seed"]
    assert sorted(zip(redone["task"], redone["seed"], strict=True)) == pairs
    assert (redone["status"] == "finished").all() and redone["test.ndcg@10"].notna().all()
    for task, seed in pairs:  # one config and seed, one curve
        before, now = (
            r[(r["task"] == task) & (r["seed"] == seed) & (r["role"] == "seed")].iloc[0]
            for r in (rows, again)
        )
        assert now["test.ndcg@10"] == before["test.ndcg@10"] and now["curve"] == before["curve"], (task, seed)
    record = json.loads((folder / "search.json").read_text())
    assert record["status"] == "complete" and record["request"]["seeds"] == 2

    assert search(*common, "--resume", "--seeds", "3") == 0  # more than it was started with: added
    more = read_rows(str(out), "s")
    more_seeds = more[more["role"] == "seed"]
    assert sorted(zip(more_seeds["task"], more_seeds["seed"], strict=True)) == sorted(
        [*pairs, ("ae", 2), ("ar", 2)]
    )
    assert json.loads((folder / "search.json").read_text())["request"]["seeds"] == 3


def test_a_retrained_winner_trains_on_its_trials_threads():
    """More threads sum in another order, so a winner trained again takes the threads its row records, else
    the CPUs each trial was given."""
    plan = SimpleNamespace(request=SimpleNamespace(cpus_per_trial=3.0))
    assert trial_threads(plan, pd.Series({"torch_threads": 1})) == 1
    assert trial_threads(plan, pd.Series({"torch_threads": float("nan")})) == 3
    assert trial_threads(plan, pd.Series({})) == 3
    assert trial_threads(SimpleNamespace(request=SimpleNamespace(cpus_per_trial=0.5)), pd.Series({})) == 1


@pytest.mark.slow
@pytest.mark.long
def test_a_sampled_direction_goes_on_from_its_rows_drawing_only_the_trials_it_lacks(
    local_ray, data_dir, tmp_path, capsys
):
    """A TPE direction under ASHA whose Tune state was lost with two of its four trials unended (no rows):
    it draws two trials more, none a configuration an ended trial had (the sampler was told them), and the
    ended trials' rows stay as they were."""
    space = tmp_path / "tpe.yaml"
    space.write_text(
        "description: four TPE trials\nbase: {task: ar, model.hidden_size: 8, model.num_layers: 1}\n"
        "params:\n  train.lr: {grid: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02]}\n"
        "  model.dropout: {grid: [0.0, 0.2], also: [model.attn_dropout]}\n"
        "scheduler: {max_t: 2, grace_period: 1, reduction_factor: 2}\n"
        "budget: {search: optuna, num_samples: 4, max_epochs: 2, eval_every: 1}\n"
    )
    out = tmp_path / "results"
    common = ("--space", str(space), "--dataset", "synthetic", "--results", str(out), "--experiment", "t")
    assert search(*common) == 0
    folder = out / "t"
    first = read_rows(str(out), "t").sort_values("trial_index").set_index("trial_id")
    assert len(first) == 4 and first["search_algorithm"].eq("optuna").all()
    stored = json.loads((folder / "search.json").read_text())
    (folder / "search.json").write_text(
        json.dumps({**stored, "status": "interrupted", "directions_ended": []})
    )
    subprocess.run(["rm", "-rf", *map(str, folder.glob("ray-*"))], check=True)
    kept, lost = first.iloc[:2], first.iloc[2:]
    for trial_id in lost.index:
        (folder / "trials" / f"{trial_id}.parquet").unlink()

    capsys.readouterr()
    assert main(["search", "--no-estimate", *common, "--resume"]) == 0
    said = capsys.readouterr().out
    assert "it goes on from the rows of 2 trials, which it does not train again, and runs the 2 left" in said
    again = read_rows(str(out), "t").set_index("trial_id")
    assert len(again) == 4 and (again["role"] == "search").all()
    for column in ("train.lr", "model.dropout", "curve", "valid.ndcg@10"):
        assert again.loc[kept.index, column].equals(kept[column]), column
    drawn = again.drop(kept.index)
    points = lambda rows: {(r["train.lr"], r["model.dropout"]) for _, r in rows.iterrows()}  # noqa: E731
    assert len(points(drawn)) == 2 and not points(drawn) & points(kept)
    assert again["selected"].astype(bool).sum() == 1
