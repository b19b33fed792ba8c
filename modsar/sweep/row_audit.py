"""Before a resumed search goes on from its rows, each row must be this search's and whole.

Rows are files: they are committed, copied between machines and sometimes edited or damaged. A resumed search
selects, tests and re-runs on seeds from them, so a row of another dataset or space, or one whose metric no
ranking can have, would be taken as a trial of this search and give a verdict from it. Such a row is refused
in one line naming its file, before any trial runs (after the check that a resume repeats its search:
a changed --dataset is named as such, not as a foreign row)."""

from __future__ import annotations

import pandas as pd

from modsar.errors import ModsarError
from modsar.records.rows import read_rows
from modsar.sweep.carry_on import row_curve
from modsar.sweep.credentials import redact
from modsar.sweep.plan import Plan
from modsar.sweep.rows import rows_dir

# what a row of a trial that ended with validation passes has: its best pass's metrics
ENDED = ("finished", "stopped")
AGAIN = "delete that file, then run the search with --resume again (a trial without a row is run again)"


def check_resumed_rows(plan: Plan) -> None:
    """Refuse (ModsarError) the first row under the experiment that is not this search's (another dataset or
    space), that holds a valid.* or test.* value outside [0, 1], or that ended with validation passes but
    lacks its monitored validation value."""
    name = plan.request.experiment_name
    rows = read_rows(rows_dir(plan), name)
    if not len(rows):
        return
    trials = f"{redact(rows_dir(plan))}/{name}/trials"
    for column, ours in (("dataset", plan.base.get("dataset")), ("space", plan.space.name)):
        if column not in rows or ours is None:
            continue
        other = rows[rows[column].notna() & (rows[column] != ours)]
        if len(other):
            row = other.iloc[0]
            raise ModsarError(
                f"{trials}/{row['trial_id']}.parquet: a row of {column} {row[column]!r}, not this search's "
                f"{ours!r}, so not a trial of this search: move it out of that folder, then run the search "
                "with --resume again"
            )
    counted = rows["role"].isin(["search", "seed"])  # a superseded row counts nowhere
    for column in [c for c in rows.columns if c.startswith(("valid.", "test."))]:
        values = pd.to_numeric(rows[column], errors="coerce")
        bad = counted & rows[column].notna() & ~values.between(0.0, 1.0)
        if bad.any():
            row = rows[bad].iloc[0]
            raise ModsarError(
                f"{trials}/{row['trial_id']}.parquet: its {column} is {row[column]}, which no ranking metric "
                f"can be (they lie in [0, 1]); the row is damaged: {AGAIN}"
            )
    _refuse_unvalidated(rows, f"valid.{plan.monitor}", trials)


def _refuse_unvalidated(rows: pd.DataFrame, monitor: str, trials: str) -> None:
    """A search trial that ended after validation passes (its curve) has its best pass's value; without it the
    selection would pass over that trial for good, and the search would still say it searched it."""
    ended = rows[(rows["role"] == "search") & rows["status"].isin(ENDED)]
    values = ended[monitor] if monitor in ended else pd.Series(None, index=ended.index, dtype=float)
    for row, value in zip(ended.to_dict("records"), values, strict=True):
        if pd.isna(value) and row_curve(row):
            raise ModsarError(
                f"{trials}/{row['trial_id']}.parquet: a {row['status']} trial with validation passes, but "
                f"its {monitor} is missing; the row is damaged: {AGAIN}"
            )
