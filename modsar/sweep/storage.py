"""The filesystem Tune writes a local search through: every file appears whole or not at all.

Tune stages its experiment state (experiment_state-*.json, the searcher's and the callbacks' pickles) in the
driver's Ray session folder and copies it into the search folder with pyarrow, which truncates each file and
then writes it. A driver killed inside that copy (SIGKILL, the OOM killer, a lost node) leaves a truncated
file that `--resume` cannot read, and the search could only be started afresh. Through this filesystem each
file Tune writes goes to a hidden temporary name beside it and is renamed onto its name when complete, as
ModSAR's own outputs are (outputs.atomic_write); a kill leaves the previous whole file, and a hidden
temporary one `--resume` removes.

One file Tune rewrites in place even in its staging folder: experiment_state-*.json, which a copy still
running from the previous save can read half rewritten. A copy of it that does not parse is dropped, and the
previous whole one kept (the next save copies it again)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from modsar.outputs import PARTIAL_PREFIX

REWRITTEN_IN_PLACE = "experiment_state-"  # Tune's one state file not written atomically in its staging folder


class _RenamedOnClose:
    """A binary file written under a temporary name and renamed onto `path` when closed."""

    def __init__(self, path: str) -> None:
        folder, _, name = path.rpartition("/")
        self.path = path
        self.must_parse = name.startswith(REWRITTEN_IN_PLACE) and name.endswith(".json")
        self.tmp = f"{folder}/{PARTIAL_PREFIX}{uuid.uuid4().hex[:12]}-{name}"
        self.file = open(self.tmp, "wb")  # noqa: SIM115 (closed in close())
        self.closed = False

    def write(self, data) -> int:
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def tell(self) -> int:
        return self.file.tell()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.file.close()
            if self.must_parse and not _parses(self.tmp):
                os.unlink(self.tmp)
                return
            os.replace(self.tmp, self.path)


def _parses(path: str) -> bool:
    try:
        with open(path, "rb") as file:
            json.load(file)
    except ValueError:
        return False
    return True


class AtomicLocalHandler(pafs.FileSystemHandler):
    """The local filesystem, except that output streams are renamed into place when closed."""

    def __init__(self) -> None:
        self.local = pafs.LocalFileSystem()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AtomicLocalHandler)

    def __hash__(self) -> int:
        return hash(AtomicLocalHandler)

    def __reduce__(self):  # pickled into every trial's actor with Tune's storage context
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
        with self.local.open_input_stream(src) as source, self.open_output_stream(dest, None) as target:
            while chunk := source.read(1 << 20):
                target.write(chunk)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.local.open_input_stream(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.local.open_input_file(path)

    def open_output_stream(self, path: str, metadata) -> pa.NativeFile:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return pa.PythonFile(_RenamedOnClose(path), mode="w")

    def open_append_stream(self, path: str, metadata) -> pa.NativeFile:
        return self.local.open_append_stream(path, metadata)


def search_filesystem(storage: str) -> pafs.FileSystem | None:
    """The storage_filesystem for a search whose folder is `storage`: None (Tune's own) for a URI, where the
    object store makes each upload whole."""
    return None if "://" in storage else pafs.PyFileSystem(AtomicLocalHandler())


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
