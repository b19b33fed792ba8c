"""The report's tables, styled but not yet rendered: the paper's AE-vs-AR layouts (Tables 4, 5, 6), a space's
models side by side, the rollouts, the paired t-tests and the sources of every cell.

In the AE-vs-AR layouts the better of each AE/AR pair is underlined, the best AE and the best AR of a row are
bold, and Best Improv. = (best AR − best AE) / best AE.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from modsar.report.arms import TASKS, shown, with_arms
from modsar.report.cells import Cell, Cells, cell_at, improvement, models, paired_test, short

# The rollout columns (generate.<key>) and their short headers.
GENERATE = {
    "alignment_recall": "align R",
    "alignment_ndcg": "align N",
    "distinct_ratio": "distinct",
    "immediate_repeat_rate": "repeat",
    "entropy_generated_matched": "H gen",
    "entropy_future": "H true",
    "coverage": "cover",
    "top1pct_share_generated_matched": "top1% gen",
    "top1pct_share_future": "top1% true",
    "unseen_transition_rate": "unseen gen",
    "unseen_transition_rate_future": "unseen true",
}


@dataclass
class Styled:
    """A cell's text and the marks every format renders its own way."""

    text: str
    bold: bool = False
    underline: bool = False


@dataclass
class Table:
    """A titled table in no format yet: every renderer reads the same one."""

    title: str
    header: list[list[str]]  # one or two header rows
    rows: list[list[Styled]]


def best_mean(cells: Iterable[Cell]) -> float | None:
    """The highest mean among `cells` that have one."""
    return max((c.mean for c in cells if c.mean is not None), default=None)


def percent(gain: float | None) -> str:
    """A relative gain as the tables show it: "+12.34%", or "–" where it is not defined."""
    return "–" if gain is None else f"{100 * gain:+.2f}%"


def _design_row(
    cells: Cells, dataset: str, metric: str, spaces: list[str], with_improvement: bool
) -> list[Styled]:
    """One (dataset, metric) row of an AE-vs-AR table: an AE and an AR cell per space, marked."""
    row_cells = {(s, t): cell_at(cells, metric, (dataset, s, t)) for s in spaces for t in TASKS}
    best = {t: best_mean(c for (_, tt), c in row_cells.items() if tt == t) for t in TASKS}
    styled = [Styled(dataset), Styled(short(metric))]
    for s in spaces:
        ae, ar = row_cells[(s, "ae")], row_cells[(s, "ar")]
        winner = None
        if ae.mean is not None and ar.mean is not None and ae.mean != ar.mean:
            winner = "ar" if ar.mean > ae.mean else "ae"
        for t, c in (("ae", ae), ("ar", ar)):
            styled.append(
                Styled(
                    c.text(),
                    bold=c.mean is not None and c.mean == best[t] and len(spaces) > 1,
                    underline=winner == t,
                )
            )
    if with_improvement:
        styled.append(Styled(percent(improvement(best["ae"], best["ar"]))))
    return styled


def design_table(
    title: str,
    cells: Cells,
    datasets: list[str],
    spaces: list[str],
    metrics: list[str],
    with_improvement: bool,
) -> Table:
    """An AE-vs-AR table of design choices (the paper's Tables 4, 5, 6): a row per dataset and metric."""
    datasets = [
        d
        for d in datasets
        if any((d, s, t) in by_metric for by_metric in cells.values() for s in spaces for t in TASKS)
    ]  # rows only where a cell exists
    header = [
        ["Dataset", "Metric", *[s for s in spaces for _ in TASKS]]
        + (["Best Improv."] if with_improvement else []),
        ["", "", *[t.upper() for _ in spaces for t in TASKS]] + ([""] if with_improvement else []),
    ]
    body = [
        _design_row(cells, dataset, metric, spaces, with_improvement)
        for dataset in datasets
        for metric in metrics
    ]
    return Table(title, header, body)


