"""Hostile names, concurrent writers and write faults (issue 39): a dataset or experiment name is checked the
same way everywhere and never names a path; a second writer of one dataset or experiment is refused, not
raced; a full disk or read-only folder is one line that loses nothing; dataset folders follow the umask."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from modsar.cli import main
from modsar.config import load_config, parse_override
from modsar.data.store import load_dataset, prepare_dataset
from modsar.errors import ModsarError
from modsar.outputs import NAME_BYTES, atomic_write, check_name, writer_lock

TINY = str(Path(__file__).parent / "spaces" / "tiny.yaml")
# a small corpus every name can be trained on: 8 users of 6 events over 12 items
PAIRS = "".join(f"{u} {(u * 3 + k) % 12 + 1}\n" for u in range(1, 9) for k in range(6))
SMALL = ["train.max_epochs=1", "model.hidden_size=8", "eval.ks=[1,2]", "train.monitor=ndcg@2", "--quiet"]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "log.txt"
    path.write_text(PAIRS)
    return path


def one_error_line(capsys) -> str:
    """The command's stderr, which must be exactly one `modsar: error:` line."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("modsar: error: "), err
    return err


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


# --- names ----------------------------------------------------------------------------------------

HOSTILE = [
    ("", "is empty"),
    ("   ", "is only spaces"),
    (".", "is a path"),
    ("..", "is a path"),
    ("a/b", "path separator '/'"),
    ("../../x", "path separator '/'"),
    ("a\\b", "path separator"),
    ("a\u2215b", "path separator"),  # DIVISION SLASH, a look-alike
    ("a\uff0fb", "path separator"),  # FULLWIDTH SOLIDUS
    ("a\x00b", "control or invisible character '\\x00'"),
    ("a\nb", "control or invisible character '\\n'"),
    ("a\u200bb", "control or invisible character"),  # zero-width space
    ("a\u202eb", "control or invisible character"),  # right-to-left override
    ("-rf", "starts with '-'"),
    (".hidden", "starts with '.'"),
    ("_downloads", "starts with '_'"),
    ("~x", "starts with '~'"),
    (" x", "starts with ' '"),
    ("x ", "ends in a space"),
    ("a*b", "holds the character '*'"),
    ("a:b", "holds the character ':'"),
    ("x" * 300, "is 300 bytes long"),
    ("é" * 65, "is 130 bytes long"),  # bytes, not characters, are what a file name is limited to
    (123, "is a int, not text"),
    (None, "is a NoneType, not text"),
]


@pytest.mark.parametrize(("name", "problem"), HOSTILE)
def test_a_hostile_name_is_refused_naming_what_the_value_and_the_rule(name, problem):
    with pytest.raises(ModsarError) as caught:
        check_name(name, "--experiment")
    message = str(caught.value)
    assert message.startswith("--experiment ") and problem in message and "\n" not in message
    assert f"a name is 1 to {NAME_BYTES} bytes" in message
    assert len(message) < 400  # a 300-character name is shown cut short


@pytest.mark.parametrize(
    "name", ["123", "on", "null", "true", "1e3", "ml-1m", "my data", "v2.1_(b)", "é" * 64]
)
def test_names_that_are_folder_names_pass(name):
    assert check_name(name, "dataset") == name


