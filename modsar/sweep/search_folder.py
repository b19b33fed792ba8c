"""A search's folder: where it is (a path or a URI), Tune's state folders in it, search.json read and written
whole (temp name, then rename), and the resume states a finished trial no longer needs."""

from __future__ import annotations

import json
import os

import pyarrow.fs as pafs

from modsar.outputs import (
    atomic_write,
    is_uri,
    to_json,
)
from modsar.records.rows import filesystem
from modsar.sweep.plan import Plan

RAY_DIR = "ray"  # Tune's folders are <experiment>/ray-<task> (and ray-seeds)


def experiment_folder(plan: Plan) -> str:
    """The experiment folder: storage_path of every Tuner of this search."""
    root = plan.root
    return root if is_uri(root) else os.path.abspath(os.path.expanduser(root))


def drop_resume_state(grid) -> None:
    """Trials that ended need only their weights: delete their resume state (Adam moments are 2x the weights).

    Not before the Tuner returns: a trial that ended after Tune's last experiment-state save is resumed
    again after a kill and needs it. Errored trials keep it; --resume retries them from their checkpoint."""
    for result in grid:
        if result.error is None and result.path:
            _drop_resume_files(result.filesystem, result.path)


def drop_resume_files(folder: str) -> None:
    """Delete every resume state under `folder` (a path or URI): a Tuner's whose trials will not go on."""
    _drop_resume_files(*filesystem(folder))


def _drop_resume_files(fs: pafs.FileSystem, path: str) -> None:
    from modsar.training.state import RESUME_FILE

    for info in fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True)):
        if info.base_name == RESUME_FILE:
            fs.delete_file(info.path)


def fs_exists(path: str) -> bool:
    """Whether anything is at `path` (a local path or a URI)."""
    fs, p = filesystem(path)
    return fs.get_file_info(p).type != pafs.FileType.NotFound


def read_json(path: str) -> dict:
    """A search.json (or any JSON file at a path or URI), whole."""
    fs, p = filesystem(path)
    with fs.open_input_stream(p) as stream:
        return json.loads(stream.read().decode())


def write_json(path: str, data: dict) -> None:
    """Write `data` as JSON to `path` under a temporary name, then rename: never half-written."""
    fs, p = filesystem(path)
    with atomic_write(p, fs) as tmp, fs.open_output_stream(tmp) as out:
        out.write(to_json(data, default=str).encode())
