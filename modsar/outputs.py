"""Atomic file outputs: a reader never sees a half-written table or figure (write a temp name, then rename)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def pyplot():
    """matplotlib.pyplot on the headless Agg backend (clusters and CI have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