@pytest.mark.parametrize(
    ("argv", "option", "value"),
    [
        (["train", "--experiment", "../../x"], "--experiment", "'../../x'"),
        (["train", "--experiment", "."], "--experiment", "'.'"),
        (["train", "--dataset", "../x"], "--dataset", "'../x'"),
        (["train", "dataset=../x"], "'dataset'", "'../x'"),
        (["train", "--dataset", "x" * 300], "--dataset", "'xxxx"),
        (
            ["search", "--space", TINY, "--dataset", "synthetic", "--experiment", "..", "--overwrite"],
            "--experiment",
            "'..'",
        ),
        (
            ["search", "--space", TINY, "--dataset", "synthetic", "--experiment", ".", "--overwrite"],
            "--experiment",
            "'.'",
        ),
        (["results", "--experiment", ".."], "--experiment", "'..'"),
        (["report", "--experiment", "a/b"], "--experiment", "'a/b'"),
        (["report", "--dataset", "a\x00b"], "--dataset", "'a\\x00b'"),
        (["analyze", "--experiment", "../e"], "--experiment", "'../e'"),
        (["data", "prepare", "a/b", "--source", "x"], "dataset name", "'a/b'"),
        (["data", "prepare", "--source", "x", "--", "-x"], "dataset name", "'-x'"),
        (["data", "stats", ".."], "dataset name", "'..'"),
        (["data", "profile", "   "], "dataset name", "'   '"),
    ],
)
def test_every_command_refuses_a_bad_name_in_one_line_before_any_work(
    tmp_path, isolated_data_root, capsys, monkeypatch, argv, option, value
):
    """Nothing is written anywhere (the results root, the folder above it, the data folder) and no search
    starts: `--experiment . --overwrite` used to delete every experiment of the results root."""
    results = tmp_path / "root" / "results"
    (results / "kept" / "trials").mkdir(parents=True)
    (results / "kept" / "trials" / "row.parquet").write_text("a row")
    monkeypatch.chdir(tmp_path / "root")
    before = files_under(tmp_path)
    assert main([*argv, *(["--results", str(results)] if argv[0] in ("train", "search") else [])]) == 2
    err = one_error_line(capsys)
    assert f"{option} {value}" in err and "a name is 1 to" in err
    assert files_under(tmp_path) == before and not isolated_data_root.exists()


def test_the_default_experiment_of_a_search_is_checked_too(tmp_path, capsys):
    space = tmp_path / "my space[1].yaml"
    space.write_text(Path(TINY).read_text())
    assert main(["search", "--space", str(space), "--dataset", "synthetic", "--results", str(tmp_path)]) == 2
    assert "the default experiment name <space>-<dataset>" in one_error_line(capsys)


def test_the_api_paths_check_names_too(tmp_path):
    """The Python API reaches the same functions: a name is refused there before anything is written."""
    from modsar.records.run import train_and_record

    with pytest.raises(ModsarError, match=re.escape("dataset '../x' holds the path separator")):
        load_dataset("../x")
    with pytest.raises(ModsarError, match=re.escape("dataset name '..' is a path")):
        prepare_dataset("..", [tmp_path / "nothing.txt"], root=tmp_path / "data")
    with pytest.raises(ModsarError, match=re.escape("experiment '../../x' holds the path separator")):
        train_and_record(load_config(None, []), str(tmp_path / "results"), "../../x")
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("name", ["123", "on", "null", "true", "1e3"])
def test_names_yaml_reads_as_numbers_or_booleans_stay_names(name):
    """dataset=123 was the int 123, dataset=null None: prepared, such a dataset could not be trained."""
    assert parse_override(f"dataset={name}") == ("dataset", name)
    assert load_config(None, [f"dataset={name}"]).dataset == name
    assert parse_override('dataset="123"') == ("dataset", "123")  # YAML's quotes still mean text


def test_datasets_named_like_numbers_and_booleans_prepare_and_train(tmp_path, source, capsys):
    results = tmp_path / "results"
    for name in ("123", "null", "1e3"):
        assert main(["data", "prepare", name, "--source", str(source)]) == 0
    assert main(["train", "--dataset", "123", "--results", str(results), *SMALL]) == 0
    assert main(["train", "dataset=null", "--results", str(results), *SMALL]) == 0
    assert main(["train", "--dataset", "1e3", "--experiment", "123", "--results", str(results), *SMALL]) == 0
    rows = {pq.read_table(f).to_pylist()[0]["dataset"] for f in results.glob("*/trials/*.parquet")}
    assert rows == {"123", "null", "1e3"}
    assert sorted(p.name for p in results.iterdir() if not p.name.startswith(".")) == [
        "123",
        "train-123",
        "train-null",
    ]


# --- --overwrite ----------------------------------------------------------------------------------


def _search(results: Path, experiment: str, *extra: str) -> int:
    return main(
        [
            *("search", "--space", TINY, "--dataset", "synthetic", "--results", str(results), "--quiet"),
            *("--no-estimate", "--experiment", experiment, *extra),
        ]
    )


