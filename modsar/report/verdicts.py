"""The verdict lines under the tables: who wins AE vs AR on each dataset (or which model leads a comparison),
and the facts a reader needs to trust it: seed re-runs that failed, trials still improving at the end of
their budget, the share of a planted optimum reached, cells stuck on the popularity plateau."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pandas as pd

from modsar.config import TrainConfig
from modsar.report.cells import Cell, CellKey, Cells, cell_at, improvement, models, short, where


def verdicts(
    rows: pd.DataFrame,
    cells: Cells,
    datasets: list[str],
    spaces: list[str],
    metric: str,
    notes: Mapping[str, str] | None = None,
    table: str | None = None,
    counted: str = "design choices",
) -> list[str]:
    """One line per dataset: AE or AR, on the best cells of the design choices `spaces` (one table's: the
    paper compares the best AR and AE within a table, never across tables); a dataset's note
    (`incomplete_notes`) comes first. `table` names the table in each line when a report has several, and
    leaves out the datasets with no cell in it; `counted` says what its spaces vary (Table 6's: backbones)."""
    lines = []
    held = {(d, s) for d, s, _ in cells.get(metric, {})}
    for dataset in datasets:
        if table and not any((dataset, s) in held for s in spaces):
            continue  # this dataset has no row in this table: no line
        head = f"{dataset}, {table}: " if table else f"{dataset}: "
        lines.append(
            _noted(_design_verdict(rows, cells, dataset, spaces, metric, head, counted), head, notes, dataset)
        )
    return lines


def incomplete_notes(rows: pd.DataFrame, datasets: list[str], planned: Mapping[str, int]) -> dict[str, str]:
    """Dataset -> "incomplete: N of M trials (search 'x' did not finish); " for the datasets whose rows come
    from a search that is not recorded complete (`planned`: experiment -> trials planned; N counts its search
    rows): a verdict on part of a search says so."""
    notes = {}
    for dataset in datasets:
        mine = rows[rows["dataset"] == dataset]
        unfinished = [name for name in sorted(set(mine["experiment"])) if name in planned]
        notes[dataset] = "".join(
            f"incomplete: {int(((rows['experiment'] == name) & (rows['role'] == 'search')).sum())} of "
            f"{planned[name]} trials (search '{name}' did not finish; `modsar search ... --resume` "
            "continues it); "
            for name in unfinished
        )
    return notes


def _noted(line: str, head: str, notes: Mapping[str, str] | None, dataset: str) -> str:
    """A verdict `line` with `dataset`'s note right after its `head` ("beauty: incomplete: ...; AR wins")."""
    note = (notes or {}).get(dataset, "")
    return head + note + line.removeprefix(head) if note and line.startswith(head) else line


def _design_verdict(
    rows: pd.DataFrame,
    cells: Cells,
    dataset: str,
    spaces: list[str],
    metric: str,
    head: str,
    counted: str,
) -> str:
    """AE vs AR on one dataset: the best AR cell of the table over its best AE cell, as the table's Best
    Improv.; "k of n" counts the design choices (`counted`: Table 6's are backbones) with both sides, and one
    with a side missing is named."""
    candidates = {
        s: (cell_at(cells, metric, (dataset, s, "ae")), cell_at(cells, metric, (dataset, s, "ar")))
        for s in spaces
    }
    pairs = [(ae, ar) for ae, ar in candidates.values() if ae.mean is not None and ar.mean is not None]
    after = _one_sided_text(candidates, counted) + _failed_text(cells.get(metric, {}), dataset, spaces)
    sides = [[c for c in cs if c.mean is not None] for cs in zip(*candidates.values(), strict=True)]
    if not sides[0] or not sides[1]:
        missing = " or ".join(side for side, cs in zip(("AE", "AR"), sides, strict=True) if not cs)
        return f"{head}no verdict on test {short(metric)}: no {missing} result{after}"
    lead_ae, lead_ar = max(sides[0], key=_mean), max(sides[1], key=_mean)
    best_ae, best_ar = _mean(lead_ae), _mean(lead_ar)
    gain = improvement(best_ae, best_ar)
    winner = "AR" if best_ar > best_ae else ("AE" if best_ae > best_ar else "neither")
    ar_wins = sum(_mean(ar) > _mean(ae) for ae, ar in pairs)
    trials = int(
        ((rows["dataset"] == dataset) & (rows["role"] == "search") & rows["space"].isin(spaces)).sum()
    )
    counts = sorted({c.n for c in sides[0] + sides[1]})
    seeds = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    gain_text = "" if gain is None else f" ({100 * gain:+.1f}% AR over AE)"
    best_text = _optimum_text(rows[rows["dataset"] == dataset], metric, best_ae, best_ar)
    return (
        f"{head}{winner} wins on test {short(metric)}: best AR {best_ar:.4f} vs best AE "
        f"{best_ae:.4f}{gain_text}; AR ahead in {ar_wins} of {len(pairs)} {counted}; "
        f"{trials} search trials, {seeds} seed(s) per cell{best_text}"
        f"{_unfinished_text(rows, {'AE': lead_ae, 'AR': lead_ar})}{after}"
    )


def _mean(cell: Cell) -> float:
    """A cell's mean for ranking cells: an empty cell ranks below every value."""
    return cell.mean if cell.mean is not None else float("-inf")


def _one_sided_text(candidates: Mapping[str, tuple[Cell, Cell]], counted: str) -> str:
    """The design choices with a result on one side only (the other side selected nothing, or its search has
    not reached it yet), whose best cells are partial, or ""."""
    one_sided = [
        f"{space} (no {side} result)"
        for space, (ae, ar) in candidates.items()
        if (ae.mean is None) != (ar.mean is None)
        for side in ["AE" if ae.mean is None else "AR"]
    ]
    if not one_sided:
        return ""
    return f"; one side only (not among the {counted} counted): " + ", ".join(one_sided)


def _failed_text(cells: dict[CellKey, Cell], dataset: str, spaces: list[str]) -> str:
    """The cells of `dataset` and `spaces` with seed re-runs that gave no value (their † mark), or ""."""
    failed = [
        f"{s} {t.upper()} {len(c.failed)} of {c.n + len(c.failed)}"
        for (d, s, t), c in sorted(cells.items())
        if d == dataset and s in spaces and c.failed
    ]
    if not failed:
        return ""
    return "; † seed re-runs that diverged or failed have no value in their cell: " + ", ".join(failed)


def _unfinished_text(rows: pd.DataFrame, leaders: dict[str, Cell]) -> str:
    """Which leading cell (AE, AR) rests on a run still improving when its budget ended, or ""."""
    unfinished = [
        f"{name} ({epochs})" for name, cell in leaders.items() if (epochs := improving_at_end(rows, cell))
    ]
    if not unfinished:
        return ""
    return (
        f"; still improving at the last epoch of its budget: {', '.join(unfinished)}, so more "
        "epochs may change this verdict"
    )


def _optimum_text(rows: pd.DataFrame, metric: str, best_ae: float, best_ar: float) -> str:
    """How close the best AE and AR come to a planted optimum, where the rows know one, or ""."""
    best = optimum(rows, metric)
    if best is None:
        return ""
    return (
        f"; of the Bayes-optimal {best:.4f}, best AR reaches "
        f"{100 * best_ar / best:.0f}% and best AE {100 * best_ae / best:.0f}%"
    )


def model_verdicts(
    cells: Cells, datasets: list[str], space: str, metric: str, notes: Mapping[str, str] | None = None
) -> list[str]:
    """One line per dataset of a comparison space: the model that leads on `metric`, beside the others (after
    the dataset's note, `incomplete_notes`)."""
    lines = []
    for dataset in datasets:
        scored = [
            (arm, c, c.mean)
            for arm in models(cells, dataset, space)
            if (c := cell_at(cells, metric, (dataset, space, arm))).mean is not None
        ]
        if not scored:
            continue
        leader = max(scored, key=lambda scores: scores[2])
        seeds = max(c.n for _, c, _ in scored)
        head = f"{dataset} / {space}: "
        line = (
            f"{head}{leader[0]} leads on test {short(metric)} ({leader[2]:.4f}); "
            + ", ".join(f"{arm} {mean:.4f}" for arm, _, mean in scored)
            + f"; {seeds} seed(s) per cell"
        )
        lines.append(_noted(line, head, notes, dataset))
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


def plateau_line(rows: pd.DataFrame, cells: dict[CellKey, Cell]) -> str | None:
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
                f"{where(key)} ({len(never)} of {len(behind)} runs; {best}most-popular "
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


def retrained_line(rows: pd.DataFrame, cells: dict[CellKey, Cell]) -> str | None:
    """Names the cells resting on a selected trial whose checkpoint was gone when it was tested (its search
    went on from its rows on another machine), so its configuration was trained again on its seed, and
    that retraining's validation value differs from the one it was selected on: its test figures are of
    another model than the one selected, a reader must know."""
    if not {"test_from", "test_from_valid"} <= set(rows):
        return None
    differing = []
    for key, cell in sorted(cells.items()):
        behind = rows[rows["trial_id"].isin(cell.trials) & (rows["test_from"] == "retrained")]
        for row in behind.to_dict("records"):
            monitor = f"valid.{TrainConfig(monitor=row['train.monitor']).monitor_key}"
            if monitor not in row or row["test_from_valid"] == row[monitor]:
                continue
            again = "none" if pd.isna(row["test_from_valid"]) else f"{row['test_from_valid']:.4f}"
            differing.append(
                f"{where(key)} (trial {row['trial_id']}: valid {short(row['train.monitor'])} {again} "
                f"retrained, {row[monitor]:.4f} when selected)"
            )
    if not differing:
        return None
    return (
        "tested after training again: " + ", ".join(differing) + ": the selected trial's checkpoint was not "
        "where the search was tested (it went on from its rows on another machine), so its configuration was "
        "trained again on its seed, and another CPU, thread count or device does its sums in another order: "
        "the test figures are of the model trained again (the rows' cpu column names each machine)"
    )
