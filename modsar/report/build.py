"""From trial rows to reports: which experiments may share tables, which table each space goes in, and the
tables and verdict lines of each report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from modsar.errors import ModsarError
from modsar.report.arms import TASKS, with_arms
from modsar.report.cells import METRICS, Cells, collect
from modsar.report.protocol import protocol_line, why_separate
from modsar.report.tables import Table, design_table, generation_table, models_table, significance_table
from modsar.report.verdicts import (
    incomplete_notes,
    model_verdicts,
    plateau_line,
    retrained_line,
    verdicts,
)

TABLE5 = ["local_attn", "ssept", "loss_ce", "loss_bce", "loss_bpr"]  # the paper's design choices, in order


@dataclass
class Report:
    """The tables of one set of experiments that do not overlap (no two cover the same dataset and space)."""

    experiment: str | None  # set when the report is split per experiment
    rows: pd.DataFrame
    tables: list[Table]
    verdicts: list[str]
    cells: Cells
    datasets: list[str]
    spaces: list[str]


@dataclass
class _Layout:
    """Which table each space of the rows goes in."""

    vanilla: bool  # Table 4
    modular: list[str]  # Table 5: the paper's design choices first, then any other space
    hf: list[str]  # Table 6: the HuggingFace backbones
    comparisons: list[str]  # spaces of models, a table each

    @property
    def design(self) -> list[str]:
        """Every AE-vs-AR space, in table order."""
        return (["vanilla"] if self.vanilla else []) + self.modular + self.hf

    @property
    def tables(self) -> list[tuple[str, list[str], str]]:
        """(table, its AE-vs-AR spaces, what they vary) for each table with rows: a verdict compares within
        one table, and counts design choices, or in Table 6 backbones."""
        named = [
            ("Table 4", ["vanilla"] if self.vanilla else [], "design choices"),
            ("Table 5", self.modular, "design choices"),
            ("Table 6", self.hf, "backbones"),
        ]
        return [(name, spaces, counted) for name, spaces, counted in named if spaces]


def build_reports(
    rows: pd.DataFrame,
    metrics: list[str] | None = None,
    headline: str = "ndcg@10",
    unfinished: Mapping[str, int] | None = None,
) -> list[Report]:
    """One Report for all rows, or one per experiment when experiments cannot share tables: two cover the same
    (dataset, space), or two on one dataset were ranked differently or on different data (PROTOCOL).
    `unfinished`: experiment -> trials planned, for searches not recorded complete; their verdicts say so."""
    if not len(rows):
        raise ModsarError(
            "no trial rows to report on; run `modsar search` first or check --results/--experiment"
        )
    reason = why_separate(rows)
    if reason is None:
        return [_build(rows, metrics, headline, None, unfinished or {})]
    reports = [
        _build(group, metrics, headline, experiment, unfinished or {})
        for experiment, group in rows.groupby("experiment")
    ]
    reports[0].verdicts.insert(0, f"each experiment is reported on its own: {reason}")
    return reports


def _build(
    rows: pd.DataFrame,
    metrics: list[str] | None,
    headline: str,
    experiment: str | None,
    unfinished: Mapping[str, int],
) -> Report:
    """The report of `rows`; its titles and lines start with `experiment` when the report is split by it."""
    metrics = metrics or METRICS
    cells = {m: collect(rows, m) for m in dict.fromkeys([headline, *metrics])}  # in order: one first error
    datasets = sorted(rows["dataset"].dropna().unique())
    layout = _layout(rows)
    prefix = f"{experiment}: " if experiment else ""
    tables = _tables(rows, cells, datasets, layout, metrics, prefix)
    lines = _verdict_lines(rows, cells, datasets, layout, headline, prefix, unfinished)
    return Report(experiment, rows, tables, lines, cells, datasets, layout.design)


def _layout(rows: pd.DataFrame) -> _Layout:
    """A space whose rows compare models gets a table of its own; vanilla goes in Table 4, the hf_ spaces in
    Table 6, every other space in Table 5."""
    arms = with_arms(rows)
    comparisons = sorted(arms.loc[~arms["arm"].isin(TASKS), "space"].dropna().unique())  # spaces of models
    present = [s for s in sorted(rows["space"].dropna().unique()) if s not in comparisons]
    hf = [s for s in present if s.startswith("hf_")]
    modular = [s for s in TABLE5 if s in present] + [
        s for s in present if s not in TABLE5 and s != "vanilla" and not s.startswith("hf_")
    ]
    return _Layout("vanilla" in present, modular, hf, comparisons)


def _tables(
    rows: pd.DataFrame, cells: Cells, datasets: list[str], layout: _Layout, metrics: list[str], prefix: str
) -> list[Table]:
    """Tables 4, 5, 6, a table per comparison of models, the rollouts, the paired t-tests: those with rows."""
    tables = []
    if layout.vanilla:
        tables.append(
            design_table(f"{prefix}Table 4: vanilla AE vs AR", cells, datasets, ["vanilla"], metrics, False)
        )
    if layout.modular:
        tables.append(
            design_table(f"{prefix}Table 5: design choices", cells, datasets, layout.modular, metrics, True)
        )
    if layout.hf:
        tables.append(
            design_table(f"{prefix}Table 6: HuggingFace backbones", cells, datasets, layout.hf, metrics, True)
        )
    for space in layout.comparisons:
        tables.append(models_table(f"{prefix}{space}: one row per model", cells, datasets, space, metrics))
    rollouts = generation_table(
        f"{prefix}Generative evaluation: greedy rollouts of the selected models "
        "(modsar/evaluation/rollouts.py; H = steps, H gen/true in bits)",
        rows,
    )
    if rollouts is not None:
        tables.append(rollouts)
    sig = significance_table(cells, datasets, layout.design, metrics)
    if sig is not None:
        sig.title = prefix + sig.title
        tables.append(sig)
    return tables


def _verdict_lines(
    rows: pd.DataFrame,
    cells: Cells,
    datasets: list[str],
    layout: _Layout,
    headline: str,
    prefix: str,
    unfinished: Mapping[str, int],
) -> list[str]:
    """The protocol (when not the default), the verdicts on `headline`, one per table and dataset (first a
    note naming the table's searches that did not finish), the cells stuck on a plateau, and those whose
    test figures come from a winner trained again whose validation moved."""

    def notes(spaces: list[str]) -> dict[str, str]:
        return incomplete_notes(rows[rows["space"].isin(spaces)], datasets, unfinished)

    several = len(layout.tables) > 1  # then each line names its table
    lines = [
        prefix + v
        for table, spaces, counted in layout.tables
        for v in verdicts(
            rows, cells, datasets, spaces, headline, notes(spaces), table if several else None, counted
        )
    ]
    lines += [
        prefix + v
        for space in layout.comparisons
        for v in model_verdicts(cells, datasets, space, headline, notes([space]))
    ]
    if (protocol := protocol_line(rows)) is not None:
        lines.insert(0, prefix + protocol)
    if (plateau := plateau_line(rows, cells.get(headline, {}))) is not None:
        lines.append(prefix + plateau)
    if (retrained := retrained_line(rows, cells.get(headline, {}))) is not None:
        lines.append(prefix + retrained)
    return lines
