"""The report's figures (PNG): AE vs AR bars per dataset, the learning curves of each experiment's search, and
the AR-over-AE improvement per design choice."""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from modsar.errors import ModsarError
from modsar.outputs import check_name, pyplot, save_figure
from modsar.report.cells import Cells, cell_at, improvement, short
from modsar.task import Task

TASK_COLOURS = {Task.AE: "tab:blue", Task.AR: "tab:orange"}  # the same in bars and curves


def plot_all(
    rows: pd.DataFrame, cells: Cells, datasets: list[str], spaces: list[str], metric: str, out: Path
) -> list[Path]:
    """Every figure of one report into `out`; the paths written."""
    written = [_bars(cells, dataset, spaces, metric, out) for dataset in datasets]
    for experiment, group in rows[rows["role"] == "search"].groupby("experiment"):
        if "curve" in group:
            written.append(_curves(str(experiment), group, out))
    written.append(_improvement(cells, datasets, spaces, metric, out))
    return written


def _bars(cells: Cells, dataset: str, spaces: list[str], metric: str, out: Path) -> Path:
    """AE vs AR bars per design choice on one dataset, with the seeds' std as error bars."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4, 1.4 * len(spaces)), 3.2))
    x = np.arange(len(spaces))
    for offset, task in ((-0.2, Task.AE), (0.2, Task.AR)):
        vals = [cell_at(cells, metric, (dataset, s, task)) for s in spaces]
        ax.bar(
            x + offset,
            [v.mean if v.mean is not None else math.nan for v in vals],
            0.4,
            label=task.label,
            yerr=[v.std or 0 for v in vals],
            color=TASK_COLOURS[task],
        )
    ax.set_xticks(x, spaces, rotation=20, ha="right")
    ax.set_ylabel(f"test {short(metric)}")
    ax.set_title(f"{dataset}: AE vs AR")
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, out / f"bars_{file_part(dataset)}_{file_part(metric.replace('@', ''))}.png")


def _curves(experiment: str, group: pd.DataFrame, out: Path) -> Path:
    """The validation curve of every search trial of one experiment; a trial ASHA stopped is dotted."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for _, r in group.iterrows():
        curve = json.loads(r["curve"]) if isinstance(r["curve"], str) else []
        if curve:
            xs, ys = zip(*curve, strict=True)
            style = "-" if r["status"] == "finished" else ":"
            ax.plot(xs, ys, style, color=TASK_COLOURS[Task(r["task"])], alpha=0.7)
    ax.set_xlabel("epoch")
    ax.set_ylabel(curve_label(group))
    ax.set_title(f"{experiment} (blue AE, orange AR; dotted: stopped by ASHA)", fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out / f"curves_{file_part(experiment)}.png")


def file_part(name: str) -> str:
    """`name` (a dataset, experiment or metric) as part of a plot's file name: itself where it is a name
    (check_name; read_rows hands over no other), else its letters, digits and `-_` with a hash of the whole,
    so that no value in a row ever names a path outside --out, nor two values one file."""
    try:
        return check_name(name, "name")
    except ModsarError:
        digest = hashlib.sha256(str(name).encode("utf-8", "surrogatepass")).hexdigest()[:12]
        slug = re.sub(r"[^A-Za-z0-9_-]+", "-", str(name)).strip("-_")[:60]
        return f"{slug}-{digest}" if slug else digest


METRIC_NAMES = {"ndcg": "NDCG", "recall": "Recall", "hr": "HR", "mrr": "MRR"}


def curve_label(group: pd.DataFrame) -> str:
    """The curves' y-axis: the validation metric each trial monitored (its curve's values), named as the
    papers do ("validation NDCG@10"); trials that monitored different metrics are all named."""
    monitors = (
        sorted(group["train.monitor"].dropna().astype(str).unique()) if "train.monitor" in group else []
    )
    if not monitors:
        return "validation metric (not recorded)"
    names = []
    for monitor in monitors:
        name, _, k = monitor.partition("@")
        names.append(f"{METRIC_NAMES.get(name, name)}@{k}" if k else METRIC_NAMES.get(name, name))
    return "validation " + " / ".join(names)


def _improvement(cells: Cells, datasets: list[str], spaces: list[str], metric: str, out: Path) -> Path:
    """AR over AE (%) per design choice, a bar per dataset."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4, 1.4 * len(spaces)), 3.2))
    width = 0.8 / max(1, len(datasets))
    for i, dataset in enumerate(datasets):
        gains = [
            improvement(
                cell_at(cells, metric, (dataset, s, "ae")).mean,
                cell_at(cells, metric, (dataset, s, "ar")).mean,
            )
            for s in spaces
        ]
        ax.bar(
            np.arange(len(spaces)) + i * width,
            [100 * g if g is not None else math.nan for g in gains],
            width,
            label=dataset,
        )
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(spaces)) + width * (len(datasets) - 1) / 2, spaces, rotation=20, ha="right")
    ax.set_ylabel(f"AR over AE, test {short(metric)} (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out / f"improvement_{file_part(metric.replace('@', ''))}.png")
