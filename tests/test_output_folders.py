"""Folder options that cannot be folders (a file, or a path under one; an unwritable folder) are refused in
one line before any work; a killed `data prepare` leaves no staging folder behind for good."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import write

from modsar.cli import main
from modsar.data import store
from modsar.errors import ModsarError
from modsar.outputs import ensure_writable_dir

TINY = str(Path(__file__).parent / "spaces" / "tiny.yaml")
PAIRS = "".join(f"{u} {i}\n" for u in range(1, 7) for i in range(u, u + 5))


def _commands(tmp: Path) -> list[tuple[list[str], str, str]]:
    afile = tmp / "afile"
    return [
        (
            ["train", "--dataset", "synthetic", "--quiet", "--results", str(afile)],
            "--results",
            f"{afile} is a file",
        ),
        (
            ["train", "--dataset", "synthetic", "--quiet", "--results", str(tmp), "--experiment", "afile"],
            "--results",
            f"{afile} is a file",
        ),
        (
            ["train", "--dataset", "synthetic", "--quiet", "--results", str(afile / "r")],
            "--results",
            f"lies under the file {afile}",
        ),
        (
            ["search", "--space", TINY, "--dataset", "synthetic", "--results", str(afile)],
            "--results",
            f"{afile} is a file",
        ),
        (
            ["generate", "--checkpoint", "nosuch.pt", "--steps", "2", "--out", str(afile)],
            "--out",
            "is a file",
        ),
        (
            ["data", "profile", "synthetic", "--out", str(afile / "x")],
            "--out",
            f"lies under the file {afile}",
        ),
        (["report", "--out", str(afile)], "--out", "is a file"),
        (["report", "--out", str(afile / "x")], "--out", f"lies under the file {afile}"),
        (["analyze", "--checkpoint", "nosuch.pt", "--out", str(afile)], "--out", "is a file"),
        (["data", "prepare", "synthetic", "--data-dir", str(afile)], "--data-dir", "is a file"),
        (["data", "stats", "synthetic", "--data-dir", str(afile)], "--data-dir", "is a file"),
        (["data", "list", "--data-dir", str(afile / "d")], "--data-dir", f"lies under the file {afile}"),
    ]


@pytest.mark.parametrize("index", range(12))
def test_a_folder_option_on_a_file_is_one_line_before_any_work(tmp_path, isolated_data_root, capsys, index):
    (tmp_path / "afile").write_text("mine")
    argv, flag, message = _commands(tmp_path)[index]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"modsar: error: {flag} ") and message in err
    assert (tmp_path / "afile").read_text() == "mine"
    assert not isolated_data_root.exists()  # nothing generated, trained or written


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "--space", TINY, "--dataset", "synthetic", "--results", ""],
        ["train", "--dataset", "synthetic", "--results", " "],
        ["report", "--results", ""],
        ["report", "--out", ""],
        ["data", "prepare", "synthetic", "--data-dir", ""],
    ],
)
def test_an_empty_folder_option_is_refused_in_one_line(
    tmp_path, isolated_data_root, capsys, monkeypatch, argv
):
    """An empty --results once put a search's rows under the current folder and its state under /."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    flag = next(a for a in argv if a.startswith("--") and argv[argv.index(a) + 1].strip() == "")
    assert err == f"modsar: error: {flag} is empty: name a folder, or leave {flag} out for its default\n"
    assert not list(tmp_path.iterdir()) and not isolated_data_root.exists()  # nothing written anywhere


def test_the_python_api_refuses_an_empty_results_folder(tmp_path, isolated_data_root, monkeypatch):
    import modsar
    from modsar.sweep import SearchRequest

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModsarError, match=r"^--results is empty: name a folder"):
        SearchRequest(space="quickstart", dataset="synthetic", results=" ")
    with pytest.raises(ModsarError, match=r"^results is empty: name a folder"):
        modsar.train(dataset="synthetic", results="", checkpoint=False)
    assert not list(tmp_path.iterdir()) and not isolated_data_root.exists()


