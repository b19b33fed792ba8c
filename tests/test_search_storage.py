"""Tune's state as one save wrote it: the snapshot ModSAR writes after each of Tune's saves, and what --resume
puts back from it over files a killed copy left truncated or from another save."""

from __future__ import annotations

import inspect
import pickle
from types import SimpleNamespace

import pyarrow.fs as pafs
import pytest

from modsar.errors import ModsarError
from modsar.sweep.storage import (
    SNAPSHOT,
    never_saved,
    restore_snapshot,
    save_snapshot,
    snapshots_of_tune_state,
)

SAVED = {  # what one of Tune's saves wrote in its staging folder, in driver session S2
    "experiment_state-S2.json": b'{"trial_data": ["00000 TERMINATED", "00001 PENDING"]}',
    "basic-variant-state-S2.json": b"searcher: 00000 done, 00001 live",
    "callback-states-S2.pkl": b"rungs: 00000 recorded",
}


def _controller(staging, folder) -> SimpleNamespace:
    """The parts of Tune's TuneController that save_snapshot reads."""
    storage = SimpleNamespace(
        experiment_driver_staging_path=str(staging),
        storage_filesystem=pafs.LocalFileSystem(),
        experiment_fs_path=str(folder),
    )
    return SimpleNamespace(_storage=storage, _session_str="S2")


def _saved(tmp_path):
    staging, folder = tmp_path / "staging", tmp_path / "results" / "ray-ar"
    staging.mkdir()
    (folder / "trainable_00000").mkdir(parents=True)
    for name, data in SAVED.items():
        (staging / name).write_bytes(data)
    (staging / "experiment_state-S1.json").write_bytes(b"an earlier session's, copied in by its restore")
    (staging / "tuner.pkl").write_bytes(b"the tuner")
    (staging / ".abc-tmp-callback-states-S2.pkl").write_bytes(b"Tune's own temporary")
    save_snapshot(_controller(staging, folder))
    return folder


def test_a_resume_puts_back_the_files_of_one_save_over_what_a_kill_left(tmp_path):
    """Killed mid-copy, the search folder held a truncated state file and a searcher from the save before
    (a finished trial still counted as running, which left a resumed `--max-concurrent 1` search waiting
    forever): the restore replaces every session's state files by the snapshot's, and keeps the rest."""
    folder = _saved(tmp_path)
    (folder / "experiment_state-S2.json").write_bytes(b"")  # truncated by the kill
    (folder / "basic-variant-state-S2.json").write_bytes(b"searcher: 00000 live")  # the save before
    (folder / "experiment_state-S1.json").write_bytes(b"an earlier session's")
    (folder / "tuner.pkl").write_bytes(b"the tuner")
    (folder / ".validate_storage_marker").write_bytes(b"")
    assert restore_snapshot(str(folder))
    root = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert {
        k: v for k, v in root.items() if k not in {SNAPSHOT, "tuner.pkl", ".validate_storage_marker"}
    } == SAVED
    assert root["tuner.pkl"] == b"the tuner" and (folder / "trainable_00000").is_dir()


