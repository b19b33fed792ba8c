"""How rows were ranked and on what data: whether two experiments' numbers may share a table, and the line
that states a protocol other than the default (leave-one-out over users)."""

from __future__ import annotations

import datetime as dt

import pandas as pd

# Columns that must agree between experiments whose numbers share a table: how targets were ranked, and
# which data (file hashes and preprocessing) they were ranked on.
PROTOCOL = (
    "eval.filter_seen",
    "eval.sampled_negatives",
    "eval.sample_seed",
    "dataset_sha256",
    "dataset_preprocessing",
    "data.view",
    "data.split",
    "data.split_valid",
    "data.split_test",
    "data.split_dates",
    "data.split_targets",
)

PROTOCOL_DEFAULTS = {
    "data.view": "user",
    "data.split": "loo",
    "data.split_valid": 0.8,
    "data.split_test": 0.9,
    "data.split_dates": "",
    "data.split_targets": "first",
}  # rows written before these keys


def comparable(rows: pd.DataFrame, column: str) -> pd.Series:
    """A PROTOCOL column as comparable text (a row without it has the default); the sampling seed only where
    negatives were sampled."""
    values = rows[column].fillna(PROTOCOL_DEFAULTS.get(column, "none")).astype(str)
    if column == "eval.sample_seed" and "eval.sampled_negatives" in rows:
        values = values.where(rows["eval.sampled_negatives"].fillna(0) > 0, "unused")
    return values


def why_separate(rows: pd.DataFrame) -> str | None:
    """Why these rows' experiments must not share tables (None: they may, as the paper's tables do)."""
    for (dataset, space), group in rows.groupby(["dataset", "space"]):
        if group["experiment"].nunique() > 1:
            names = ", ".join(sorted(group["experiment"].unique()))
            return f"{names} all cover {dataset} / {space}"
    for dataset, group in rows.groupby("dataset"):
        for column in (c for c in PROTOCOL if c in group):
            values = (
                comparable(group, column)
                .groupby(group["experiment"])
                .agg(lambda v: tuple(sorted(v.unique())))
            )
            if values.nunique() > 1:
                shown = "; ".join(f"{e}: {', '.join(v)}" for e, v in values.items())
                return f"on {dataset} they differ in {column} ({shown})"
    return None


def protocol_line(rows: pd.DataFrame) -> str | None:
    """How the data was cut and viewed, when it is not the default (leave-one-out over users)."""
    parts = []
    if "data.view" in rows and (rows["data.view"].fillna("user") != "user").any():
        parts.append("data.view=item (sequences are items; the model predicts the next user)")
    if "data.split" in rows and (rows["data.split"].fillna("loo") == "temporal").any():
        parts.append(_temporal_split(rows[rows["data.split"] == "temporal"].iloc[0]))
    return "protocol: " + "; ".join(parts) if parts else None


def _temporal_split(temporal: pd.Series) -> str:
    """A temporal split as the verdict states it: where it cut (and, where the row recorded them, the cut
    dates and target counts) and which events became targets."""
    cuts = (
        f"dates {temporal['data.split_dates']}"
        if temporal.get("data.split_dates")
        else f"timestamp quantiles {temporal['data.split_valid']:g} / {temporal['data.split_test']:g}"
    )
    at = ""
    if pd.notna(temporal.get("split_valid_cut")) and pd.notna(temporal.get("split_test_cut")):
        at = " = " + " / ".join(
            dt.datetime.fromtimestamp(float(temporal[k]), dt.timezone.utc).strftime("%Y-%m-%d")
            for k in ("split_valid_cut", "split_test_cut")
        )
    counted = (
        f"; {int(temporal['valid_targets']):,} validation / {int(temporal['test_targets']):,} test targets"
        if pd.notna(temporal.get("test_targets"))
        else ""
    )
    return (
        f"data.split=temporal (one global cut at {cuts}{at}; targets: {temporal['data.split_targets']} "
        f"event(s) after each cut per user{counted})"
    )
