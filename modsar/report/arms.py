"""What a report compares within a (dataset, space): its arms, the tasks AE and AR, or models.

A space whose rows run several backbones (residual_models) compares models, each named as in the
residual-dominance paper; a space with `arms` (bluesky) adds the values that tell its arms apart. This is the
only module of the report that reads those names off the backbone registry.
"""

from __future__ import annotations

import json

import pandas as pd

from modsar.config import ModelConfig
from modsar.model.registry import paper_name, paper_names

TASKS = ("ae", "ar")
KEY = ["dataset", "space", "arm"]  # the columns that pick one cell's rows


def shown(arm: str) -> str:
    """An arm as a table shows it: the tasks in capitals (AE, AR), a model or a space's arm as it is."""
    return arm.upper() if arm in TASKS else arm


def with_arms(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with their `arm`: the task, or (in a (dataset, space) whose rows have several backbones, a
    comparison of models such as residual_models) the model's paper name, reported one row per model instead
    of AE/AR pairs; a space with `arms` (bluesky) adds their values: "AR positional=target_aligned,
    user_fusion=token"."""
    if not len(rows):
        return rows.assign(arm=pd.Series(dtype=str))
    default = ModelConfig().backbone  # rows from before the backbone was a setting
    backbone = rows.get("model.backbone", pd.Series(default, index=rows.index)).fillna(default)
    several = backbone.groupby([rows["dataset"], rows["space"]]).transform("nunique") > 1
    names = [
        paper_name(b, t) if many else t for b, t, many in zip(backbone, rows["task"], several, strict=True)
    ]
    arms = rows.get("space_arms", pd.Series(None, index=rows.index))
    for i, (name, keys) in enumerate(zip(names, arms, strict=True)):
        if isinstance(keys, str) and (keys := json.loads(keys)):
            row = rows.iloc[i]
            values = ", ".join(f"{key.split('.')[-1]}={row[key]}" for key in keys)
            names[i] = f"{shown(name)} {values}"
    return rows.assign(arm=names)


def in_paper_order(models: set[str]) -> list[str]:
    """Models in the residual-dominance paper's column order; names the paper lacks follow, alphabetically."""
    order = [n.name for n in paper_names()]
    return sorted(models, key=lambda m: (order.index(m) if m in order else len(order), m))
