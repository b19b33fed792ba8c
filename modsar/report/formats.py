"""`modsar report`: the ModSAR paper's AE-vs-AR tables (4, 5, 6), statistics and plots from Parquet rows.

A cell is the test metric of the configuration selected by validation for (dataset, space, task): the
mean ± std over its seed re-runs (`--seeds K` in search) when there are any, else the selected trial's
own value. Rows are combined into one cell only when they are replicas: the same experiment and the same
config except the seed (checked; a mismatch is refused, never averaged). When two experiments cover the same
(dataset, space), each experiment gets its own section: experiments are never blended. Every report ends
with its sources (experiment, trial ids and seeds of every cell). Missing cells stay missing ("–"), never 0. In Table 5/6 layouts the better of each AE/AR pair
is underlined, the best AE and the best AR of a row are bold, and Best Improv. = (best AR − best AE) /
best AE. With seeds on both sides, a paired t-test over the common seeds gives p and n.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from modsar.config import TrainConfig
from modsar.errors import ModsarError
from modsar.model.registry import PAPER_NAMES, paper_name
from modsar.outputs import pyplot, save_figure
from modsar.records.rows import differing_keys

METRICS = ["recall@5", "recall@10", "recall@20", "ndcg@5", "ndcg@10", "ndcg@20"]
SHORT = {"recall": "R", "ndcg": "N", "mrr": "MRR"}
TABLE5 = ["local_attn", "ssept", "loss_ce", "loss_bce", "loss_bpr"]
TASKS = ("ae", "ar")


def short(metric: str) -> str:
    name, k = metric.split("@")
    return f"{SHORT.get(name, name)}@{k}"


DONE = ("finished", "stopped")
# The columns a report reads from every row (the others it reads only where present); rows of `modsar train`
# and `modsar search` always have them, so rows without one were written by something else.
REPORT_KEYS = ("experiment", "trial_id", "status", "role", "selected", "dataset", "space", "task", "seed")
KEY = ["dataset", "space", "arm"]  # arm: the task ("ae", "ar"), or the model where a space compares backbones


def with_arms(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with their `arm`: the task, or (in a (dataset, space) whose rows have several backbones, a comparison of
    models such as residual_models) the model's paper name, reported one row per model instead of AE/AR pairs;
    a space with `arms` (bluesky) adds their values: "AR positional=target_aligned, user_fusion=token"."""
    if not len(rows):
        return rows.assign(arm=pd.Series(dtype=str))
    backbone = rows.get("model.backbone", pd.Series("modular", index=rows.index)).fillna("modular")
    several = backbone.groupby([rows["dataset"], rows["space"]]).transform("nunique") > 1
    names = [
        paper_name(b, t) if many else t for b, t, many in zip(backbone, rows["task"], several, strict=True)
    ]
    arms = rows.get("space_arms", pd.Series(None, index=rows.index))
    for i, (name, keys) in enumerate(zip(names, arms, strict=True)):
        if isinstance(keys, str) and (keys := json.loads(keys)):
            row = rows.iloc[i]
            values = ", ".join(f"{key.split('.')[-1]}={row[key]}" for key in keys)
            names[i] = f"{name.upper() if name in TASKS else name} {values}"
    return rows.assign(arm=names)


@dataclass
class Cell:
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


def _where(key: tuple[str, str, str]) -> str:
    return f"{key[0]} / {key[1]} / {key[2].upper() if key[2] in TASKS else key[2]}"


def _replica_cell(group: pd.DataFrame, column: str, kind: str, key: tuple[str, str, str]) -> Cell:
    """One cell from rows that must be replicas: one experiment, one config except the seed, distinct seeds."""
    where = _where(key)
    experiments = sorted(group["experiment"].unique())
    if len(experiments) > 1:
        raise ModsarError(
            f"{where}: rows of experiments {', '.join(experiments)} would share one cell; report them "
            "with --experiment one at a time"
        )
    if kind == "selected" and len(group) > 1:
        raise ModsarError(
            f"{where}: experiment {experiments[0]} has {len(group)} selected rows "
            f"({', '.join(sorted(group['trial_id']))}); run its `modsar search ... --resume` to "
            "select again"
        )
    if differ := differing_keys(group):
        raise ModsarError(
            f"{where}: the {kind} of experiment {experiments[0]} are not replicas (they differ in "
            f"{', '.join(differ[:5])}); they cannot form one cell"
        )
    seeds = group["seed"].astype(int)
    if seeds.duplicated().any():
        raise ModsarError(
            f"{where}: experiment {experiments[0]} has two {kind} rows for seed "
            f"{int(seeds[seeds.duplicated()].iloc[0])}; remove one"
        )
    done = group[group["status"].isin(DONE) & group[column].notna()].assign(seed=seeds).sort_values("seed")
    return Cell(
        {int(s): float(v) for s, v in zip(done["seed"], done[column], strict=True)},
        experiments[0],
        list(done["trial_id"]),
        kind,
        sorted(set(group["trial_id"]) - set(done["trial_id"])),
    )


