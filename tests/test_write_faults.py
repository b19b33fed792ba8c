"""Write faults in a report's --out folder and at a search's row write (issue 39): a full disk, a read-only
filesystem or a folder without write permission is one `modsar: error:` line and a non-zero exit, and leaves
no staging folder, no half-written file and no folder the command created."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import ray
from test_hostile_data_report import _report_rows
from test_hostile_names_faults import files_under, one_error_line

from modsar.cli import main
from modsar.data.store import load_dataset
from modsar.errors import ModsarError
from modsar.report import files


def _fault(code: int):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(args[0]) if args else None)

    return fail


def _no_staging_left(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if p.name.startswith((files.STAGING_PREFIX, ".tmp-"))]


@pytest.mark.parametrize(
    ("where", "code", "said"),
    [
        ("mkdtemp", errno.ENOSPC, "no space left on the device"),
        ("mkdtemp", errno.EROFS, "the filesystem is read-only"),
        ("replace", errno.ENOSPC, "no space left on the device"),
        ("replace", errno.EACCES, "permission denied"),
    ],
)
def test_a_write_fault_in_a_new_report_folder_is_one_line_and_leaves_no_folder(
    tmp_path, capsys, monkeypatch, where, code, said
):
    """Simulated (root ignores a read-only chmod): the staging folder cannot be made, or a file cannot be
    moved out of it. The --out folder, and the folder above it, which the report created, are gone again."""
    root, out = str(tmp_path / "results"), tmp_path / "new" / "report"
    _report_rows(root)
    if where == "mkdtemp":
        monkeypatch.setattr(files.tempfile, "mkdtemp", _fault(code))
    else:
        monkeypatch.setattr(files.os, "replace", _fault(code))
    assert main(["report", "--results", root, "--out", str(out)]) == 2
    err = one_error_line(capsys)
    assert f"cannot write {out}: {said}" in err, err
    assert not (tmp_path / "new").exists()


def test_a_write_fault_over_an_earlier_report_keeps_it_whole(tmp_path, capsys, monkeypatch):
    """The earlier report's files stay as they were; the outputs list names them still (and the files the
    failed report would have written), so the next report replaces them all."""
    root, out = str(tmp_path / "results"), tmp_path / "report"
    _report_rows(root)
    assert main(["report", "--results", root, "--out", str(out)]) == 0
    capsys.readouterr()

    def contents() -> dict[str, bytes]:
        return {name: (out / name).read_bytes() for name in files_under(out) if (out / name).is_file()}

    before = contents()
    monkeypatch.setattr(files.os, "replace", _fault(errno.ENOSPC))
    assert main(["report", "--results", root, "--format", "csv", "--out", str(out)]) == 2
    assert "no space left on the device" in one_error_line(capsys)
    after = contents()
    listed = set(json.loads(after.pop(files.OUTPUTS_LIST)))
    assert listed >= set(json.loads(before.pop(files.OUTPUTS_LIST))) | {"report.csv"}
    assert after == before and _no_staging_left(out)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0555 folder: simulated by the tests above")
def test_a_read_only_parent_of_out_is_one_line(tmp_path, capsys, monkeypatch):
    """A real permission fault: the folder above --out is 0555. The up-front check of --out is passed (as if
    the folder turned read-only after it), so the report's own writes meet the kernel's EACCES."""
    root, parent = str(tmp_path / "results"), tmp_path / "locked"
    _report_rows(root)
    parent.mkdir()
    parent.chmod(0o555)
    try:
        assert main(["report", "--results", root, "--out", str(parent / "report")]) == 2
        assert "cannot write to the folder" in one_error_line(capsys)  # the up-front check
        monkeypatch.setattr(os, "access", lambda *args, **kwargs: True)
        assert main(["report", "--results", root, "--out", str(parent / "report")]) == 2
        assert f"cannot write {parent / 'report'}: permission denied" in one_error_line(capsys)
        assert list(parent.iterdir()) == []
    finally:
        parent.chmod(0o755)


ONE_TRIAL = (
    "description: one trial\nbase: {model.hidden_size: 8}\nparams:\n  task: {grid: [ar]}\n"
    "  train.lr: {grid: [0.01]}\nbudget: {search: grid, num_samples: 1, max_epochs: 1, eval_every: 1}\n"
)


def test_a_full_disk_at_a_search_row_write_is_one_line_and_leaves_no_partial_row(
    tmp_path, capsys, monkeypatch
):
    """The row of a trial is written by the driver (sweep.rows.ResultRows) the moment the trial ends: a full
    disk there ends the search in one line, with no half-written row file. The line ends with the command
    that resumes the search (the same command again is refused: the experiment exists), and search.json
    records it interrupted, as Ctrl-C does."""
    space = tmp_path / "one.yaml"
    space.write_text(ONE_TRIAL)
    results = tmp_path / "results"
    load_dataset("synthetic")  # the data are there before the disk fills
    monkeypatch.setattr(pq, "write_table", _fault(errno.ENOSPC))  # in the driver: it writes the rows
    args = ["search", "--space", str(space), "--dataset", "synthetic", "--results", str(results)]
    try:
        assert main([*args, "--experiment", "full", "--no-estimate", "--quiet"]) == 2
    finally:
        ray.shutdown()  # the search keeps the local cluster it started for this process's next search
    err = one_error_line(capsys)
    assert "no space left on the device" in err and "nothing was left half-written" in err, err
    assert "run the command again" not in err, err
    assert err.rstrip().endswith("--resume`") and "then resume the search with `modsar search --space" in err
    assert "--experiment full" in err, err
    assert json.loads((results / "full" / "search.json").read_text())["status"] == "interrupted"
    left = files_under(results)
    assert not [f for f in left if f.endswith(".parquet") or ".tmp-" in f], left


def _fake_plan(results: Path):
    """A plan of 3 random samples of each of 2 directions (6 trials), planned without data."""
    from test_hostile_search import _plan_of

    return _plan_of(results, "e")


@pytest.mark.parametrize("state_fault", [False, True])
def test_a_row_write_fault_stops_the_search_resumable(tmp_path, monkeypatch, state_fault):
    """A row the disk refused (after a fit, or at a seed re-run: sweep.rows.RowWriteFault) ends in one line
    that ends with the resume command, search.json recorded interrupted; where recording that fails too (the
    same full disk), the line says so and still names the command: the second fault never masks the first."""
    from modsar.sweep import interrupt
    from modsar.sweep.rows import RowWriteFault

    plan = _fake_plan(tmp_path / "results")
    search_json = tmp_path / "results" / "e" / "search.json"
    search_json.parent.mkdir(parents=True)
    search_json.write_text(json.dumps({"status": "running", "trials_planned": 6}))
    if state_fault:
        monkeypatch.setattr(interrupt, "record_state", _fault(errno.ENOSPC))
    fault = ModsarError(
        "cannot write /r/e/trials/x.parquet: no space left on the device (the disk is full); nothing was "
        "left half-written. Free some space, or write to a folder you can write to, and run the command again"
    )
    with pytest.raises(ModsarError) as raised, interrupt.stops_on_ctrl_c(plan, str(search_json)):
        raise RowWriteFault(fault)
    line = str(raised.value)
    assert line.startswith("cannot write /r/e/trials/x.parquet: no space left on the device"), line
    assert line.endswith(f"resume the search with `{interrupt.resume_command(plan.request)}`"), line
    assert "run the command again" not in line and "\n" not in line
    stored = json.loads(search_json.read_text())
    if state_fault:
        assert "its state was not recorded (OSError)" in line and stored["status"] == "running"
    else:
        assert stored == {"status": "interrupted", "trials_planned": 6, "trials_ended": 0}


# --- faults met outside atomic_write, and the writers' lock ----------------------------------------------


def test_a_denied_permission_that_reaches_the_cli_is_never_called_a_write(capsys, monkeypatch):
    """A read meets EACCES as well as a write: the CLI's last net says `cannot access`, and `cannot write`
    only for the faults that only a write meets (a full disk, a read-only filesystem)."""
    from modsar.cli import data_list

    for code, said in (
        (errno.EACCES, "cannot access /some/rows.parquet: permission denied"),
        (errno.EPERM, "cannot access /some/rows.parquet: the operation is not permitted"),
        (errno.EROFS, "cannot write /some/rows.parquet: the filesystem is read-only"),
    ):
        monkeypatch.setattr(data_list, "run", _raiser(code, "/some/rows.parquet"))
        assert main(["data", "list"]) == 2
        err = one_error_line(capsys)
        assert said in err, err


def _raiser(code: int, path: str):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code), path)

    return fail


def test_a_lock_file_this_user_cannot_read_is_a_read_fault_not_a_write_fault(tmp_path, monkeypatch):
    """Another user's lock file, 0600: neither opened for writing nor for reading."""
    from modsar import outputs

    lock = tmp_path / f"{outputs.LOCK_PREFIX}shared"
    lock.write_text("")
    real_open = os.open

    def denied(path, flags, *args, **kwargs):
        if str(path) == str(lock):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    with (
        pytest.raises(ModsarError) as refused,
        outputs.writer_lock(tmp_path, "shared", "experiment 'shared'"),
    ):
        pytest.fail("locked")
    message = str(refused.value)
    assert message.startswith(f"cannot read the lock file {lock}: Permission denied"), message
    assert "cannot write" not in message


def test_a_writer_starting_while_another_releases_is_not_refused(tmp_path):
    """A releasing holder holds the lock exclusive for a moment (flock's upgrade, to learn whether it is the
    last holder): a writer arriving then waits that moment out instead of being refused; one held for longer
    than the grace period is refused."""
    import fcntl
    import threading

    from modsar import outputs

    lock = tmp_path / f"{outputs.LOCK_PREFIX}e"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    releaser = threading.Timer(0.1, os.close, (fd,))  # the releasing holder's moment
    releaser.start()
    try:
        with outputs.writer_lock(tmp_path, "e", "experiment 'e'", shared=True):
            pass
    finally:
        releaser.join()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a writer that keeps it
    try:
        started = time.monotonic()
        with (
            pytest.raises(ModsarError, match="being written by another modsar process"),
            outputs.writer_lock(tmp_path, "e", "experiment 'e'", shared=True),
        ):
            pytest.fail("locked")
        assert outputs.RELEASE_GRACE_S <= time.monotonic() - started < 10
    finally:
        os.close(fd)
