"""Tune's state, saved whole and from one moment, so that a search killed at any moment can be resumed.

Tune saves a search's state as several files (experiment_state-*.json with the trials, the searcher's and the
callbacks' pickles) in the driver's Ray session folder, then copies them into the search folder one by one,
in a background thread, truncating each before writing it. A driver killed during that copy (SIGKILL, the OOM
killer) left either a truncated file, which `--resume` refused, or files from two saves. Two saves disagree
in ways Tune's restore does not check: a finished trial the restored searcher still counts as running (with
`--max-concurrent 1` the resumed search then waits forever for a free slot), or a trial the searcher created
that the trial list lacks (never run).

So right after each of Tune's saves, while the driver's state cannot change, ModSAR writes the files that save
wrote as one snapshot beside them, under a temporary name renamed when whole; `--resume` puts the snapshot's
files back before Tune restores. A search started by a ModSAR without snapshots resumes from Tune's files. A
Tuner killed before Tune's first save (nothing ran) is started afresh. Not covered: a power loss (nothing is
fsync'ed), and one controller step in which Tune deletes the checkpoint the last save names before it saves
again (CheckpointConfig.num_to_keep)."""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs

from modsar.errors import ModsarError
from modsar.outputs import PARTIAL_PREFIX, atomic_write, is_uri
from modsar.records.rows import filesystem

# in each Tuner's folder (ray-ae, ray-ar, ray-seeds); not .pkl or .json, the files Tune's restore copies into
# its staging folder and its later copies would bring back over a newer snapshot
SNAPSHOT = "modsar-tune-state.snapshot"
KEPT = {"tuner.pkl", SNAPSHOT}  # files in a Tuner's folder that are not Tune's per-save state


def save_snapshot(controller) -> None:
    """Write the files Tune's controller has just saved in its staging folder as one file in the search
    folder: this driver session's files (a resumed search's staging folder also holds earlier sessions'
    state, which the restore copied there)."""
    storage = controller._storage
    staging = Path(storage.experiment_driver_staging_path)
    files = {
        path.name: path.read_bytes()
        for path in sorted(staging.iterdir())
        if path.is_file() and not path.name.startswith(".") and controller._session_str in path.name
    }
    fs, target = storage.storage_filesystem, f"{storage.experiment_fs_path}/{SNAPSHOT}"
    with atomic_write(target, fs) as tmp, fs.open_output_stream(tmp) as out:
        out.write(pickle.dumps(files))


def _clear_staging(storage) -> None:
    """Delete the state files in Tune's staging folder before its restore copies the search's into it: on a
    cluster that outlives a driver the folder is reused, and a killed session's files left there would be
    restored in place of the snapshot's (Tune takes the newest name)."""
    staging = Path(storage.experiment_driver_staging_path)
    if staging.is_dir():
        for path in staging.iterdir():
            if path.is_file() and not path.name.startswith("."):
                path.unlink()


@contextlib.contextmanager
def snapshots_of_tune_state() -> Iterator[None]:
    """While the block runs, every TuneController.save_to_dir (the one place Tune saves a search's state) is
    followed by save_snapshot, and Tune's restore starts from an empty staging folder."""
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager
    from ray.tune.execution.tune_controller import TuneController

    save_to_dir = TuneController.save_to_dir
    sync_down = _ExperimentCheckpointManager.sync_down_experiment_state

    def save_and_snapshot(controller: TuneController) -> None:
        save_to_dir(controller)
        save_snapshot(controller)

    def clear_and_sync_down(manager: _ExperimentCheckpointManager) -> None:
        _clear_staging(manager._storage)
        sync_down(manager)

    TuneController.save_to_dir = save_and_snapshot  # type: ignore[method-assign]
    _ExperimentCheckpointManager.sync_down_experiment_state = clear_and_sync_down  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        TuneController.save_to_dir = save_to_dir  # type: ignore[method-assign]
        _ExperimentCheckpointManager.sync_down_experiment_state = sync_down  # type: ignore[method-assign]


def never_saved(ray_path: str) -> bool:
    """Whether a Tuner's folder holds no saved state at all: its driver was killed after writing tuner.pkl and
    before Tune's first save, when no trial can have ended (Tune saves at its first step). Such a Tuner is
    started afresh, not restored."""
    fs, path = filesystem(ray_path)
    names = [info.base_name for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))]
    return not any(name == SNAPSHOT or name.startswith("experiment_state-") for name in names)


def _newest_state(names) -> str:
    """The newest session's experiment_state file name among `names` (Tune's session names sort by time)."""
    return max((name for name in names if name.startswith("experiment_state-")), default="")


def restore_snapshot(ray_path: str) -> bool:
    """Replace Tune's state files in a Tuner's folder by its snapshot's; False where it has none. Only while
    nothing writes there: `--resume` calls it before it restores the Tuner."""
    fs, path = filesystem(ray_path)
    snapshot = f"{path}/{SNAPSHOT}"
    if fs.get_file_info(snapshot).type != pafs.FileType.File:
        return False
    try:
        with fs.open_input_stream(snapshot) as stream:
            files = pickle.loads(stream.read())
    except Exception as error:
        raise ModsarError(
            f"--resume cannot read the saved search state {ray_path}/{SNAPSHOT}: {type(error).__name__}: "
            f"{error}; nothing was run. Start the search afresh with --overwrite"
        ) from None
    listing = fs.get_file_info(pafs.FileSelector(path))
    if _newest_state(info.base_name for info in listing) > _newest_state(files):
        return False  # a later session saved without a snapshot (its write failed; an older ModSAR resumed)
    for info in listing:
        name = info.base_name
        if info.type == pafs.FileType.File and not name.startswith(".") and name not in KEPT:
            fs.delete_file(info.path)  # every session's state files: the snapshot's are the newest whole ones
    for name, data in files.items():
        with atomic_write(f"{path}/{name}", fs) as tmp, fs.open_output_stream(tmp) as out:
            out.write(data)
    return True


def remove_partial_files(ray_path: str) -> int:
    """Delete the temporary files of writes a killed search never finished, under one Tuner's folder; returns
    how many. Only while nothing writes there: `--resume` calls it before it restores the Tuner."""
    if is_uri(ray_path):
        return 0
    partial = [
        Path(folder, name)
        for folder, _, names in os.walk(ray_path)
        for name in names
        if name.startswith(PARTIAL_PREFIX)
    ]
    for path in partial:
        path.unlink(missing_ok=True)
    return len(partial)