def test_overwrite_refuses_a_folder_that_holds_no_search_and_deletes_nothing(tmp_path, capsys, monkeypatch):
    from modsar.sweep import tuner

    monkeypatch.setattr(tuner, "connect_ray", lambda req: pytest.fail("Ray started"))
    results = tmp_path / "results"
    (results / "mine" / "trials").mkdir(parents=True)
    (results / "mine" / "notes.txt").write_text("keep me")
    before = files_under(results)
    assert _search(results, "mine", "--overwrite") == 2
    err = one_error_line(capsys)
    assert "--overwrite" in err and "holds no search" in err and "nothing was deleted" in err
    assert files_under(results) == before
    (results / "mine" / "search.json").write_text("not json")  # a file of that name ModSAR did not write
    assert _search(results, "mine", "--overwrite") == 2
    assert "holds no search" in one_error_line(capsys) and (results / "mine" / "notes.txt").exists()


def test_overwrite_never_deletes_through_a_symlink(tmp_path, capsys, monkeypatch):
    from modsar.sweep import tuner

    monkeypatch.setattr(tuner, "connect_ray", lambda req: pytest.fail("Ray started"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "search.json").write_text(json.dumps({"request": {}, "base": {}}))
    (outside / "precious.txt").write_text("keep me")
    results = tmp_path / "results"
    results.mkdir()
    (results / "linked").symlink_to(outside, target_is_directory=True)
    assert _search(results, "linked", "--overwrite") == 2
    err = one_error_line(capsys)
    assert "is a symbolic link" in err and "nothing was deleted" in err
    assert (outside / "precious.txt").read_text() == "keep me" and (results / "linked").is_symlink()


def test_overwrite_replaces_a_search_it_recognises(tmp_path, capsys, monkeypatch):
    """The one folder --overwrite deletes: a search's, with the search.json run_search writes."""
    from modsar.sweep import tuner

    def stop(*args):
        raise ModsarError("stopped before any trial")

    monkeypatch.setattr(tuner, "connect_ray", lambda req: None)
    monkeypatch.setattr(tuner, "check_resources", lambda req: {"CPU": 1.0})
    monkeypatch.setattr(tuner, "_run_directions", stop)
    results = tmp_path / "results"
    (results / "old" / "trials").mkdir(parents=True)
    (results / "old" / "trials" / "stale.parquet").write_text("an earlier search's row")
    (results / "old" / "search.json").write_text(json.dumps({"request": {"space": "x"}, "base": {}}))
    (results / "other" / "trials").mkdir(parents=True)
    assert _search(results, "old", "--overwrite") == 2
    assert "stopped before any trial" in one_error_line(capsys)
    assert not (results / "old" / "trials" / "stale.parquet").exists()
    assert json.loads((results / "old" / "search.json").read_text())["request"]["experiment"] == "old"
    assert (results / "other" / "trials").is_dir()  # the other experiments are untouched


def test_overwrite_refuses_a_search_folder_that_holds_a_users_files(tmp_path, capsys, monkeypatch):
    """A user's notes or a report written into a search's folder are no search's: --overwrite once deleted
    them without a word. It names them, deletes nothing, and replaces the folder once they are moved out."""
    from modsar.sweep import tuner

    monkeypatch.setattr(tuner, "connect_ray", lambda req: pytest.fail("Ray started"))
    results = tmp_path / "results"
    folder = results / "s"
    (folder / "trials").mkdir(parents=True)
    (folder / "ray-ae").mkdir()
    (folder / ".tmp-search.json").write_text("a killed write")
    (folder / "search.json").write_text(json.dumps({"request": {"space": "x"}, "base": {}}))
    (folder / ".DS_Store").write_text("a file browser's")
    (folder / "ray-notes.md").write_text("mine")
    (folder / "NOTES.md").write_text("mine")
    (folder / "report").mkdir()
    (folder / "report" / "report.md").write_text("mine too")
    before = files_under(results)
    assert tuner._no_search_wrote(str(folder)) == ["NOTES.md", "ray-notes.md", "report/"]
    assert _search(results, "s", "--overwrite") == 2
    err = one_error_line(capsys)
    assert f"--overwrite: {folder} also holds what no search wrote (NOTES.md, ray-notes.md, report/); " in err
    assert (
        "Move those out of the folder, or choose another --experiment" in err
        and files_under(results) == before
    )
    (folder / "NOTES.md").unlink()
    (folder / "ray-notes.md").unlink()
    shutil.rmtree(folder / "report")
    assert tuner._no_search_wrote(str(folder)) == []  # the search's own: --overwrite replaces them


def test_overwrite_refuses_a_search_folder_that_modsar_train_added_to(tmp_path, capsys, monkeypatch):
    """`modsar train --experiment <a search's name>` adds its rows (role "train") to the search's trials/ and
    its checkpoints/ beside them: --overwrite deletes neither, and says which files and how to proceed. The
    search's own rows (search, seed, superseded), and files in trials/ that are no row, go with the folder."""
    from modsar.records.rows import write_row
    from modsar.sweep import tuner

    monkeypatch.setattr(tuner, "connect_ray", lambda req: pytest.fail("Ray started"))
    results = tmp_path / "results"
    (results / "s").mkdir(parents=True)
    (results / "s" / "search.json").write_text(json.dumps({"request": {"space": "x"}, "base": {}}))
    for trial_id, role in (("a", "search"), ("b", "seed"), ("c", "superseded"), ("t1", "train")):
        write_row(str(results), {"experiment": "s", "trial_id": trial_id, "role": role})
    (results / "s" / "trials" / "notes.parquet").write_text("no row")
    before = files_under(results)
    assert tuner._added_by_train(str(results / "s")) == ["trials/t1.parquet"]
    assert _search(results, "s", "--overwrite") == 2
    err = one_error_line(capsys)
    assert "also holds what `modsar train --experiment s` added to the search (trials/t1.parquet)" in err, err
    assert "nothing was deleted" in err and "choose another --experiment" in err, err
    assert files_under(results) == before

    (results / "s" / "trials" / "t1.parquet").unlink()
    (results / "s" / "checkpoints").mkdir()  # a training's checkpoint folder, its row moved away
    (results / "s" / "checkpoints" / "t1.pt").write_bytes(b"")
    assert _search(results, "s", "--overwrite") == 2
    assert "added to the search (checkpoints/)" in one_error_line(capsys)
    (results / "s" / "checkpoints" / "t1.pt").unlink()
    (results / "s" / "checkpoints").rmdir()
    assert tuner._added_by_train(str(results / "s")) == []  # the search's own: --overwrite replaces them


# --- concurrent writers ---------------------------------------------------------------------------


def test_a_second_prepare_of_one_dataset_is_refused_not_raced(tmp_path, source, isolated_data_root, capsys):
    """Two `data prepare race` from different files both said "prepared"; one replaced the other unseen."""
    with writer_lock(isolated_data_root, "race", "dataset 'race'"):  # another process preparing it
        assert main(["data", "prepare", "race", "--source", str(source)]) == 2
        err = one_error_line(capsys)
        assert "dataset 'race'" in err and "being written by another modsar process" in err
        assert not (isolated_data_root / "race").exists()
        assert main(["data", "prepare", "other", "--source", str(source)]) == 0  # another name is free
    assert main(["data", "prepare", "race", "--source", str(source)]) == 0  # the lock went with its holder
    assert sorted(p.name for p in isolated_data_root.iterdir()) == ["other", "race"]  # no lock file left


def test_the_lock_holds_between_processes(tmp_path, source, isolated_data_root):
    """flock, a real OS lock: a `modsar data prepare` in another process is refused while this one holds."""
    with writer_lock(isolated_data_root, "race", "dataset 'race'"):
        done = subprocess.run(
            [sys.executable, "-m", "modsar.cli", "data", "prepare", "race", "--source", str(source)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2 and "being written by another modsar process" in done.stderr
    assert done.stderr.count("\n") == 1 and not (isolated_data_root / "race").exists()


def test_generating_a_dataset_on_first_use_waits_for_the_process_generating_it(isolated_data_root):
    """Two trainings on a fresh data folder: the second waits for the first's synthetic data (here: the lock
    is free again at once), and finds it prepared."""
    first = load_dataset("synthetic")
    assert load_dataset("synthetic").manifest["created"] == first.manifest["created"]


def test_a_training_is_refused_while_a_search_writes_its_experiment(tmp_path, capsys):
    results = tmp_path / "results"
    with writer_lock(results, "e", "experiment 'e'"):  # a search running in experiment e
        assert main(["train", "--experiment", "e", "--results", str(results), *SMALL]) == 2
        assert "experiment 'e'" in one_error_line(capsys)
    assert not results.exists()  # the refused training left nothing, nor did the lock's holder


def test_trainings_share_an_experiment_but_a_search_is_refused_while_one_writes(
    tmp_path, capsys, monkeypatch
):
    """Each training adds a row file of its own (shared lock); a search rewrites rows and may delete its
    folder, so it waits for no one and is refused."""
    from modsar.sweep import tuner

    monkeypatch.setattr(tuner, "connect_ray", lambda req: pytest.fail("Ray started"))
    results = tmp_path / "results"
    with writer_lock(results, "e", "experiment 'e'", shared=True):  # a training running in experiment e
        assert main(["train", "--experiment", "e", "--results", str(results), *SMALL]) == 0
        assert _search(results, "e") == 2
        assert "experiment 'e' in" in one_error_line(capsys)
    assert len(list((results / "e" / "trials").glob("*.parquet"))) == 1


def test_a_lock_file_that_is_a_symlink_is_never_followed(tmp_path, source, isolated_data_root, capsys):
    isolated_data_root.mkdir(parents=True)
    target = tmp_path / "victim.txt"
    target.write_text("untouched")
    (isolated_data_root / ".lock-race").symlink_to(target)
    assert main(["data", "prepare", "race", "--source", str(source)]) == 2
    assert "lock file" in one_error_line(capsys) and target.read_text() == "untouched"


# --- write faults ---------------------------------------------------------------------------------


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_during_a_checkpoint_save_is_one_line_and_leaves_no_file(tmp_path, capsys, monkeypatch):
    from modsar.training import state

    load_dataset("synthetic")  # the data are there before the disk fills

    def half_then_full(payload, out):
        out.write(b"half a checkpoint")
        _full_disk()

    monkeypatch.setattr(state.torch, "save", half_then_full)
    results = tmp_path / "results"
    assert main(["train", "--experiment", "e", "--results", str(results), *SMALL]) == 2
    err = one_error_line(capsys)
    assert "no space left on the device" in err and "nothing was left half-written" in err
    assert [f for f in files_under(results) if f.endswith((".pt", ".parquet")) or ".tmp-" in f] == []


def test_a_run_that_fails_after_its_checkpoint_leaves_no_orphan_checkpoint(tmp_path, capsys, monkeypatch):
    from modsar.records import run

    real_run_trial = run.run_trial

    def saved_then_full(*args, **kwargs):
        real_run_trial(*args, **kwargs)  # the best checkpoint is written
        _full_disk()  # then something after it meets a full disk

    monkeypatch.setattr(run, "run_trial", saved_then_full)
    results = tmp_path / "results"
    assert main(["train", "--experiment", "e", "--results", str(results), *SMALL]) == 2
    assert "no space left on the device" in one_error_line(capsys)
    assert (results / "e" / "checkpoints").is_dir() and list((results / "e").rglob("*.pt")) == []


def test_a_full_disk_at_the_row_write_still_prints_the_metrics(tmp_path, capsys, monkeypatch):
    """The whole training ran: its metrics are shown, the error is one line, and the checkpoint no row
    names is removed."""
    load_dataset("synthetic")
    monkeypatch.setattr(pq, "write_table", _full_disk)
    results = tmp_path / "results"
    assert main(["train", "--experiment", "e", "--results", str(results), *SMALL]) == 2
    captured = capsys.readouterr()
    assert (
        "AR on synthetic" in captured.out and "\ntest " in captured.out and "result row" not in captured.out
    )
    assert captured.err.count("\n") == 1 and "its row was not recorded" in captured.err
    assert "no space left on the device" in captured.err
    assert [f for f in files_under(results) if f.endswith((".pt", ".parquet")) or ".tmp-" in f] == []
    assert main(["train", "--experiment", "e", "--results", str(results), "--json", *SMALL]) == 2
    row = json.loads(capsys.readouterr().out)  # --json: the row that could not be written, on stdout
    assert row["status"] == "finished" and 0 <= row["test.ndcg@2"] <= 1


def test_a_full_disk_during_data_prepare_keeps_the_earlier_dataset(
    tmp_path, source, isolated_data_root, capsys, monkeypatch
):
    assert main(["data", "prepare", "toy", "--source", str(source)]) == 0
    stored = {p: p.read_bytes() for p in (isolated_data_root / "toy").iterdir()}
    other = tmp_path / "other.txt"
    other.write_text(PAIRS + "9 1\n9 2\n9 3\n9 4\n")
    monkeypatch.setattr(pq, "write_table", _full_disk)
    capsys.readouterr()
    for name, force in (("toy", ["--force"]), ("fresh", [])):
        assert main(["data", "prepare", name, "--source", str(other), *force]) == 2
        err = one_error_line(capsys)
        assert f"cannot write {isolated_data_root / name}: no space left on the device" in err
    assert {p: p.read_bytes() for p in (isolated_data_root / "toy").iterdir()} == stored
    assert sorted(p.name for p in isolated_data_root.iterdir()) == ["toy"]  # no staging folder, no lock


def test_a_read_only_data_folder_is_one_line(tmp_path, source, isolated_data_root, capsys, monkeypatch):
    """Simulated without chmod, which root ignores: the permission check, then the filesystem's EROFS at the
    first write (as a read-only mount gives even to root)."""
    isolated_data_root.mkdir(parents=True)
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode, **kw: Path(path) != isolated_data_root and real_access(path, mode)
    )
    assert main(["data", "prepare", "toy", "--source", str(source)]) == 2
    assert "cannot write to the folder" in one_error_line(capsys)
    monkeypatch.setattr(os, "access", real_access)
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if str(path).startswith(str(isolated_data_root)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    assert main(["data", "prepare", "toy", "--source", str(source)]) == 2
    assert "the filesystem is read-only" in one_error_line(capsys)
    assert list(isolated_data_root.iterdir()) == []


def test_atomic_write_turns_a_write_fault_into_one_line_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "report.md"
    target.write_text("the earlier report")
    for fault in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT):
        with pytest.raises(ModsarError, match=f"cannot write {target}: "), atomic_write(target) as tmp:
            Path(tmp).write_text("half")
            raise OSError(fault, os.strerror(fault))
    with pytest.raises(FileNotFoundError), atomic_write(target) as tmp:  # not a write fault: as raised
        raise FileNotFoundError(errno.ENOENT, "an input is missing")
    assert target.read_text() == "the earlier report" and [p.name for p in tmp_path.iterdir()] == [
        "report.md"
    ]


def test_a_write_fault_outside_atomic_write_is_one_line(capsys, monkeypatch):
    """The CLI's last net: any command's full disk or read-only folder ends in one line, not a traceback."""
    from modsar.cli import data_list

    def full(args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/some/where/out.png")

    monkeypatch.setattr(data_list, "run", full)
    assert main(["data", "list"]) == 2
    assert "cannot write /some/where/out.png: no space left" in one_error_line(capsys)


# --- permissions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_dataset_folders_follow_the_umask(tmp_path, source, isolated_data_root, umask):
    """mkdtemp's staging folder is 0700, and became the dataset's: unreadable to the other users of a shared
    data folder, whatever their umask said."""
    old = os.umask(umask)
    try:
        prepare_dataset("toy", [source])
    finally:
        os.umask(old)
    assert (isolated_data_root / "toy").stat().st_mode & 0o777 == 0o777 & ~umask
    for file in (isolated_data_root / "toy").iterdir():
        assert file.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_full_disk_during_a_download_blames_the_disk_not_the_network(
    tmp_path, isolated_data_root, monkeypatch
):
    from modsar.data import store
    from modsar.data.registry import DatasetSpec

    served = tmp_path / "clicks.txt"
    served.write_text(PAIRS)
    spec = DatasetSpec("clicks", "test", "pairs", 20, url=served.as_uri())
    monkeypatch.setattr(store.shutil, "copyfileobj", _full_disk)
    with pytest.raises(ModsarError, match=r"clicks\.txt: no space left on the device") as caught:
        prepare_dataset("clicks", download_missing=True, spec=spec)
    assert "network" not in str(caught.value)
    assert files_under(isolated_data_root) == ["_downloads", "_downloads/clicks"]  # no partial download
