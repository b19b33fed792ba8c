"""What `modsar results` and `modsar report` take for trial rows under a results root (marked row files only,
older unmarked rows too; other Parquet never; a bad file named, the good rows kept), and strict JSON from
every --json command and every JSON file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write

from modsar.cli import main
from modsar.outputs import write_parquet
from modsar.records.rows import read_rows, write_row


def strict(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity, as jq, JavaScript and Go do."""

    def refuse(name: str):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def trial(trial_id: str, experiment: str = "e", **values) -> dict:
    return {
        "experiment": experiment,
        "trial_id": trial_id,
        "status": "finished",
        "task": "ar",
        "valid.ndcg@10": 0.25,
        **values,
    }


def older_row(trial_id: str, experiment: str = "old", **values) -> dict:
    """A row as modsar 0.2.0 wrote it, unmarked: it has every column that `results`, `report` and `analyze
    --experiment` read from any row."""
    return trial(
        trial_id,
        experiment,
        dataset="synthetic",
        space=None,
        role="train",
        selected=False,
        seed=0,
        **{"model.backbone": "modular", "train.monitor": "ndcg@10", **values},
    )


def foreign_outputs(root: Path) -> None:
    """What `modsar generate --out` and `modsar data profile --out` put under a results root."""
    write_parquet(
        pd.DataFrame({"user": range(2000), "step": 1, "item": 7, "future_item": 3}),
        root / "x" / "rollouts.parquet",
    )
    write_parquet(pd.DataFrame({"measure": ["zipf"], "value": [1.1]}), root / "profile" / "profile.parquet")


def test_rows_are_marked_and_other_parquet_under_the_root_is_never_a_row(tmp_path, capsys):
    root = tmp_path / "results"
    path = write_row(str(root), trial("t1"))
    write_row(str(root), trial("t2", status="error", error="RuntimeError: boom"))
    assert pq.read_schema(path).metadata == {b"modsar.kind": b"trial-row"}
    old = root / "old" / "trials" / "t0.parquet"  # a row written before rows were marked: still a row
    old.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([older_row("t0")]), old)
    foreign_outputs(root)
    rows = read_rows(str(root))
    assert sorted(rows["trial_id"]) == ["t0", "t1", "t2"]
    assert main(["results", "--results", str(root), "--json"]) == 0
    captured = capsys.readouterr()
    assert sorted(r["trial_id"] for r in strict(captured.out)) == ["t0", "t1", "t2"] and captured.err == ""


