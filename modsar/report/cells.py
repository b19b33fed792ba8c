"""What one table cell holds, and how Parquet rows become cells and their statistics.

A cell is the test metric of the configuration selected by validation for (dataset, space, arm): the mean ±
std over its seed re-runs when there are any, else the selected trial's own value. Rows form one cell only
when they are replicas (one experiment, one config except the seed): a mismatch is refused, never averaged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from modsar.config import TrainConfig
from modsar.errors import ModsarError
from modsar.records.rows import differing_keys, replicas_differ_from
from modsar.report.arms import KEY, in_paper_order, shown, with_arms

METRICS = ["recall@5", "recall@10", "recall@20", "ndcg@5", "ndcg@10", "ndcg@20"]
SHORT = {"recall": "R", "ndcg": "N", "mrr": "MRR"}
DONE = ("finished", "stopped")
# The columns a report reads from every row (the others it reads only where present); rows of `modsar train`
# and `modsar search` always have them, so rows without one were written by something else.
REPORT_KEYS = ("experiment", "trial_id", "status", "role", "selected", "dataset", "space", "task", "seed")

CellKey = tuple[str, str, str]  # (dataset, space, arm)


def short(metric: str) -> str:
    """A metric as the paper's tables name it: "ndcg@10" -> "N@10"."""
    name, k = metric.split("@")
    return f"{SHORT.get(name, name)}@{k}"


@dataclass
class Cell:
    """One table cell: the test values of a (dataset, space, arm) by seed, and the trials they come from."""

    values: dict[int, float] = field(default_factory=dict)  # seed -> test value
    experiment: str = ""
    trials: list[str] = field(default_factory=list)  # trial ids behind the values, in seed order
    kind: str = ""  # "selected" or "seed re-runs"
    failed: list[str] = field(default_factory=list)  # seed re-runs that diverged or errored: no value

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return float(np.mean(list(self.values.values()))) if self.values else None

    @property
    def std(self) -> float | None:
        return float(np.std(list(self.values.values()), ddof=1)) if self.n > 1 else None

    def text(self, digits: int = 4) -> str:
        mark = " †" if self.failed else ""  # explained in the verdict and the sources
        if self.mean is None:
            return "–" + mark
        return (
            f"{self.mean:.{digits}f}" + (f" ± {self.std:.{digits}f}" if self.std is not None else "") + mark
        )


Cells = dict[str, dict[CellKey, Cell]]  # metric -> (dataset, space, arm) -> cell


def cell_at(cells: Cells, metric: str, key: CellKey) -> Cell:
    """The cell of `metric` at `key`; an empty one (shown "–", never 0) where no row fills it."""
    return cells.get(metric, {}).get(key, Cell())


def where(key: CellKey) -> str:
    """A cell's place as messages name it: "video / vanilla / AR"."""
    return f"{key[0]} / {key[1]} / {shown(key[2])}"


def models(cells: Cells, dataset: str, space: str) -> list[str]:
    """The models of a comparison space on a dataset, in the residual-dominance paper's order."""
    return in_paper_order(
        {arm for by_metric in cells.values() for (d, s, arm) in by_metric if d == dataset and s == space}
    )


def _refuse_unless_replicas(group: pd.DataFrame, kind: str, key: CellKey) -> str:
    """The one experiment of rows that must be replicas; refuses rows of several experiments, several selected
    rows, configs that differ beyond the seed, and a seed twice."""
    experiments = sorted(group["experiment"].unique())
    if len(experiments) > 1:
        raise ModsarError(
            f"{where(key)}: rows of experiments {', '.join(experiments)} would share one cell; report them "
            "with --experiment one at a time"
        )
    if kind == "selected" and len(group) > 1:
        raise ModsarError(
            f"{where(key)}: experiment {experiments[0]} has {len(group)} selected rows "
            f"({', '.join(sorted(group['trial_id']))}), where one search selects one: its trials folder "
            "holds rows of more than one search; keep one search's rows there (or re-run it with "
            "--overwrite)"
        )
    if differ := differing_keys(group):
        raise ModsarError(
            f"{where(key)}: the {kind} of experiment {experiments[0]} are not replicas (they differ in "
            f"{', '.join(differ[:5])}); they cannot form one cell"
        )
    seeds = group["seed"].astype(int)
    if seeds.duplicated().any():
        raise ModsarError(
            f"{where(key)}: experiment {experiments[0]} has two {kind} rows for seed "
            f"{int(seeds[seeds.duplicated()].iloc[0])}; remove one"
        )
    return experiments[0]


def _replica_cell(group: pd.DataFrame, column: str, kind: str, key: CellKey) -> Cell:
    """One cell from rows that must be replicas: one experiment, one config but the seed, distinct seeds."""
    experiment = _refuse_unless_replicas(group, kind, key)
    # the seed column is made int before the rows are filtered: assigning it to an empty frame (every
    # re-run failed) would give the frame the seeds' index, one NaN row per seed
    rows = group.assign(seed=group["seed"].astype(int))
    done = rows[rows["status"].isin(DONE) & rows[column].notna()].sort_values("seed")
    return Cell(
        {int(s): float(v) for s, v in zip(done["seed"], done[column], strict=True)},
        experiment,
        list(done["trial_id"]),
        kind,
        sorted(set(group["trial_id"]) - set(done["trial_id"])),
    )