def collect(rows: pd.DataFrame, metric: str) -> dict[tuple[str, str, str], Cell]:
    """(dataset, space, arm) -> Cell of test `metric`: seed re-runs if present, else the selected trial.

    Seed re-runs must be replicas of the selected trial; those that diverged or failed are counted in the
    cell (`failed`), never silently dropped."""
    column = f"test.{metric}"
    cells: dict[tuple[str, str, str], Cell] = {}
    if column not in rows:
        return cells
    rows = with_arms(rows)
    selected = rows[
        (rows["role"] == "search")
        & rows["selected"].astype(bool)
        & rows["status"].isin(DONE)
        & rows[column].notna()
    ]
    for key, group in selected.groupby(KEY):
        cells[key] = _replica_cell(group, column, "selected", key)
    for key, group in rows[rows["role"] == "seed"].groupby(KEY):
        chosen = selected[(selected[KEY] == pd.Series(key, index=KEY)).all(axis=1)]
        if len(chosen) and (differ := differing_keys(pd.concat([chosen, group]))):
            raise ModsarError(
                f"{_where(key)}: the seed re-runs of experiment "
                f"{group['experiment'].iloc[0]} are not of its selected configuration (they differ "
                f"in {', '.join(differ[:5])}); run its `modsar search ... --resume --seeds K` again"
            )
        cells[key] = _replica_cell(group, column, "seed re-runs", key)
    return cells


def paired_test(ae: Cell, ar: Cell) -> tuple[float | None, int]:
    """Two-sided paired t-test of AR vs AE over their common seeds: (p-value, n)."""
    common = sorted(set(ae.values) & set(ar.values))
    if len(common) < 2:
        return None, len(common)
    from scipy import stats

    a, b = [ae.values[s] for s in common], [ar.values[s] for s in common]
    if np.allclose(np.subtract(b, a), np.subtract(b, a)[0]):  # zero variance of differences: t undefined
        return (1.0 if b[0] == a[0] else 0.0), len(common)
    return float(stats.ttest_rel(b, a).pvalue), len(common)


@dataclass
class Styled:
    text: str
    bold: bool = False
    underline: bool = False


@dataclass
class Table:
    title: str
    header: list[list[str]]  # one or two header rows
    rows: list[list[Styled]]


def improvement(ae: float | None, ar: float | None) -> float | None:
    if ae is None or ar is None or ae == 0:
        return None
    return (ar - ae) / ae


def design_table(
    title: str,
    cells: dict,
    datasets: list[str],
    spaces: list[str],
    metrics: list[str],
    with_improvement: bool,
) -> Table:
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
    body = []
    for dataset in datasets:
        for metric in metrics:
            row_cells = {
                (s, t): cells.get(metric, {}).get((dataset, s, t), Cell()) for s in spaces for t in TASKS
            }
            best = {
                t: max(
                    (c.mean for (s, tt), c in row_cells.items() if tt == t and c.mean is not None),
                    default=None,
                )
                for t in TASKS
            }
            styled = []
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
                gain = improvement(best["ae"], best["ar"])
                styled.append(Styled("–" if gain is None else f"{100 * gain:+.2f}%"))
            body.append([Styled(dataset), Styled(short(metric)), *styled])
    return Table(title, header, body)


def _models(cells: dict, dataset: str, space: str) -> list[str]:
    """The models of a comparison space on a dataset, in the residual-dominance paper's order."""
    order = list(PAPER_NAMES.values())
    found = {arm for by_metric in cells.values() for (d, s, arm) in by_metric if d == dataset and s == space}
    return sorted(found, key=lambda m: (order.index(m) if m in order else len(order), m))


