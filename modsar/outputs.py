"""Outputs: atomic files (a reader never sees a half-written table or figure: write a temp name, then rename)
and strict JSON."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modsar.errors import ModsarError

if TYPE_CHECKING:
    import pandas as pd


def pyplot():
    """matplotlib.pyplot on the headless Agg backend (clusters and CI have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ensure_writable_dir(path: str | Path, flag: str, *, write: bool = True) -> None:
    """Refuse, in one line naming `flag`, a folder path that cannot be one: it is, or lies under, an existing
    file; with `write`, also a local folder (the path or its nearest existing parent) that this user cannot write.
    Commands call it before any work, so that no result is computed and then lost. URIs (s3://...) are left
    to their filesystem."""
    if "://" in str(path):
        return
    given = Path(path).expanduser()
    folder = given.absolute()
    while not folder.exists() and folder != folder.parent:
        if folder.is_symlink():  # a dangling link: mkdir would fail on it
            raise ModsarError(f"{flag} {path}: {folder} is a broken link; name a folder (it is created if missing)")
        folder = folder.parent
    if not folder.is_dir():
        where = "is a file" if folder == given.absolute() else f"lies under the file {folder}"
        raise ModsarError(f"{flag} {path} {where}, not a folder; name a folder (it is created if missing)")
    if write and not os.access(folder, os.W_OK | os.X_OK):
        raise ModsarError(f"{flag} {path}: cannot write to the folder {folder} (permissions or a read-only "
                          "filesystem); name a folder you can write to")


def save_figure(fig, path: Path) -> Path:
    plt = pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return path


def write_parquet(frame: pd.DataFrame, path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)
    tmp.replace(path)
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