def test_search_refuses_an_experiment_folder_that_is_a_file_before_ray(
    tmp_path, isolated_data_root, capsys, monkeypatch
):
    from modsar.sweep import tuner

    monkeypatch.setattr(tuner, "connect_ray", lambda req: pytest.fail("Ray started"))
    (tmp_path / "tiny-synthetic").write_text("mine")
    code = main(["search", "--space", TINY, "--dataset", "synthetic", "--results", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{tmp_path / 'tiny-synthetic'} is a file" in err


def test_ensure_writable_dir_accepts_folders_to_be_and_refuses_unwritable_ones(tmp_path, monkeypatch):
    ensure_writable_dir(tmp_path / "a" / "b", "--out")  # created later: fine
    ensure_writable_dir(tmp_path, "--out")
    ensure_writable_dir("s3://bucket/results", "--results")  # its filesystem decides
    assert not (tmp_path / "a").exists()  # a check, not a mkdir
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)
    with pytest.raises(ModsarError, match=rf"--out {tmp_path / 'a'}: cannot write to the folder {tmp_path} "):
        ensure_writable_dir(tmp_path / "a", "--out")
    ensure_writable_dir(
        tmp_path / "a", "--data-dir", write=False
    )  # read-only commands may read a shared copy


def _staging(root: Path, name: str, pid: int | None, age_s: float = 0.0) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "interactions.parquet").write_text("half")
    if pid is not None:
        (folder / ".owner").write_text(json.dumps({"host": socket.gethostname(), "pid": pid}))
    if age_s:
        then = time.time() - age_s
        os.utime(folder, (then, then))
    return folder


def test_prepare_removes_what_a_killed_prepare_of_that_name_left_and_keeps_the_rest(
    tmp_path, isolated_data_root, capsys
):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    root = isolated_data_root
    gone = [
        _staging(root, ".staging-toy-dead0001", dead.pid),  # its process has ended
        _staging(root, ".old-toy-dead0002", dead.pid),  # killed between the two renames of a --force
        _staging(root, ".staging-toy-old_0003", None, age_s=store.STALE_STAGING_S + 60),
    ]  # no owner, old
    kept = [
        _staging(root, ".staging-toy-live0004", os.getpid()),  # a prepare still writing
        _staging(root, ".staging-toy-new_0005", None),  # no owner (older version), recent: may be live
        _staging(root, ".staging-toy-1m-dead0006", dead.pid),  # another dataset's (toy-1m)
        _staging(root, ".staging-toy-far_0007", None, age_s=60),
    ]
    remote = kept[-1] / ".owner"
    remote.write_text(json.dumps({"host": "another-node", "pid": dead.pid}))  # another host's: age decides
    src = write(tmp_path / "log.txt", PAIRS)
    assert main(["data", "prepare", "toy", "--source", str(src)]) == 0
    assert [f.exists() for f in gone] == [False] * 3 and all(f.exists() for f in kept)
    assert sorted(p.name for p in (root / "toy").iterdir()) == [
        "interactions.parquet",
        "items.parquet",
        "manifest.json",
    ]
    capsys.readouterr()
    assert main(["data", "list", "--json"]) == 0
    names = [e["name"] for e in json.loads(capsys.readouterr().out)]
    assert "toy" in names and not [n for n in names if "staging" in n or n.startswith(".")]
    assert (
        main(["data", "prepare", "toy", "--source", str(src), "--force"]) == 0
    )  # the replaced copy is removed
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".old-")) == []


def test_atomic_write_leaves_the_old_file_or_the_new_one_never_half(tmp_path):
    """Every file ModSAR writes goes through atomic_write: a write that raises leaves the earlier file as it
    was and no temporary name behind; one that ends replaces it whole."""
    from modsar.outputs import atomic_write

    target = tmp_path / "deep" / "table.json"
    with atomic_write(target) as tmp:
        assert tmp != str(target) and tmp.endswith("-table.json") and "/deep/.tmp-" in tmp
        Path(tmp).write_text("first")
    assert target.read_text() == "first"
    with pytest.raises(RuntimeError), atomic_write(target) as tmp:
        Path(tmp).write_text("half a sec")
        raise RuntimeError("killed mid-write")
    assert target.read_text() == "first" and sorted(p.name for p in target.parent.iterdir()) == ["table.json"]
