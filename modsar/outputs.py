"""Outputs: atomic files (a reader never sees a half-written row, table or figure: `atomic_write` writes a
temporary name and renames it) and strict JSON."""

from __future__ import annotations

import contextlib
import json
import math
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modsar.errors import ModsarError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow.fs as pafs

PARTIAL_PREFIX = ".tmp-"  # a write in progress, or one a killed process left: listings skip hidden names


@contextlib.contextmanager
def atomic_write(path: str | Path, fs: pafs.FileSystem | None = None) -> Iterator[str]:
    """The name to write `path` under: a hidden temporary name beside it (".tmp-<random>-<name>", so the
    extension, which savefig reads, is kept), renamed onto `path` when the block ends and deleted when it
    raises. Every file ModSAR writes goes through here, except a prepared dataset's, which are written into a
    hidden staging folder renamed whole (data/store.py). `fs` is a pyarrow filesystem for an object store
    (its path without the scheme); local paths need none."""
    if fs is None:
        import pyarrow.fs as pafs

        fs, path = pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(str(path)))
    folder, _, name = str(path).rpartition("/")
    fs.create_dir(folder, recursive=True)
    tmp = f"{folder}/{PARTIAL_PREFIX}{uuid.uuid4().hex[:12]}-{name}"
    try:
        yield tmp
        fs.move(tmp, str(path))
    except BaseException:
        with contextlib.suppress(OSError):
            fs.delete_file(tmp)
        raise


def write_text(path: str | Path, text: str) -> Path:
    with atomic_write(path) as tmp:
        Path(tmp).write_text(text)
    return Path(path)


def pyplot():
    """matplotlib.pyplot on the headless Agg backend (clusters and CI have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ensure_writable_dir(path: str | Path, flag: str, *, write: bool = True) -> None:
    """Refuse, in one line naming `flag`, a folder path that cannot be one: it is, or lies under, an existing
    file; with `write`, also a local folder (the path or its nearest existing parent) that this user cannot
    write. Commands call it before any work, so that no result is computed and then lost. URIs (s3://...) are
    left to their filesystem."""
    if "://" in str(path):
        return
    given = Path(path).expanduser()
    folder = given.absolute()
    while not folder.exists() and folder != folder.parent:
        if folder.is_symlink():  # a dangling link: mkdir would fail on it
            raise ModsarError(
                f"{flag} {path}: {folder} is a broken link; name a folder (it is created if missing)"
            )
        folder = folder.parent
    if not folder.is_dir():
        where = "is a file" if folder == given.absolute() else f"lies under the file {folder}"
        raise ModsarError(f"{flag} {path} {where}, not a folder; name a folder (it is created if missing)")
    if write and not os.access(folder, os.W_OK | os.X_OK):
        raise ModsarError(
            f"{flag} {path}: cannot write to the folder {folder} (permissions or a read-only "
            "filesystem); name a folder you can write to"
        )


def save_figure(fig, path: Path) -> Path:
    plt = pyplot()
    try:
        with atomic_write(path) as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)
    return path


def write_parquet(frame: pd.DataFrame, path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_write(path) as tmp:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)
    return path


def finite(value: Any) -> Any:
    """`value` with every NaN or infinite float (numpy scalars included) as None and numpy scalars and arrays
    as Python values, inside dicts, lists and tuples: strict JSON readers (jq, JavaScript, Go) refuse NaN and
    Infinity, and a measure undefined on short data or a missing metric is NaN."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar or array
        return finite(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(value: Any, *, indent: int | None = 2, default: Any = None) -> str:
    """The one way ModSAR writes JSON (--json output, every .json file): strict, non-finite numbers null."""
    return json.dumps(finite(value), indent=indent, default=default, allow_nan=False)
