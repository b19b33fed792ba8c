"""Tune's state reaches a local search folder whole, so a search killed at any moment can be resumed.

Tune stages its experiment state (experiment_state-*.json, the searcher's and the callbacks' pickles) in the
driver's Ray session folder and copies it into the search folder with pyarrow, which truncates each file and
then writes it; and it rewrites experiment_state-*.json in place in the staging folder, where a copy still
running from the previous save can read it half written. A driver killed inside a copy (SIGKILL, the OOM
killer) left a truncated file that `--resume` could not read, and the search could only be started afresh.
Two changes close both gaps:

- `search_filesystem`: the filesystem Tune writes a local search through. Each file goes to a hidden
  temporary name beside it and is renamed onto its name when complete, as ModSAR's own outputs are
  (outputs.atomic_write); a kill leaves the previous whole file, and a temporary one `--resume` removes.
- `whole_experiment_state`: while a search runs, Tune's controller writes its experiment state the same way in
  its staging folder, so every copy reads a whole file.

Not covered: a power loss or a crash of the operating system (nothing is fsync'ed), and a kill before Tune's
first state copy (then nothing ran that a resume could continue; `--resume` refuses it in one line)."""

from __future__ import annotations

import builtins
import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.fs as pafs

from modsar.outputs import PARTIAL_PREFIX


def _partial_name(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, f"{PARTIAL_PREFIX}{uuid.uuid4().hex[:12]}-{name}")


def _replace(tmp: str, path: str) -> None:
    """Rename `tmp` onto `path`, keeping the mode of the file it replaces (as writing in place would)."""
    with contextlib.suppress(FileNotFoundError):
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
    os.replace(tmp, path)


class _RenamedOnClose:
    """A binary file written under a temporary name and renamed onto `path` when closed. Closed while an
    exception propagates (pyarrow's `with` closes the stream whatever happened in the block), it is deleted
    instead: a write that failed keeps the previous file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tmp = _partial_name(path)
        self.file = open(self.tmp, "wb")  # noqa: SIM115 (closed in close())
        self.closed = False

    def write(self, data) -> int:
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def tell(self) -> int:
        return self.file.tell()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.file.close()
        if sys.exc_info()[0] is not None:
            os.unlink(self.tmp)
        else:
            _replace(self.tmp, self.path)


class AtomicLocalHandler(pafs.FileSystemHandler):
    """The local filesystem, except that output streams are renamed into place when closed."""

    def __init__(self) -> None:
        self.local = pafs.LocalFileSystem()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AtomicLocalHandler)

    def __hash__(self) -> int:
        return hash(AtomicLocalHandler)

    def __reduce__(self):
        # pickled by this name into tuner.pkl and every trial's storage context: renaming the module or the
        # class makes every search started before the rename impossible to resume (a test holds the name)
        return AtomicLocalHandler, ()

    def get_type_name(self) -> str:
        return "modsar-atomic-local"

    def equals(self, other) -> bool:
        return isinstance(other, AtomicLocalHandler)

    def normalize_path(self, path: str) -> str:
        return self.local.normalize_path(path)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self.local.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.local.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.local.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.local.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("ModSAR's search storage never deletes the contents of the filesystem's root")

    def delete_file(self, path: str) -> None:
        self.local.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.local.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        tmp = _partial_name(dest)
        try:
            self.local.copy_file(src, tmp)
            _replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.local.open_input_stream(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.local.open_input_file(path)

    def open_output_stream(self, path: str, metadata) -> pa.NativeFile:
        return pa.PythonFile(_RenamedOnClose(path), mode="w")

    def open_append_stream(self, path: str, metadata) -> pa.NativeFile:
        return self.local.open_append_stream(path, metadata)


def search_filesystem(storage: str) -> pafs.FileSystem | None:
    """The storage_filesystem for a search whose folder is `storage`: None (Tune's own) for a URI, where the
    object store makes each upload whole."""
    return None if "://" in storage else pafs.PyFileSystem(AtomicLocalHandler())


def is_local_search_filesystem(fs: pafs.FileSystem) -> bool:
    """Whether `fs` is `search_filesystem`'s: its paths are local paths, to be read in place."""
    return fs.type_name == f"py::{AtomicLocalHandler().get_type_name()}"


def remove_partial_files(ray_path: str) -> int:
    """Delete the temporary files of writes a killed search never finished, under one Tuner's folder; returns
    how many. Only while nothing writes there: `--resume` calls it before it restores the Tuner."""
    if "://" in ray_path:
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


class _WholeTextFile:
    """`open(path, "w")` as Tune's controller uses it (a `with` block): the file is written under a temporary
    name and renamed onto `path` when the block ends, or deleted when it raises."""

    def __init__(self, path: str, mode: str, *args: Any, **kwargs: Any) -> None:
        self.path = os.fspath(path)
        self.tmp = _partial_name(self.path)
        self.file: IO = builtins.open(self.tmp, mode, *args, **kwargs)  # noqa: SIM115 (closed in __exit__)

    def __getattr__(self, name: str) -> Any:  # write, and whatever else json.dump asks of a file
        return getattr(self.file, name)

    def __enter__(self) -> _WholeTextFile:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        self.file.close()
        if exc_type is None:
            _replace(self.tmp, self.path)
        else:
            os.unlink(self.tmp)


def _controller_open(file, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
    if "w" in mode:
        return _WholeTextFile(file, mode, *args, **kwargs)
    return builtins.open(file, mode, *args, **kwargs)


@contextlib.contextmanager
def whole_experiment_state() -> Iterator[None]:
    """While the block runs, Tune's controller writes experiment_state-*.json in its staging folder under a
    temporary name and renames it: its one `open` (TuneController.save_to_dir, which a test holds to that)
    resolves to this module's in the controller's module only."""
    from ray.tune.execution import tune_controller

    tune_controller.open = _controller_open  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del tune_controller.open  # type: ignore[attr-defined]