def models_table(title: str, cells: dict, datasets: list[str], space: str, metrics: list[str]) -> Table:
    """A comparison of models (residual_models): test metrics per dataset and model, the best of a column bold."""
    header = [["Dataset", "Model", *[short(m) for m in metrics]]]
    body = []
    for dataset in datasets:
        models = _models(cells, dataset, space)
        best = {
            m: max(
                (
                    c.mean
                    for arm in models
                    if (c := cells.get(m, {}).get((dataset, space, arm))) and c.mean is not None
                ),
                default=None,
            )
            for m in metrics
        }
        for arm in models:
            row = [Styled(dataset), Styled(arm)]
            for m in metrics:
                cell = cells.get(m, {}).get((dataset, space, arm), Cell())
                row.append(
                    Styled(
                        cell.text(), bold=cell.mean is not None and cell.mean == best[m] and len(models) > 1
                    )
                )
            body.append(row)
    return Table(title, header, body)


def model_verdicts(cells: dict, datasets: list[str], space: str, metric: str) -> list[str]:
    lines = []
    for dataset in datasets:
        scored = [
            (arm, c)
            for arm in _models(cells, dataset, space)
            if (c := cells.get(metric, {}).get((dataset, space, arm))) and c.mean is not None
        ]
        if not scored:
            continue
        leader = max(scored, key=lambda pair: pair[1].mean)
        seeds = max(c.n for _, c in scored)
        lines.append(
            f"{dataset} / {space}: {leader[0]} leads on test {short(metric)} ({leader[1].mean:.4f}); "
            + ", ".join(f"{arm} {c.mean:.4f}" for arm, c in scored)
            + f"; {seeds} seed(s) per cell"
        )
    return lines


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


def generation_table(title: str, rows: pd.DataFrame) -> Table | None:
    """The rollouts of every selected trial that has them (eval.generate_steps): one row per dataset, space, arm."""
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
                Styled(row["arm"].upper() if row["arm"] in TASKS else row["arm"]),
                Styled(str(int(row["generate.steps"]))),
            ]
            + [Styled("–" if pd.isna(row[c]) else f"{row[c]:.3f}") for c in columns]
        )
    return Table(title, [["Dataset", "Space", "Model", "H", *GENERATE.values()]], body)


def significance_table(
    cells: dict, datasets: list[str], spaces: list[str], metrics: list[str]
) -> Table | None:
    body = []
    for dataset in datasets:
        for s in spaces:
            for metric in metrics:
                ae = cells.get(metric, {}).get((dataset, s, "ae"), Cell())
                ar = cells.get(metric, {}).get((dataset, s, "ar"), Cell())
                p, n = paired_test(ae, ar)
                if p is None:
                    continue
                diff = improvement(ae.mean, ar.mean)
                body.append(
                    [
                        Styled(dataset),
                        Styled(s),
                        Styled(short(metric)),
                        Styled(ae.text()),
                        Styled(ar.text()),
                        Styled("–" if diff is None else f"{100 * diff:+.2f}%"),
                        Styled(f"{p:.4g}"),
                        Styled(str(n)),
                    ]
                )
    if not body:
        return None
    header = [["Dataset", "Space", "Metric", "AE", "AR", "AR vs AE", "p (paired t)", "n seeds"]]
    return Table("Paired comparison over seeds (two-sided paired t-test, AR vs AE)", header, body)


# ----------------------------------------------------------------------------------------------------------
# Rendering


def render(reports: list[Report], fmt: str, headline: str = "ndcg@10") -> str:
    """Every report's tables, then the verdicts, then the sources of every cell."""
    tables = [t for r in reports for t in r.tables]
    verdicts = [v for r in reports for v in r.verdicts]
    sources = sources_table(reports, headline)
    if fmt == "md":
        parts = (
            [_md(t) for t in tables]
            + (["## Verdict\n\n" + "\n".join(f"- {v}" for v in verdicts)] if verdicts else [])
            + [_md(sources)]
        )
        return "\n\n".join(parts) + "\n"
    if fmt == "latex":
        return (
            "\n\n".join(_latex(t) for t in tables)
            + "\n"
            + "".join(f"% {v}\n" for v in verdicts)
            + "\n"
            + _latex(sources)
            + "\n"
        )
    if fmt == "html":
        body = "\n".join(_html(t) for t in tables)
        items = "".join(f"<li>{html.escape(v)}</li>" for v in verdicts)
        return (
            f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>ModSAR report</title></head><body>\n'
            f"{body}\n<h2>Verdict</h2><ul>{items}</ul>\n{_html(sources)}\n</body></html>\n"
        )
    if fmt == "csv":
        return "\n".join(_csv(t) for t in [*tables, sources])
    raise ModsarError(f"unknown --format '{fmt}'; choose md, latex, csv or html")


