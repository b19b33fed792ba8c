"""What `modsar results` and `modsar report` take for trial rows under a results root (marked row files only,
older unmarked rows too; other Parquet never; a bad file named, the good rows kept), and strict JSON from
every --json command and every JSON file."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write

from modsar.cli import main
from modsar.outputs import write_parquet
from modsar.results import read_rows, write_row


def strict(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity, as jq, JavaScript and Go do."""
    def refuse(name: str):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def trial(trial_id: str, experiment: str = "e", **values) -> dict:
    return {"experiment": experiment, "trial_id": trial_id, "status": "finished", "task": "ar",
            "valid.ndcg@10": 0.25, **values}


def foreign_outputs(root: Path) -> None:
    """What `modsar generate --out` and `modsar data profile --out` put under a results root."""
    write_parquet(pd.DataFrame({"user": range(2000), "step": 1, "item": 7, "future_item": 3}),
                  root / "x" / "rollouts.parquet")
    write_parquet(pd.DataFrame({"measure": ["zipf"], "value": [1.1]}), root / "profile" / "profile.parquet")


def test_rows_are_marked_and_other_parquet_under_the_root_is_never_a_row(tmp_path, capsys):
    root = tmp_path / "results"
    path = write_row(str(root), trial("t1"))
    write_row(str(root), trial("t2", status="error", error="RuntimeError: boom"))
    assert pq.read_schema(path).metadata == {b"modsar.kind": b"trial-row"}
    old = root / "old" / "trials" / "t0.parquet"  # a row written before rows were marked: still a row
    old.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([trial("t0", experiment="old")]), old)
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
    assert ("not a trial row (no modsar.kind=trial-row mark, nor the experiment, trial_id, status columns of "
            "an older row); move it out of the trials folder") in by_file["stray.parquet"]


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
            "`modsar train` wrote to"]


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
    row = printed(capsys, "train", "--dataset", "synthetic", "--quiet", "--json", "--results", str(results),
                  "train.max_epochs=1", "model.hidden_size=8", "model.num_layers=1")
    listed = printed(capsys, "results", "--results", str(results), "--json")
    assert [r["trial_id"] for r in listed] == [row["trial_id"]]
    metrics = printed(capsys, "generate", "--checkpoint", row["checkpoint"], "--steps", "1", "--users", "50",
                      "--json", "--quiet", "--out", str(tmp_path / "gen"))
    assert metrics["steps"] == 1 and metrics["immediate_repeat_rate"] is None
    assert metrics["distinct_2"] is None
    assert strict((tmp_path / "gen" / "metrics.json").read_text()) == metrics