def test_a_bad_trial_file_is_named_in_one_warning_line_and_the_good_rows_are_shown(tmp_path, capsys):
    root = tmp_path / "results"
    good = Path(write_row(str(root), trial("good")))
    folder = good.parent
    (folder / "truncated.parquet").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    (folder / "empty.parquet").write_bytes(b"")
    (folder / "garbage.parquet").write_bytes(b"PAR1 not parquet at all PAR1")
    write_parquet(pd.DataFrame({"user": [1], "item": [2]}), folder / "stray.parquet")  # Parquet, not a row
    assert main(["results", "--results", str(root), "--columns", "trial_id,status"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == ["trial_id", "status", "good", "finished"]
    warnings = captured.err.strip().splitlines()
    assert len(warnings) == 4 and all(w.startswith("modsar: warning: skipped ") for w in warnings)
    by_file = {Path(w.split()[3].rstrip(":")).name: w for w in warnings}
    assert sorted(by_file) == ["empty.parquet", "garbage.parquet", "stray.parquet", "truncated.parquet"]
    assert "not a readable Parquet file (Parquet file size is 0 bytes)" in by_file["empty.parquet"]
    assert "not a readable Parquet file" in by_file["truncated.parquet"]
    assert (
        "not a trial row (no modsar.kind=trial-row mark, nor every column of an older row: it lacks "
        "experiment, trial_id, status, role, selected, dataset, space, task, seed, model.backbone, "
        "train.monitor); move it out of the trials folder"
    ) in by_file["stray.parquet"]
    assert (
        main(["results", "--results", str(root), "--columns", "trial_id,status"]) == 0
    )  # as a search rereads
    assert capsys.readouterr().err == ""  # each file is named once per process


@pytest.mark.parametrize("command", ["results", "report"])
def test_a_root_without_trial_rows_is_refused_in_one_line(tmp_path, capsys, command):
    root = tmp_path / "results"
    foreign_outputs(root)
    for folder in (root, tmp_path / "nothing-here"):
        assert main([command, "--results", str(folder)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.splitlines() == [
            f"modsar: error: no trial rows under {folder}; pass --results the folder `modsar search` or "
            "`modsar train` wrote to"
        ]


def printed(capsys, *args: str):
    """A command's --json output, parsed strictly."""
    assert main(list(args)) == 0
    return strict(capsys.readouterr().out)


def test_data_commands_print_and_write_strict_json(tmp_path, capsys, isolated_data_root):
    """`data profile` writes profile.json as the document it prints, so stdout covers both."""
    pairs = write(tmp_path / "log.txt", "".join(f"{u} {i}\n" for u in range(1, 7) for i in range(u, u + 5)))
    manifest = printed(capsys, "data", "prepare", "toy", "--source", str(pairs), "--json")
    assert manifest["statistics"]["users"] == 6
    assert printed(capsys, "data", "stats", "synthetic", "--json")["name"] == "synthetic"
    assert {e["name"] for e in printed(capsys, "data", "list", "--json")} >= {"toy", "synthetic"}
    profile = printed(capsys, "data", "profile", "synthetic", "--json", "--quiet", "--budget", "2000")
    assert profile["symbols"] == 2000
    for name in ("toy", "synthetic"):
        assert strict((isolated_data_root / name / "manifest.json").read_text())["name"] == name


def test_train_results_and_generate_print_and_write_strict_json(tmp_path, capsys):
    """(search --json: tests/test_search.py.) One rollout step leaves the immediate-repeat rate and distinct-2
    undefined: null, where `generate --json` printed NaN."""
    results = tmp_path / "results"
    row = printed(
        capsys,
        "train",
        "--dataset",
        "synthetic",
        "--quiet",
        "--json",
        "--results",
        str(results),
        "train.max_epochs=1",
        "model.hidden_size=8",
        "model.num_layers=1",
    )
    listed = printed(capsys, "results", "--results", str(results), "--json")
    assert [r["trial_id"] for r in listed] == [row["trial_id"]]
    metrics = printed(
        capsys,
        "generate",
        "--checkpoint",
        row["checkpoint"],
        "--steps",
        "1",
        "--users",
        "50",
        "--json",
        "--quiet",
        "--out",
        str(tmp_path / "gen"),
    )
    assert metrics["steps"] == 1 and metrics["immediate_repeat_rate"] is None
    assert metrics["distinct_2"] is None
    assert strict((tmp_path / "gen" / "metrics.json").read_text()) == metrics


def test_a_file_whose_column_types_conflict_is_skipped_and_the_good_rows_are_shown(tmp_path, capsys):
    """A file in trials/ whose types cannot be combined with the other rows' (a foreign file with an integer
    status; a marked row whose metric is text) is named in one warning; the rows that agree are shown, even
    when the odd file sorts first."""
    root = tmp_path / "results"
    folder = Path(write_row(str(root), older_row("good1", experiment="e"))).parent
    write_row(str(root), older_row("good2", experiment="e"))
    write_row(str(root), older_row("a-odd", experiment="e", **{"valid.ndcg@10": "high"}))
    pq.write_table(
        pa.Table.from_pylist([older_row("old-1", experiment="e", status=3)]), folder / "0-int.parquet"
    )
    assert main(["results", "--results", str(root), "--columns", "trial_id,status,valid.ndcg@10"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == [
        "trial_id",
        "status",
        "valid.ndcg@10",
        "good1",
        "finished",
        "0.2500",
        "good2",
        "finished",
        "0.2500",
    ]
    assert captured.err.splitlines() == [
        f"modsar: warning: skipped {folder / 'a-odd.parquet'}: its column 'valid.ndcg@10' holds string where "
        "the other rows hold double; move it out of the trials folder",
        f"modsar: warning: skipped {folder / '0-int.parquet'}: its column 'status' holds int64 where the "
        "other rows hold string; move it out of the trials folder",
    ]


def test_a_row_read_with_pandas_and_written_back_keeps_its_place(tmp_path, capsys):
    """pandas reads a text column that only some rows fill as NaN in the others; such a row written back
    holds a missing value there, not a number that would clash with the column's text in every other row."""
    root = str(tmp_path / "results")
    write_row(root, older_row("tested", experiment="e", test_from="checkpoint"))
    write_row(root, older_row("plain", experiment="e"))
    plain = read_rows(root, "e").set_index("trial_id").loc["plain"]
    assert isinstance(plain["test_from"], float) and math.isnan(plain["test_from"])  # pandas' missing text
    write_row(root, {**plain.to_dict(), "trial_id": "plain", "selected": True})
    again = read_rows(root, "e").set_index("trial_id")
    assert sorted(again.index) == ["plain", "tested"] and capsys.readouterr().err == ""
    assert again.loc["plain", "selected"] and again.loc["tested", "test_from"] == "checkpoint"


def test_an_unmarked_file_without_every_row_column_is_no_row(tmp_path, capsys):
    """The three columns experiment, trial_id and status do not make an older row: `report` would index
    dataset, space, task... A file with only those is skipped with a warning, whatever its status type."""
    root = tmp_path / "results"
    folder = root / "train-synthetic" / "trials"
    folder.mkdir(parents=True)
    for name, status in (("old-1", "finished"), ("old-2", 3)):
        table = pa.table({"experiment": ["train-synthetic"], "trial_id": [name], "status": [status]})
        pq.write_table(table, folder / f"{name}.parquet")
    for run, command in enumerate((["results"], ["report"], ["report", "--space", "tiny"])):
        assert main([*command, "--results", str(root)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.splitlines()[-1] == (
            f"modsar: error: no trial rows under {root}; pass --results the folder `modsar search` or "
            "`modsar train` wrote to"
        )
        named = [f"{folder / 'old-1.parquet'}:", f"{folder / 'old-2.parquet'}:"] if run == 0 else []
        assert [line.split()[3] for line in captured.err.splitlines()[:-1]] == named  # once per process
    good = write_row(str(root), older_row("good", experiment="train-synthetic"))
    assert sorted(read_rows(str(root))["trial_id"]) == ["good"]
    assert Path(good).parent == folder
    capsys.readouterr()


@pytest.mark.parametrize("command", [["report"], ["report", "--space", "tiny"], ["report", "--dataset", "x"]])
def test_report_on_rows_lacking_a_column_is_one_line(tmp_path, capsys, command):
    """Marked rows without a column the report reads (hand-made, or from a tool of one's own) are refused in
    one line naming the column, not a KeyError."""
    root = tmp_path / "results"
    write_row(str(root), trial("t1", **{"test.ndcg@10": 0.3}))
    assert main([*command, "--results", str(root)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [
        f"modsar: error: the trial rows under {root} have no 'role' column, which a report reads (nor "
        "selected, dataset, space, seed); move the files that lack them out of the trials folders"
    ]


@pytest.mark.parametrize(
    "command", [["results"], ["results", "--experiment", "e"], ["report"], ["analyze", "--experiment", "e"]]
)
def test_a_results_root_that_is_a_file_is_one_line(tmp_path, capsys, command):
    """`--results` naming a row file instead of the results folder: say so, not NotADirectoryError."""
    path = write_row(str(tmp_path / "results"), older_row("t1", experiment="e"))
    assert main([*command, "--results", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [
        f"modsar: error: the results root {path} is a file; pass the results folder (the one `modsar train` "
        "or `modsar search` wrote to, which holds <experiment>/trials/)"
    ]


def test_a_trials_folder_that_is_a_file_is_one_line(tmp_path, capsys):
    trials = tmp_path / "results" / "e" / "trials"
    trials.parent.mkdir(parents=True)
    trials.write_text("not a folder")
    assert main(["results", "--results", str(tmp_path / "results"), "--experiment", "e"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"modsar: error: {trials} is a file where the trials folder of experiment 'e' belongs; move it away"
    ]


def test_analyze_an_experiment_whose_rows_have_no_checkpoint_column(tmp_path, capsys):
    """`modsar train` writes a row without a checkpoint column when training diverged before any validation:
    `analyze --experiment` on it says there is no checkpoint, in one line."""
    root = tmp_path / "results"
    write_row(
        str(root), older_row("t1", experiment="e", status="diverged", error="TrainingDiverged: loss nan")
    )
    assert main(["analyze", "--experiment", "e", "--results", str(root)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [
        f"modsar: error: experiment 'e' has no selected trials or trained checkpoints under {root}; run "
        "`modsar search` to the end (it selects the best AE and AR) or `modsar train`"
    ]


def test_json_stdout_is_the_document_alone_whatever_a_plugin_prints(tmp_path, capsys, monkeypatch):
    """A plugin (or a library) printing to stdout goes to stderr under --json, in every command that has it:
    train and generate import a plugin that prints; search's run is replaced by one that prints."""

    def plugin(name: str) -> str:  # a new file per command: each is imported, and prints, once
        path = tmp_path / f"{name}.py"
        path.write_text(f"print('HELLO FROM {name}')\n")
        return str(path)

    def document(*args: str):
        assert main(list(args)) == 0
        captured = capsys.readouterr()
        return strict(captured.out), captured.err

    results = tmp_path / "results"
    monkeypatch.setenv("MODSAR_PLUGINS", plugin("p1"))
    row, err = document(
        "train",
        "--dataset",
        "synthetic",
        "--quiet",
        "--json",
        "--results",
        str(results),
        "train.max_epochs=1",
        "model.hidden_size=8",
        "model.num_layers=1",
    )
    assert row["status"] == "finished" and "HELLO FROM p1" in err
    monkeypatch.setenv("MODSAR_PLUGINS", plugin("p2"))
    metrics, err = document(
        "generate", "--checkpoint", row["checkpoint"], "--steps", "1", "--users", "5", "--json", "--quiet"
    )
    assert metrics["steps"] == 1 and "HELLO FROM p2" in err

    import modsar.sweep

    def noisy_search(request, plan=None, predicted=None):
        print("HELLO FROM search")
        return {"experiment": request.experiment or "x", "trials": 0, "problem": None}

    monkeypatch.setattr(modsar.sweep, "run_search", noisy_search)
    summary, err = document("search", "--space", "quickstart", "--dataset", "synthetic", "--json")
    assert summary == {"experiment": "x", "trials": 0, "problem": None} and err.endswith(
        "\nHELLO FROM search\n"
    )
    assert err.startswith("cost of 'quickstart' on synthetic")  # the estimate, on stderr under --json


def test_results_flags_that_cannot_mean_anything_and_queries_without_an_answer(tmp_path, capsys):
    root = tmp_path / "results"
    write_row(str(root), trial("t1"))
    for args, message in (
        (["--limit", "0"], "--limit must be >= 1 (rows to show); got 0"),
        (["--limit", "-1"], "--limit must be >= 1 (rows to show); got -1"),
        (["--where", "status"], "--where 'status' is not KEY=VALUE"),
    ):
        assert main(["results", "--results", str(root), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]
    assert main(["results", "--results", str(root), "--where", "status=error"]) == 0
    assert capsys.readouterr().out.strip() == f"no trial row under {root} matches --where status=error"
    assert main(["results", "--results", str(root), "--where", "status=error", "--json"]) == 0
    assert strict(capsys.readouterr().out) == []


def test_symlinks_and_copies_under_the_root_count_each_trial_once(tmp_path, capsys):
    """A loop `loop -> ..` read every row ~41 times; an alias `latest -> e` or a backup copy of `e` doubled
    each trial (report: "2 selected rows, run --resume"). A symlinked experiment kept elsewhere still
    counts."""
    import os
    import shutil

    root = tmp_path / "results"
    for name in ("t1", "t2"):
        write_row(str(root), trial(name))
    elsewhere = tmp_path / "disk2"
    write_row(str(elsewhere), trial("t3", experiment="far"))
    os.symlink(elsewhere / "far", root / "far")
    os.symlink("..", root / "e" / "loop")
    os.symlink("e", root / "latest")
    shutil.copytree(root / "e" / "trials", root / "e-backup" / "trials")
    capsys.readouterr()
    rows = read_rows(str(root))
    assert sorted(rows["trial_id"]) == ["t1", "t2", "t3"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"modsar: warning: skipped 2 files in {root}/e-backup/trials (trials t1, t2 of experiment 'e'): "
        f"{root}/e/trials holds the same trials, read once from there; move the copy out of the "
        "results root"
    ]
    assert sorted(read_rows(str(root), "e")["trial_id"]) == ["t1", "t2"]
    shutil.copy(root / "e" / "trials" / "t1.parquet", root / "e" / "trials" / "t1 (copy).parquet")
    assert sorted(read_rows(str(root), "e")["trial_id"]) == ["t1", "t2"]
    assert capsys.readouterr().err.strip().splitlines() == [
        f"modsar: warning: skipped {root}/e/trials/t1 (copy).parquet: it holds trial t1 of experiment 'e', "
        f"as {root}/e/trials/t1.parquet does, read once from there; move the copy out of the results root"
    ]
