"""Row files and results roots that are not what they claim (issue 39): a tampered row's names never place a
file outside --out, and a results URI no filesystem can open is one line, not a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_hostile_data_report import _report_rows

from modsar.cli import main
from modsar.errors import ModsarError
from modsar.records.rows import filesystem, read_rows


def _tamper(source: Path, target: Path, **columns: object) -> Path:
    """A copy of a real row file with `columns` set to other values, its schema (and row mark) kept."""
    table = pq.read_table(source)
    for name, value in columns.items():
        index = table.schema.get_field_index(name)
        field = table.schema.field(index)
        table = table.set_column(index, field, pa.array([value] * table.num_rows, field.type))
    pq.write_table(table, target)
    return target


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file() or p.is_symlink()}


def _warnings(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "warning" in line]


def test_a_tampered_row_is_read_as_its_folders_or_skipped_and_the_report_writes_nothing_outside_out(
    tmp_path, capsys
):
    root = tmp_path / "results"
    _report_rows(str(root))
    trials = root / "vanilla-video" / "trials"
    real = trials / "v2.parquet"
    _tamper(real, trials / "x1.parquet", experiment="../../evil", trial_id="x1", selected=False)
    _tamper(real, trials / "x2.parquet", dataset="../../x", trial_id="x2")
    odd = root / "odd#name" / "trials"  # a folder no experiment could be named: its rows make no path
    odd.mkdir(parents=True)
    _tamper(real, odd / "o1.parquet", experiment="odd#name", trial_id="o1")
    before = _files(tmp_path)
    out = tmp_path / "deep" / "report"
    capsys.readouterr()

    assert main(["report", "--results", str(root), "--out", str(out)]) == 0
    written = _files(tmp_path) - before
    assert written and all(out in p.parents for p in written), sorted(map(str, written))
    assert not any("evil" in str(p) or "odd" in str(p) or p.name.startswith("bars_.") for p in written)
    err = _warnings(capsys)
    assert err == [  # one line per folder and kind, each file's reason, not every path
        f"modsar: warning: rows in {root}/vanilla-video name experiment '../../evil': read as "
        "'vanilla-video' (the folder was renamed or copied)",
        f"modsar: warning: skipped 1 row file in {odd} (first o1.parquet: the folder's name 'odd#name' holds "
        "the character '#'): a report names folders and files after a row's experiment and dataset; rename "
        "the folder",
        f"modsar: warning: skipped 1 row file in {trials} (first x2.parquet: its dataset '../../x' holds the "
        "path separator '/'): a report names folders and files after a row's experiment and dataset; move "
        "such files out of the trials folder",
    ], err

    rows = read_rows(str(root), "vanilla-video")  # the warnings were said once in this process
    assert sorted(rows["trial_id"]) == ["v1", "v2", "x1"] and set(rows["dataset"]) == {"video"}
    assert set(rows["experiment"]) == {"vanilla-video"}
    assert capsys.readouterr().err == ""


def test_a_renamed_experiment_folder_reads_as_its_new_name_and_an_alias_of_one_still_reads(tmp_path, capsys):
    root = tmp_path / "results"
    _report_rows(str(root))
    (root / "vanilla-video").rename(root / "renamed")
    os.symlink("vanilla-beauty", root / "latest")
    capsys.readouterr()
    latest = read_rows(str(root), "latest")
    assert sorted(latest["trial_id"]) == ["b1", "b2"] and set(latest["experiment"]) == {"vanilla-beauty"}
    rows = read_rows(str(root))
    assert sorted(rows["trial_id"]) == ["b1", "b2", "v1", "v2"]
    assert set(rows[rows["dataset"] == "video"]["experiment"]) == {"renamed"}
    assert _warnings(capsys) == [  # once for the folder, not once per file
        f"modsar: warning: rows in {root}/renamed name experiment 'vanilla-video': read as 'renamed' (the "
        "folder was renamed or copied)"
    ]


def test_a_hostile_experiment_column_is_said_in_a_short_line(tmp_path, capsys):
    root = tmp_path / "results"
    _report_rows(str(root))
    trials = root / "vanilla-beauty" / "trials"
    for i, name in enumerate(("e" * 2500, "../" * 800, "\x00")):
        _tamper(trials / "b1.parquet", trials / f"t{i}.parquet", experiment=name, trial_id=f"t{i}")
    capsys.readouterr()
    rows = read_rows(str(root), "vanilla-beauty")
    assert sorted(rows["trial_id"]) == ["b1", "b2", "t0", "t1", "t2"]
    assert set(rows["experiment"]) == {"vanilla-beauty"}
    err = _warnings(capsys)
    assert len(err) == 1 and len(err[0]) < 200 + len(str(root)), err
    assert " and 2 others: read as 'vanilla-beauty'" in err[0] and "'eeeeeeeeee" in err[0]


def test_read_rows_hands_report_only_names(tmp_path, capsys):
    """A dataset no check_name accepts (a path, a hidden name) is skipped even where the folder is right."""
    root = tmp_path / "results"
    _report_rows(str(root))
    trials = root / "vanilla-beauty" / "trials"
    for i, name in enumerate(("x" * 2500, "..", ".hidden", "a\\b")):
        _tamper(trials / "b1.parquet", trials / f"t{i}.parquet", dataset=name, trial_id=f"t{i}")
    capsys.readouterr()
    rows = read_rows(str(root), "vanilla-beauty")
    assert sorted(rows["trial_id"]) == ["b1", "b2"]
    err = _warnings(capsys)
    assert len(err) == 1 and len(err[0]) < 300 + len(str(trials)), err
    assert err[0].startswith(
        f"modsar: warning: skipped 4 row files in {trials} (first t0.parquet: its dataset "
    )
    assert "'xxxxxxxxxx" in err[0] and "is 2500 bytes long" in err[0]


def test_plot_file_names_never_hold_a_path():
    from modsar.report.plots import file_part

    assert file_part("video") == "video" and file_part("ndcg10") == "ndcg10"
    for hostile in ("..", "../../evil", "a/b", "a\\b", ".hidden", "-x", "x" * 300, "", "a\x00b"):
        part = file_part(hostile)
        assert part and "/" not in part and "\\" not in part and "\x00" not in part
        assert not part.startswith(".") and len(part.encode()) <= 128
    assert file_part("a/b") != file_part("a\\b")  # two hostile names never share one file


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        ("bogus://x", "bogus://x"),
        ("s3://", "s3://"),
        ("gs:///", "gs:///"),
        ("file://", "file://"),
    ],
)
def test_a_results_uri_no_filesystem_opens_is_one_line(uri, said, capsys):
    assert main(["results", "--results", uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"modsar: error: cannot open the results root {said}: ")


def test_a_bad_uri_error_hides_its_credentials():
    with pytest.raises(ModsarError) as raised:
        filesystem("bogus://alice:hunter2@host/x")
    assert "hunter2" not in str(raised.value) and "alice:***@host" in str(raised.value)


def test_the_command_line_says_a_bad_uri_in_one_line_without_a_traceback(tmp_path):
    hdfs = shutil.which("java") is None and not os.environ.get("JAVA_HOME")  # no HDFS client: fails at once
    for uri in ("bogus://x", *(["hdfs://nohost:1/x"] if hdfs else [])):
        done = subprocess.run(
            [sys.executable, "-m", "modsar.cli", "results", "--results", uri],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
        assert lines[0].startswith(f"modsar: error: cannot open the results root {uri}: ")
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize("folder", ["odd#name", ".hidden", "-dash"])
def test_a_checkpoint_under_a_folder_no_experiment_could_be_named_has_no_row(tmp_path, folder):
    from modsar.records.rescore import checkpoint_row

    experiment = tmp_path / "results" / folder
    (experiment / "trials").mkdir(parents=True)
    checkpoint = experiment / "checkpoints" / "t1.pt"
    assert checkpoint_row(checkpoint) is None