def _flat_header(t: Table) -> list[str]:
    """One header row: two-row headers (space over AE/AR) are joined cell by cell."""
    if len(t.header) == 1:
        return t.header[0]
    return [f"{a} {b}".strip() for a, b in zip(t.header[0], t.header[1], strict=True)]


def _md(t: Table) -> str:
    def fmt(c: Styled) -> str:
        text = c.text
        if c.underline:
            text = f"<u>{text}</u>"
        return f"**{text}**" if c.bold else text

    header = _flat_header(t)
    lines = [f"## {t.title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in t.rows]
    return "\n".join(lines)


def _latex_escape(text: str) -> str:
    for a, b in (
        ("\\", r"\textbackslash{}"),
        ("&", r"\&"),
        ("%", r"\%"),
        ("_", r"\_"),
        ("#", r"\#"),
        ("±", r"$\pm$"),
        ("–", "--"),
    ):
        text = text.replace(a, b)
    return text


def _latex(t: Table) -> str:
    def fmt(c: Styled) -> str:
        text = _latex_escape(c.text)
        if c.underline:
            text = rf"\underline{{{text}}}"
        return rf"\textbf{{{text}}}" if c.bold else text

    ncols = len(t.rows[0]) if t.rows else len(t.header[0])
    lines = [f"% {t.title}", r"\begin{tabular}{" + "l" * 2 + "c" * (ncols - 2) + "}", r"\toprule"]
    for h in t.header:
        lines.append(" & ".join(_latex_escape(x) for x in h) + r" \\")
    lines.append(r"\midrule")
    lines += [" & ".join(fmt(c) for c in row) + r" \\" for row in t.rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def _html(t: Table) -> str:
    def fmt(c: Styled) -> str:
        text = html.escape(c.text)
        if c.underline:
            text = f"<u>{text}</u>"
        return f"<b>{text}</b>" if c.bold else text

    head = "".join("<tr>" + "".join(f"<th>{html.escape(x)}</th>" for x in h) + "</tr>" for h in t.header)
    body = "".join("<tr>" + "".join(f"<td>{fmt(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    return f'<h2>{html.escape(t.title)}</h2>\n<table border="1"><thead>{head}</thead><tbody>{body}</tbody></table>'


def _csv(t: Table) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["table", *_flat_header(t)])
    for row in t.rows:
        writer.writerow([t.title, *[c.text for c in row]])
    return out.getvalue()


# ----------------------------------------------------------------------------------------------------------
# Verdicts and plots


def verdicts(
    rows: pd.DataFrame, cells: dict, datasets: list[str], spaces: list[str], metric: str
) -> list[str]:
    lines = []
    for dataset in datasets:
        pairs = [
            (s, cells.get(metric, {}).get((dataset, s, "ae")), cells.get(metric, {}).get((dataset, s, "ar")))
            for s in spaces
        ]
        pairs = [
            (s, ae, ar) for s, ae, ar in pairs if ae and ar and ae.mean is not None and ar.mean is not None
        ]
        failed = [
            f"{s} {t.upper()} {len(c.failed)} of {c.n + len(c.failed)}"
            for (d, s, t), c in sorted(cells.get(metric, {}).items())
            if d == dataset and c.failed
        ]
        failed_text = (
            "; † seed re-runs that diverged or failed have no value in their cell: " + ", ".join(failed)
            if failed
            else ""
        )
        if not pairs:
            lines.append(
                f"{dataset}: no design choice has both an AE and an AR result on test {short(metric)}"
                + failed_text
            )
            continue
        ar_wins = sum(ar.mean > ae.mean for _, ae, ar in pairs)
        best_ae, best_ar = max(ae.mean for _, ae, _ in pairs), max(ar.mean for _, _, ar in pairs)
        gain = improvement(best_ae, best_ar)
        winner = "AR" if best_ar > best_ae else ("AE" if best_ae > best_ar else "neither")
        trials = int(
            ((rows["dataset"] == dataset) & (rows["role"] == "search") & rows["space"].isin(spaces)).sum()
        )
        seeds = max((max(ae.n, ar.n) for _, ae, ar in pairs), default=0)
        gain_text = "" if gain is None else f" ({100 * gain:+.1f}% AR over AE)"
        leaders = {
            "AE": max((ae for _, ae, _ in pairs), key=lambda c: c.mean),
            "AR": max((ar for _, _, ar in pairs), key=lambda c: c.mean),
        }
        unfinished = [
            f"{name} ({epochs})" for name, cell in leaders.items() if (epochs := improving_at_end(rows, cell))
        ]
        unfinished_text = (
            f"; still improving at the last epoch of its budget: {', '.join(unfinished)}, so more "
            "epochs may change this verdict"
            if unfinished
            else ""
        )
        best = optimum(rows[rows["dataset"] == dataset], metric)
        best_text = (
            ""
            if best is None
            else f"; of the Bayes-optimal {best:.4f}, best AR reaches "
            f"{100 * best_ar / best:.0f}% and best AE {100 * best_ae / best:.0f}%"
        )
        lines.append(
            f"{dataset}: {winner} wins on test {short(metric)}: best AR {best_ar:.4f} vs best AE "
            f"{best_ae:.4f}{gain_text}; AR ahead in {ar_wins} of {len(pairs)} design choices; "
            f"{trials} search trials, {seeds} seed(s) per cell{best_text}{unfinished_text}{failed_text}"
        )
    return lines


def improving_at_end(rows: pd.DataFrame, cell: Cell) -> str | None:
    """ "60 of 60" when a row behind `cell` had its best validation epoch at the last epoch of its budget:
    it had not converged, and a verdict resting on it says so."""
    if not {"best_epoch", "train.max_epochs"} <= set(rows):
        return None
    behind = rows[rows["trial_id"].isin(cell.trials) & (rows["best_epoch"] >= rows["train.max_epochs"])]
    if not len(behind):
        return None
    return f"{int(behind['best_epoch'].iloc[0])} of {int(behind['train.max_epochs'].iloc[0])} epochs"


def optimum(rows: pd.DataFrame, metric: str) -> float | None:
    """The best achievable test `metric` of a generated dataset with a planted model (rows carry it), when
    every row was evaluated the way it was computed: full ranking, no seen-item filter."""
    needed = ("dataset_optimum", "eval.filter_seen", "eval.sampled_negatives")
    if not len(rows) or any(c not in rows for c in needed) or rows["dataset_optimum"].isna().any():
        return None
    if (rows["eval.filter_seen"] != "none").any() or (rows["eval.sampled_negatives"] != 0).any():
        return None
    values = {json.loads(text).get(metric) for text in rows["dataset_optimum"]}
    return values.pop() if len(values) == 1 and None not in values else None


def plot_all(
    rows: pd.DataFrame, cells: dict, datasets: list[str], spaces: list[str], metric: str, out: Path
) -> list[Path]:
    plt = pyplot()
    written = []
    for dataset in datasets:  # AE vs AR bars per design choice
        fig, ax = plt.subplots(figsize=(max(4, 1.4 * len(spaces)), 3.2))
        x = np.arange(len(spaces))
        for offset, task in ((-0.2, "ae"), (0.2, "ar")):
            vals = [cells.get(metric, {}).get((dataset, s, task), Cell()) for s in spaces]
            ax.bar(
                x + offset,
                [v.mean if v.mean is not None else math.nan for v in vals],
                0.4,
                label=task.upper(),
                yerr=[v.std or 0 for v in vals],
            )
        ax.set_xticks(x, spaces, rotation=20, ha="right")
        ax.set_ylabel(f"test {short(metric)}")
        ax.set_title(f"{dataset}: AE vs AR")
        ax.legend()
        fig.tight_layout()
        written.append(save_figure(fig, out / f"bars_{dataset}_{metric.replace('@', '')}.png"))
    for experiment, group in rows[rows["role"] == "search"].groupby("experiment"):  # learning curves
        if "curve" not in group:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for _, r in group.iterrows():
            curve = json.loads(r["curve"]) if isinstance(r["curve"], str) else []
            if curve:
                xs, ys = zip(*curve, strict=True)
                style = "-" if r["status"] == "finished" else ":"
                ax.plot(xs, ys, style, color="tab:orange" if r["task"] == "ar" else "tab:blue", alpha=0.7)
        ax.set_xlabel("epoch")
        ax.set_ylabel("validation metric")
        ax.set_title(f"{experiment} (blue AE, orange AR; dotted: stopped by ASHA)", fontsize=8)
        fig.tight_layout()
        written.append(save_figure(fig, out / f"curves_{experiment}.png"))
    fig, ax = plt.subplots(figsize=(max(4, 1.4 * len(spaces)), 3.2))  # AR-over-AE improvement per choice
    width = 0.8 / max(1, len(datasets))
    for i, dataset in enumerate(datasets):
        gains = [
            improvement(
                cells.get(metric, {}).get((dataset, s, "ae"), Cell()).mean,
                cells.get(metric, {}).get((dataset, s, "ar"), Cell()).mean,
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
    written.append(save_figure(fig, out / f"improvement_{metric.replace('@', '')}.png"))
    return written


# ----------------------------------------------------------------------------------------------------------


@dataclass
class Report:
    """The tables of one set of experiments that do not overlap (no two cover the same dataset and space)."""

    experiment: str | None  # set when the report is split per experiment
    rows: pd.DataFrame
    tables: list[Table]
    verdicts: list[str]
    cells: dict
    datasets: list[str]
    spaces: list[str]


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


def protocol_line(rows: pd.DataFrame) -> str | None:
    """How the data was cut and viewed, when it is not the default (leave-one-out over users)."""
    parts = []
    if "data.view" in rows and (rows["data.view"].fillna("user") != "user").any():
        parts.append("data.view=item (sequences are items; the model predicts the next user)")
    if "data.split" in rows and (rows["data.split"].fillna("loo") == "temporal").any():
        temporal = rows[rows["data.split"] == "temporal"].iloc[0]
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
        parts.append(
            f"data.split=temporal (one global cut at {cuts}{at}; targets: {temporal['data.split_targets']} "
            f"event(s) after each cut per user{counted})"
        )
    return "protocol: " + "; ".join(parts) if parts else None


PROTOCOL_DEFAULTS = {
    "data.view": "user",
    "data.split": "loo",
    "data.split_valid": 0.8,
    "data.split_test": 0.9,
    "data.split_dates": "",
    "data.split_targets": "first",
}  # rows written before these keys


def _protocol(rows: pd.DataFrame, column: str) -> pd.Series:
    """A PROTOCOL column as comparable text (a row without it has the default); the sampling seed only where
    negatives were sampled."""
    values = rows[column].fillna(PROTOCOL_DEFAULTS.get(column, "none")).astype(str)
    if column == "eval.sample_seed" and "eval.sampled_negatives" in rows:
        values = values.where(rows["eval.sampled_negatives"].fillna(0) > 0, "unused")
    return values


def build_reports(
    rows: pd.DataFrame, metrics: list[str] | None = None, headline: str = "ndcg@10"
) -> list[Report]:
    """One Report for all rows, or one per experiment when experiments cannot share tables: two cover the same
    (dataset, space), or two on one dataset were ranked differently or on different data (PROTOCOL)."""
    if not len(rows):
        raise ModsarError(
            "no trial rows to report on; run `modsar search` first or check --results/--experiment"
        )
    reason = _why_separate(rows)
    if reason is None:
        return [_build(rows, metrics, headline, None)]
    reports = [
        _build(group, metrics, headline, experiment) for experiment, group in rows.groupby("experiment")
    ]
    reports[0].verdicts.insert(0, f"each experiment is reported on its own: {reason}")
    return reports


def _why_separate(rows: pd.DataFrame) -> str | None:
    """Why these rows' experiments must not share tables (None: they may, as the paper's tables do)."""
    for (dataset, space), group in rows.groupby(["dataset", "space"]):
        if group["experiment"].nunique() > 1:
            names = ", ".join(sorted(group["experiment"].unique()))
            return f"{names} all cover {dataset} / {space}"
    for dataset, group in rows.groupby("dataset"):
        for column in (c for c in PROTOCOL if c in group):
            values = (
                _protocol(group, column).groupby(group["experiment"]).agg(lambda v: tuple(sorted(v.unique())))
            )
            if values.nunique() > 1:
                shown = "; ".join(f"{e}: {', '.join(v)}" for e, v in values.items())
                return f"on {dataset} they differ in {column} ({shown})"
    return None


def _build(rows: pd.DataFrame, metrics: list[str] | None, headline: str, experiment: str | None) -> Report:
    metrics = metrics or METRICS
    cells = {m: collect(rows, m) for m in {*metrics, headline}}
    datasets = sorted(rows["dataset"].dropna().unique())
    arms = with_arms(rows)
    comparisons = sorted(arms.loc[~arms["arm"].isin(TASKS), "space"].dropna().unique())  # spaces of models
    present = [s for s in sorted(rows["space"].dropna().unique()) if s not in comparisons]
    hf = [s for s in present if s.startswith("hf_")]
    modular = [s for s in TABLE5 if s in present] + [
        s for s in present if s not in TABLE5 and s != "vanilla" and not s.startswith("hf_")
    ]
    prefix = f"{experiment}: " if experiment else ""
    tables = []
    if "vanilla" in present:
        tables.append(
            design_table(f"{prefix}Table 4: vanilla AE vs AR", cells, datasets, ["vanilla"], metrics, False)
        )
    if modular:
        tables.append(
            design_table(f"{prefix}Table 5: design choices", cells, datasets, modular, metrics, True)
        )
    if hf:
        tables.append(
            design_table(f"{prefix}Table 6: HuggingFace backbones", cells, datasets, hf, metrics, True)
        )
    for space in comparisons:
        tables.append(models_table(f"{prefix}{space}: one row per model", cells, datasets, space, metrics))
    if (
        rollouts := generation_table(
            f"{prefix}Generative evaluation: greedy rollouts of the selected models "
            "(modsar/evaluation/rollouts.py; H = steps, H gen/true in bits)",
            rows,
        )
    ) is not None:
        tables.append(rollouts)
    all_spaces = (["vanilla"] if "vanilla" in present else []) + modular + hf
    sig = significance_table(cells, datasets, all_spaces, metrics)
    if sig:
        sig.title = prefix + sig.title
        tables.append(sig)
    lines = [prefix + v for v in verdicts(rows, cells, datasets, all_spaces, headline)] if all_spaces else []
    lines += [prefix + v for space in comparisons for v in model_verdicts(cells, datasets, space, headline)]
    if (protocol := protocol_line(rows)) is not None:
        lines.insert(0, prefix + protocol)
    if (plateau := plateau_line(rows, cells.get(headline, {}))) is not None:
        lines.append(prefix + plateau)
    return Report(experiment, rows, tables, lines, cells, datasets, all_spaces)


def plateau_line(rows: pd.DataFrame, cells: dict) -> str | None:
    """Names the cells whose trials never left the popularity level (rows record `escape_steps`, empty when
    validation never reached train.PLATEAU_FACTOR x the most-popular ranking's value): a verdict that rests on
    them ranks plateaus (docs/training.md#plateau). Rows written before steps were recorded are not judged."""
    if not {"escape_steps", "popularity_level"} <= set(rows):
        return None
    stuck = []
    for key, cell in sorted(cells.items()):
        behind = rows[rows["trial_id"].isin(cell.trials) & rows["popularity_level"].notna()]
        never = behind[behind["escape_steps"].isna()]
        if len(never):
            row = never.iloc[0]
            monitor = f"valid.{TrainConfig(monitor=row['train.monitor']).monitor_key}"
            best = (
                f"best valid {short(row['train.monitor'])} {row[monitor]:.4f} vs " if monitor in row else ""
            )
            stuck.append(
                f"{_where(key)} ({len(never)} of {len(behind)} runs; {best}most-popular "
                f"{row['popularity_level']:.4f})"
            )
    if not stuck:
        return None
    return (
        "on the popularity plateau: "
        + ", ".join(stuck)
        + ": validation never reached 1.25x the most-popular "
        "ranking's, so a verdict resting on these compares plateaus; give them more optimizer steps "
        "(train.min_steps, a scheduler in steps: docs/training.md#plateau)"
    )


def sources_table(reports: list[Report], headline: str) -> Table:
    """Where every cell comes from: experiment, trial ids and seeds (the headline metric's cells)."""
    body = []
    for report in reports:
        for (dataset, space, arm), cell in sorted(report.cells.get(headline, {}).items()):
            failed = f"; no value (diverged or failed): {' '.join(cell.failed)}" if cell.failed else ""
            body.append(
                [
                    Styled(cell.experiment),
                    Styled(dataset),
                    Styled(space),
                    Styled(arm.upper() if arm in TASKS else arm),
                    Styled(cell.kind + failed),
                    Styled(" ".join(cell.trials)),
                    Styled(" ".join(str(s) for s in cell.values)),
                ]
            )
    header = [["Experiment", "Dataset", "Space", "Task / model", "Rows", "Trial ids", "Seeds"]]
    return Table("Sources", header, body)