def models_table(title: str, cells: Cells, datasets: list[str], space: str, metrics: list[str]) -> Table:
    """A comparison of models (residual_models): test metrics per dataset and model, a column's best bold."""
    header = [["Dataset", "Model", *[short(m) for m in metrics]]]
    body = []
    for dataset in datasets:
        arms = models(cells, dataset, space)
        best = {m: best_mean(cell_at(cells, m, (dataset, space, arm)) for arm in arms) for m in metrics}
        for arm in arms:
            row = [Styled(dataset), Styled(arm)]
            for m in metrics:
                cell = cell_at(cells, m, (dataset, space, arm))
                row.append(
                    Styled(cell.text(), bold=cell.mean is not None and cell.mean == best[m] and len(arms) > 1)
                )
            body.append(row)
    return Table(title, header, body)


def generation_table(title: str, rows: pd.DataFrame) -> Table | None:
    """The rollouts of every selected trial that has them (eval.generate_steps): a row per dataset, space
    and arm."""
    columns = [f"generate.{k}" for k in GENERATE]
    if not all(c in rows for c in columns):
        return None
    done = with_arms(
        rows[(rows["role"] == "search") & rows["selected"].astype(bool) & rows["generate.steps"].notna()]
    )
    if not len(done):
        return None
    body = []
    for _, row in done.sort_values(["dataset", "space", "arm"]).iterrows():
        body.append(
            [
                Styled(row["dataset"]),
                Styled(str(row["space"])),
                Styled(shown(row["arm"])),
                Styled(str(int(row["generate.steps"]))),
            ]
            + [Styled("–" if pd.isna(row[c]) else f"{row[c]:.3f}") for c in columns]
        )
    return Table(title, [["Dataset", "Space", "Model", "H", *GENERATE.values()]], body)


def significance_table(
    cells: Cells, datasets: list[str], spaces: list[str], metrics: list[str]
) -> Table | None:
    """AR vs AE over the seeds both sides share (paired t-test); None when no cell has two such seeds."""
    body = []
    for dataset in datasets:
        for s in spaces:
            for metric in metrics:
                ae, ar = (
                    cell_at(cells, metric, (dataset, s, "ae")),
                    cell_at(cells, metric, (dataset, s, "ar")),
                )
                p, n = paired_test(ae, ar)
                if p is None:
                    continue
                body.append(
                    [
                        Styled(dataset),
                        Styled(s),
                        Styled(short(metric)),
                        Styled(ae.text()),
                        Styled(ar.text()),
                        Styled(percent(improvement(ae.mean, ar.mean))),
                        Styled("– (equal differences)" if math.isnan(p) else f"{p:.4g}"),
                        # a side that lost a re-run: its mean is over its own seeds, the test over shared ones
                        Styled(str(n) if ae.n == ar.n == n else f"{n} shared (AE {ae.n}, AR {ar.n})"),
                    ]
                )
    if not body:
        return None
    header = [["Dataset", "Space", "Metric", "AE", "AR", "AR vs AE", "p (paired t)", "n seeds"]]
    return Table("Paired comparison over seeds (two-sided paired t-test, AR vs AE)", header, body)


def sources_table(cells_of_reports: list[Cells], headline: str) -> Table:
    """Where every cell comes from: experiment, trial ids and seeds (the headline metric's cells), report by
    report."""
    body = []
    for cells in cells_of_reports:
        for (dataset, space, arm), cell in sorted(cells.get(headline, {}).items()):
            failed = f"; no value (diverged or failed): {' '.join(cell.failed)}" if cell.failed else ""
            body.append(
                [
                    Styled(cell.experiment),
                    Styled(dataset),
                    Styled(space),
                    Styled(shown(arm)),
                    Styled(cell.kind + failed),
                    Styled(" ".join(cell.trials)),
                    Styled(" ".join(str(s) for s in cell.values)),
                ]
            )
    header = [["Experiment", "Dataset", "Space", "Task / model", "Rows", "Trial ids", "Seeds"]]
    return Table("Sources", header, body)