def test_without_a_snapshot_tunes_files_are_left_as_they_are(tmp_path):
    """A search started by a ModSAR before snapshots resumes from Tune's own files."""
    (tmp_path / "experiment_state-S1.json").write_bytes(b"{}")
    assert not restore_snapshot(str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["experiment_state-S1.json"]


def test_an_unreadable_snapshot_is_refused_in_one_line(tmp_path):
    folder = _saved(tmp_path)
    (folder / SNAPSHOT).write_bytes(b"\x80\x05 not a whole pickle")
    (folder / "experiment_state-S2.json").write_bytes(b"{}")
    with pytest.raises(ModsarError, match=r"--resume cannot read the saved search state .*; nothing was run"):
        restore_snapshot(str(folder))
    assert (folder / "experiment_state-S2.json").read_bytes() == b"{}"  # nothing was changed


def test_the_snapshot_follows_each_of_tunes_saves_while_a_search_runs(tmp_path, monkeypatch):
    """The one place Tune saves a search's state is TuneController.save_to_dir, from the staging folder and
    session that save_snapshot reads: should a Tune release change that, this test fails."""
    from ray.tune.execution.tune_controller import TuneController

    source = inspect.getsource(TuneController.save_to_dir)
    assert "experiment_driver_staging_path" in source and "_search_alg.save_to_dir" in source
    assert "self._session_str" in inspect.getsource(TuneController)
    original = TuneController.save_to_dir
    staging, folder = tmp_path / "staging", tmp_path / "ray-ar"
    staging.mkdir(), folder.mkdir()

    def fake_save(controller) -> None:  # what Tune's save writes, for a controller without a real run
        for name, data in SAVED.items():
            (staging / name).write_bytes(data)

    monkeypatch.setattr(TuneController, "save_to_dir", fake_save)
    with snapshots_of_tune_state():
        TuneController.save_to_dir(_controller(staging, folder))
    assert TuneController.save_to_dir is fake_save and original is not fake_save  # afterwards as it was
    assert pickle.loads((folder / SNAPSHOT).read_bytes()) == SAVED


def test_tunes_restore_starts_from_an_empty_staging_folder(tmp_path, monkeypatch):
    """On a cluster that outlives a driver the staging folder is reused: a killed session's searcher left
    there would be restored in place of the snapshot's (Tune takes the newest name): the hang again."""
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "basic-variant-state-S3.json").write_bytes(b"a killed session's searcher")
    (staging / ".Tune-temporary").write_bytes(b"")
    (staging / "trainable_00000").mkdir()
    seen = []
    monkeypatch.setattr(
        _ExperimentCheckpointManager,
        "sync_down_experiment_state",
        lambda manager: seen.append(sorted(p.name for p in staging.iterdir())),
    )
    manager = SimpleNamespace(_storage=SimpleNamespace(experiment_driver_staging_path=str(staging)))
    with snapshots_of_tune_state():
        _ExperimentCheckpointManager.sync_down_experiment_state(manager)
    assert seen == [[".Tune-temporary", "trainable_00000"]]


def test_a_tuner_killed_before_its_first_save_is_started_afresh(tmp_path):
    (tmp_path / "tuner.pkl").write_bytes(b"the tuner")
    (tmp_path / ".validate_storage_marker").write_bytes(b"")
    assert never_saved(str(tmp_path))
    (tmp_path / "experiment_state-S1.json").write_bytes(b"{}")
    assert not never_saved(str(tmp_path))
    (tmp_path / "other").mkdir()
    assert not never_saved(str(_saved(tmp_path / "other")))  # a snapshot, Tune's files not copied yet


def test_a_snapshot_older_than_tunes_newest_save_is_not_restored(tmp_path):
    """A later session saved without one (its snapshot write failed, or a ModSAR before snapshots resumed the
    search): its files are newer than the snapshot's and are kept."""
    folder = _saved(tmp_path)
    (folder / "experiment_state-S3.json").write_bytes(b"{}")
    assert not restore_snapshot(str(folder))
    assert sorted(p.name for p in folder.glob("*state-*")) == ["experiment_state-S3.json"]


def test_a_resumed_search_registers_a_checkpoint_whose_oldest_tune_deleted_before_it_stopped(tmp_path):
    """Restored, Tune lists a checkpoint it deleted after its last save and deletes it again at the trial's
    next checkpoint (num_to_keep): that deletion raised FileNotFoundError and cut the registration short (the
    error logged with its traceback); while a restored search runs it does nothing, the registration ends,
    and a checkpoint still there is deleted as before."""
    from ray.train import Checkpoint, CheckpointConfig
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.session import _TrainingResult

    from modsar.sweep.restore import deleting_what_is_gone_is_done

    def result(index: int) -> _TrainingResult:
        folder = tmp_path / f"checkpoint_00000{index}"
        folder.mkdir()
        return _TrainingResult(checkpoint=Checkpoint(str(folder)), metrics={"step": index})

    def manager_after_a_resume() -> _CheckpointManager:
        manager = _CheckpointManager(CheckpointConfig(num_to_keep=2))
        for index in (3, 4):
            manager.register_checkpoint(result(index))
        (tmp_path / "checkpoint_000003").rmdir()  # deleted after Tune's last save, which still lists it
        return manager

    with pytest.raises(FileNotFoundError):  # Tune alone
        manager_after_a_resume().register_checkpoint(result(5))
    for name in ("checkpoint_000004", "checkpoint_000005"):
        (tmp_path / name).rmdir()
    manager = manager_after_a_resume()
    with deleting_what_is_gone_is_done():
        manager.register_checkpoint(result(5))
        kept = [r.checkpoint.path for r in manager.best_checkpoint_results]
        assert kept == [str(tmp_path / "checkpoint_000004"), str(tmp_path / "checkpoint_000005")]
        manager.register_checkpoint(result(6))  # one still there: deleted
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_000005", "checkpoint_000006"]