def collect(rows: pd.DataFrame, metric: str) -> dict[CellKey, Cell]:
    """(dataset, space, arm) -> Cell of test `metric`: seed re-runs if present, else the selected trial.

    Seed re-runs must be replicas of the selected trial; those that diverged or failed are counted in the
    cell (`failed`), never silently dropped."""
    column = f"test.{metric}"
    cells: dict[CellKey, Cell] = {}
    if column not in rows:
        return cells
    _refuse_impossible(rows, column)
    rows = with_arms(rows)
    selected = rows[(rows["role"] == "search") & rows["selected"].astype(bool) & rows["status"].isin(DONE)]
    _refuse_unvalidated(selected)
    _refuse_untested(selected, column)
    for key, group in selected.groupby(KEY):
        cells[key] = _replica_cell(group, column, "selected", key)
    for key, group in rows[rows["role"] == "seed"].groupby(KEY):
        chosen = selected[(selected[KEY] == pd.Series(key, index=KEY)).all(axis=1)]
        if len(chosen) and (differ := replicas_differ_from(chosen, group)):
            raise ModsarError(
                f"{where(key)}: the seed re-runs of experiment "
                f"{group['experiment'].iloc[0]} are not of its selected configuration (they differ "
                f"in {', '.join(differ[:5])}); run its `modsar search ... --resume --seeds K` again"
            )
        cells[key] = _replica_cell(group, column, "seed re-runs", key)
        if not len(chosen):  # nothing says what they re-run: a selected row lost, or rows of another search
            raise ModsarError(
                f"{where(key)}: experiment {cells[key].experiment} has seed re-runs but no selected trial "
                "they re-run (its row is missing); run its `modsar search ... --resume` again, which "
                "selects and tests it"
            )
    return cells


def _refuse_impossible(rows: pd.DataFrame, column: str) -> None:
    """A recall, NDCG or MRR outside [0, 1] (inf from a damaged or edited row) would be averaged into a cell
    and a verdict ("best AE inf"): one line naming the row instead. NaN is a metric not measured, and counts
    as a re-run that did not finish."""
    values = pd.to_numeric(rows[column], errors="coerce")
    in_a_cell = rows["role"].isin(["search", "seed"]) if "role" in rows else True  # not superseded or train
    bad = in_a_cell & values.notna() & ~values.between(0.0, 1.0)
    if bad.any():
        row = rows[bad].iloc[0]
        raise ModsarError(
            f"experiment {row.get('experiment')}, trial {row.get('trial_id')}: {column} is "
            f"{values[bad].iloc[0]}, which no ranking metric can be (they lie in [0, 1]); the row is "
            "damaged: remove it, or train that trial again"
        )


def _refuse_unvalidated(selected: pd.DataFrame) -> None:
    """A selected row is the trial with the best validation score; one without a score in [0, 1] (NaN or inf
    from a damaged or edited row) was not selected by validation, and its test figure would stand in a cell
    as if it had been: one line naming the row instead."""
    for row in selected.to_dict("records"):
        named = row.get("train.monitor")
        config = TrainConfig(monitor=named) if isinstance(named, str) else TrainConfig()
        monitor = f"valid.{config.monitor_key}"
        value = pd.to_numeric(row.get(monitor), errors="coerce")
        if not 0.0 <= value <= 1.0:  # False for NaN too
            raise ModsarError(
                f"experiment {row.get('experiment')}, trial {row.get('trial_id')}: selected, but its "
                f"{monitor} is {row.get(monitor)}, so validation cannot have selected it; the row is "
                "damaged: re-run the search's selection with `modsar search ... --resume`"
            )


def _refuse_untested(selected: pd.DataFrame, column: str) -> None:
    """A selected trial that ended has its test figures (a search tests what it selects); one without would
    leave its cell empty and the verdict saying "no result" for a direction that has one: one line naming the
    row instead."""
    k = column.rpartition("@")[2]
    ks = selected["eval.ks"] if "eval.ks" in selected else pd.Series(None, index=selected.index, dtype=object)
    untested = selected[selected[column].isna() & ks.map(lambda v: _measures(v, k)).astype(bool)]
    if len(untested):
        row = untested.iloc[0]
        raise ModsarError(
            f"experiment {row.get('experiment')}, trial {row.get('trial_id')}: selected, but its {column} is "
            "missing, so it was never tested or the row is damaged; run the search with `modsar search ... "
            "--resume`, which tests the trial it selects"
        )


def _measures(ks: object, k: str) -> bool:
    """Whether a row's eval.ks (JSON of its cut-offs) has cut-off `k`: a row of a search that did not measure
    a metric lacks it rightly. A row that does not say is taken to measure it."""
    try:
        return k in {str(x) for x in json.loads(ks)} if isinstance(ks, str) else True
    except (TypeError, ValueError):
        return True


def paired_test(ae: Cell, ar: Cell) -> tuple[float | None, int]:
    """Two-sided paired t-test of AR vs AE over their common seeds: (p-value, n); the p-value is NaN where
    the differences are all equal (no spread: t is undefined), None with fewer than two common seeds."""
    common = sorted(set(ae.values) & set(ar.values))
    if len(common) < 2:
        return None, len(common)
    from scipy import stats

    a, b = [ae.values[s] for s in common], [ar.values[s] for s in common]
    if np.allclose(np.subtract(b, a), np.subtract(b, a)[0]):  # zero variance of differences: t undefined
        return math.nan, len(common)
    return float(stats.ttest_rel(b, a).pvalue), len(common)


def improvement(ae: float | None, ar: float | None) -> float | None:
    """(AR − AE) / AE, the paper's Best Improv.; None where a side is missing or AE is 0."""
    if ae is None or ar is None or ae == 0:
        return None
    return (ar - ae) / ae
