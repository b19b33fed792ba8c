"""What `modsar analyze` prints and writes: ModSAR Tables 2-3 side by side, the residual-dominance summary,
Parquet tables and the figures (heatmaps, spectra, residual-scaling and recovery curves)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from modsar.analysis.analyze import Analysis
from modsar.errors import ModsarError
from modsar.model.registry import paper_names
from modsar.outputs import pyplot, save_figure, write_parquet
from modsar.task import Task

PAPER_TABLES_2_3 = (
    "ModSAR paper, mean of 5 datasets: Vanilla-AE S .022 k 5.4 | Local-AE S .018 k 10.6 | "
    "Vanilla-AR S .016 k 8.6 (lower S = sparser)"
)


# Residual-dominance paper Table 2: mixing ratios Attn / +Res / +LN (the paper does not say over which
# positions it averages; benchmarks/RESULTS.md compares them with ours pooled, without position 1 and at L)
PAPER_TABLE_2 = {
    ("SASRec", "beauty"): (0.776, 0.119, 0.119),
    ("SASRec", "sports"): (0.775, 0.126, 0.122),
    ("SASRec", "toys"): (0.772, 0.123, 0.123),
    ("SASRec", "video"): (0.798, 0.169, 0.169),
    ("SASRec", "diginetica"): (0.721, 0.150, 0.149),
    ("DuoRec", "beauty"): (0.776, 0.116, 0.115),
    ("DuoRec", "sports"): (0.790, 0.119, 0.119),
    ("DuoRec", "toys"): (0.780, 0.121, 0.121),
    ("DuoRec", "video"): (0.773, 0.170, 0.170),
    ("DuoRec", "diginetica"): (0.724, 0.152, 0.151),
}


def model_name(a: Analysis) -> str:
    """The label without the "(dataset)" that tells two of one kind apart."""
    return a.label.split(" (")[0]


def paper_order(a: Analysis) -> tuple:
    """ModSAR's order (Vanilla-AE, Local-AE, Vanilla-AR, Local-AR), or the residual paper's (SASRec, DuoRec,
    BSARec, BERT4Rec, GRU4Rec), then the dataset."""
    names = [n.name for n in paper_names()]
    name = model_name(a)
    return (names.index(name) if name in names else len(names), a.task, "Vanilla" not in name, a.dataset)


def load(folder: Path) -> list[Analysis]:
    """The analyses an earlier `modsar analyze --out` folder holds, to show again beside others without
    recomputing them (a full-ranking analysis of a large dataset takes minutes per model). Labels lose the
    dataset suffix they were given to be told apart; notes are not stored."""
    path = folder / "diagnostics.parquet"
    if not path.is_file():
        raise ModsarError(
            f"{folder}: no diagnostics.parquet; pass a folder written by `modsar analyze --out`"
        )
    try:
        table = pd.read_parquet(path)
        extra = {
            name: pd.read_parquet(folder / f"{name}.parquet")
            if (folder / f"{name}.parquet").is_file()
            else pd.DataFrame()
            for name in ("attention_maps", "spectra")
        }
    except Exception as error:  # a truncated or foreign file: say which
        raise ModsarError(
            f"{path}: not readable as a modsar analyze table ({type(error).__name__})"
        ) from None
    missing = {
        "model",
        "dataset",
        "task",
        "backbone",
        "checkpoint",
        "diagnostic",
        "quantity",
        "layer",
        "alpha",
        "value",
    } - set(table)
    if missing:
        raise ModsarError(f"{path}: not a modsar analyze table (no {', '.join(sorted(missing))} column)")

    def of(frame: pd.DataFrame, model: str) -> pd.DataFrame:
        return frame[frame["model"] == model].reset_index(drop=True) if "model" in frame else pd.DataFrame()

    analyses = []
    for model, rows in table.groupby("model", sort=False):
        dataset, suffix = str(rows["dataset"].iloc[0]), f" ({rows['dataset'].iloc[0]})"
        label = str(model)[: -len(suffix)] if str(model).endswith(suffix) else str(model)
        analyses.append(
            Analysis(
                label,
                dataset,
                Task(str(rows["task"].iloc[0])),
                rows.reset_index(drop=True),
                of(extra["attention_maps"], str(model)),
                of(extra["spectra"], str(model)),
            )
        )
    return analyses


def _value(table: pd.DataFrame, diagnostic: str, quantity: str, layer: str = "all", alpha: float = 1.0):
    hit = table[
        (table["diagnostic"] == diagnostic)
        & (table["quantity"] == quantity)
        & (table["layer"] == layer)
        & (table["alpha"] == alpha)
    ]
    return float(hit["value"].iloc[0]) if len(hit) else np.nan


def _first(table: pd.DataFrame, diagnostic: str, prefix: str) -> str | None:
    names = table.loc[table["diagnostic"] == diagnostic, "quantity"]
    return next((q for q in names if q.startswith(prefix)), None)


def tables_2_3(analyses: list[Analysis]) -> pd.DataFrame:
    """One row per model: S and k per layer and on average (ModSAR Tables 2-3), plus GD rank and eff. rank."""
    rows = {}
    for a in analyses:
        t, row = a.table, dict[str, Any]()
        s_name, k_name = _first(t, "sparsity", "S "), _first(t, "rank", "k modsar_eq8")
        gd_name, eff_name = _first(t, "rank", "k gd_unknown_sigma"), _first(t, "rank", "effective rank")
        layers = sorted({x for x in t["layer"] if x != "all"}, key=int)
        for label, name, diagnostic in (("S", s_name, "sparsity"), ("k", k_name, "rank")):
            if name:
                row |= {f"{label} layer {x}": _value(t, diagnostic, name, x) for x in layers}
                row[f"{label} avg."] = _value(t, diagnostic, name)
        if gd_name:
            row["k GD avg."] = _value(t, "rank", gd_name)
        if eff_name:
            row["eff. rank avg."] = _value(t, "rank", eff_name)
        if row:
            rows[a.label] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def reliance(analyses: list[Analysis]) -> pd.DataFrame:
    """One row per model: HRLI vs HRL2I, shuffle NDCG@10 and pooled mixing ratios."""
    columns = {
        "HRLI@1": ("hrli", "hrli@1"),
        "HRL2I@1": ("hrli", "hrl2i@1"),  # then their gap
        "HRLI@1 filt.": ("hrli", "hrli@1 filtered"),
        "HRL2I@1 filt.": ("hrli", "hrl2i@1 filtered"),
        "NDCG@10": ("shuffle", "ndcg@10 original"),
        "partial": ("shuffle", "ndcg@10 partial"),
        "full": ("shuffle", "ndcg@10 full"),
        "mix Attn": ("mixing", "mixing_attn"),
        "mix +Res": ("mixing", "mixing_res"),
        "mix +LN": ("mixing", "mixing_ln"),
    }
    rows = {}
    for a in analyses:
        row = {name: _value(a.table, *key) for name, key in columns.items()}
        rows[a.label] = {
            **dict(list(row.items())[:2]),
            "gap": row["HRLI@1"] - row["HRL2I@1"],
            **dict(list(row.items())[2:]),
        }
    frame = pd.DataFrame.from_dict(rows, orient="index")
    return frame.dropna(axis=1, how="all")


def with_dataset(a: Analysis) -> str:
    """The analysis's unique label with its dataset: "SASRec (toys)", "Vanilla-AR (toys)",
    "Vanilla-AR (ar-1a2b, toys)"."""
    if a.label.endswith(f"({a.dataset})"):
        return a.label
    return f"{a.label[:-1]}, {a.dataset})" if a.label.endswith(")") else f"{a.label} ({a.dataset})"


def residual_table_2(analyses: list[Analysis]) -> pd.DataFrame:
    """SASRec and DuoRec mixing rows (pooled over positions and layers) with the paper's where it has them."""
    rows = {}
    for a in analyses:
        name = model_name(a)
        if name not in ("SASRec", "DuoRec", "Vanilla-AR") or not (a.table["diagnostic"] == "mixing").any():
            continue
        ours = [_value(a.table, "mixing", q) for q in ("mixing_attn", "mixing_res", "mixing_ln")]
        paper = PAPER_TABLE_2.get(("SASRec" if name == "Vanilla-AR" else name, a.dataset), (np.nan,) * 3)
        rows[with_dataset(a)] = dict(
            zip(
                ["Attn", "+Res", "+LN", "paper Attn", "paper +Res", "paper +LN"], [*ours, *paper], strict=True
            )
        )
    return pd.DataFrame.from_dict(rows, orient="index")


def summary(analyses: list[Analysis]) -> str:
    """The printed comparison: Tables 2-3, reliance, the alpha sweep, then every remaining figure."""
    fmt = {"float_format": lambda v: f"{v:.4f}", "na_rep": "–"}
    parts = []
    t23 = _tables_2_3_text(analyses, fmt)
    if t23:
        parts.append(t23)
    rel = reliance(analyses)
    if rel.shape[1]:
        parts.append(
            "Last-item reliance (HRLI@1 vs HRL2I@1; filt. = seen items removed except the probe; "
            "gap = HRLI@1 - HRL2I@1),\nshuffle NDCG@10 (original / partial / full) and pooled mixing "
            "ratios (Attn / +Res / +LN):\n"
            + rel.to_string(**fmt)
            + ("\nResidual paper, SASRec on Toys: mixing .772 / .123 / .123" if "mix Attn" in rel else "")
        )
    table_2 = residual_table_2(analyses)
    if len(table_2):
        parts.append(
            "Residual-dominance paper Table 2: pooled mixing ratios Attn / +Res / +LN, ours beside the "
            "paper's\n" + table_2.to_string(**fmt)
        )
    sweep = pd.concat(
        [a.table[a.table["diagnostic"] == "residual-scaling"].assign(model=a.label) for a in analyses]
    )
    if len(sweep):
        wide = sweep.pivot_table(index="alpha", columns=["model", "quantity"], values="value", sort=False)
        parts.append(
            "Residual scaling (alpha on the attention skip, at inference):\n" + wide.to_string(**fmt)
        )
    others = _other_figures_text(analyses, fmt)
    if others:
        parts.append(others)
    notes = [n for a in analyses for n in a.notes]
    return "\n\n".join(parts + (["Notes:\n" + "\n".join(f"- {n}" for n in notes)] if notes else []))


def _tables_2_3_text(analyses: list[Analysis], fmt: dict[str, Any]) -> str | None:
    """Tables 2-3 as printed, with where S and k were measured and the paper's values below; None when no
    analysis has sparsity or rank rows."""
    t23 = tables_2_3(analyses)
    if not len(t23):
        return None
    datasets = sorted({a.dataset for a in analyses})
    counts = {"formatters": {c: "{:.2f}".format for c in t23 if c.startswith(("k ", "eff."))}}
    first = next(a for a in analyses if a.label in t23.index)
    where = _first(first.table, "sparsity", "S ") or _first(first.table, "rank", "k modsar_eq8")
    measured = where[where.index("(") + 1 : -1] if where else "no sparsity or rank rows"
    return (
        f"ModSAR Tables 2-3 on {', '.join(datasets)}: attention sparsity S and hard-threshold rank k\n"
        f"({measured}; k = ModSAR Eq. 8, GD = Gavish-Donoho unknown sigma)\n"
        + t23.to_string(**fmt, **counts)
        + f"\n{PAPER_TABLES_2_3}"
    )


def _other_figures_text(analyses: list[Analysis], fmt: dict[str, Any]) -> str | None:
    """Every figure the sections above do not show, one column per model, in the order computed (alpha
    ascending within a quantity); None when there is none."""
    shown = {("hrli", q) for q in ("hrli@1", "hrl2i@1", "hrli@1 filtered", "hrl2i@1 filtered")}
    shown |= {("shuffle", q) for q in ("ndcg@10 original", "ndcg@10 partial", "ndcg@10 full")}
    shown |= {("mixing", q) for q in ("mixing_attn", "mixing_res", "mixing_ln")}
    rest = pd.concat([a.table.assign(model=a.label) for a in analyses])
    keep = [
        (d, q) not in shown and d not in ("sparsity", "rank", "residual-scaling")
        for d, q in zip(rest["diagnostic"], rest["quantity"], strict=True)
    ]
    rest = rest[keep]
    if not len(rest):
        return None
    wide = rest.pivot_table(
        index=["diagnostic", "quantity", "layer", "alpha"], columns="model", values="value", sort=False
    )
    first_seen = {
        name: {v: i for i, v in enumerate(dict.fromkeys(rest[name]))} for name in ("diagnostic", "quantity")
    }
    wide = wide.sort_index(
        key=lambda level: level.map(first_seen[level.name]) if level.name in first_seen else level
    )  # as computed, with alpha ascending within a quantity
    return "Other figures:\n" + wide.to_string(**fmt)


def write(analyses: list[Analysis], out: Path) -> list[Path]:
    """diagnostics.parquet (every figure), attention_maps.parquet and spectra.parquet, and the PNG plots."""
    written = [
        write_parquet(pd.concat([a.table for a in analyses], ignore_index=True), out / "diagnostics.parquet")
    ]
    for name, frames in (
        ("attention_maps", [a.maps for a in analyses]),
        ("spectra", [a.spectra for a in analyses]),
    ):
        frames = [f for f in frames if len(f)]
        if frames:
            written.append(write_parquet(pd.concat(frames, ignore_index=True), out / f"{name}.parquet"))
    return written + plot(analyses, out)


def _rows_of(analyses: list[Analysis], diagnostic: str) -> list[tuple[Analysis, pd.DataFrame]]:
    """(analysis, its rows of `diagnostic`) for the analyses that have any."""
    pairs = [(a, a.table[a.table["diagnostic"] == diagnostic]) for a in analyses]
    return [(a, rows) for a, rows in pairs if len(rows)]


def plot(analyses: list[Analysis], out: Path) -> list[Path]:
    """The PNG figures of the analyses that have the rows for each: attention heatmaps and singular values,
    residual scaling, last-item reliance and recovery curves. Returns the files written."""
    plt = pyplot()
    written = []
    with_maps = [a for a in analyses if len(a.maps)]
    if with_maps:
        layers = max(a.maps["layer"].max() for a in with_maps) + 1
        written.append(_plot_heatmaps(plt, with_maps, layers, out))
        written.append(_plot_spectra(plt, with_maps, layers, out))
    sweeps = _rows_of(analyses, "residual-scaling")
    if sweeps:
        written.append(_plot_residual_scaling(plt, sweeps, out))
    reliance_rows = _rows_of(analyses, "hrli")
    if reliance_rows:
        written.append(_plot_reliance(plt, reliance_rows, out))
    curves = [
        (a, c) for a, c in _rows_of(analyses, "recovery") if c["quantity"].eq("recovery rate (test)").any()
    ]
    if curves:  # a model without a skip to scale has only its set R: no curve
        written.append(_plot_recovery(plt, curves, out))
    return written


def _plot_heatmaps(plt: Any, with_maps: list[Analysis], layers: int, out: Path) -> Path:
    """attention_heatmaps.png: one column per model, one row per layer, one shared colour scale."""
    top = max(a.maps["value"].max() for a in with_maps)
    fig, axes = plt.subplots(
        layers,
        len(with_maps),
        figsize=(2.9 * len(with_maps) + 1, 3 * layers),
        squeeze=False,
        constrained_layout=True,
    )
    image = None
    for col, a in enumerate(with_maps):
        for layer in range(layers):
            ax = axes[layer][col]
            cells = a.maps[a.maps["layer"] == layer]
            if not len(cells):
                ax.axis("off")
                continue
            image = _heatmap(ax, a, layer, cells, top)
            if layer == layers - 1:
                ax.set_xlabel("key (To)", fontsize=7)
            if col == 0:
                ax.set_ylabel("query (From)", fontsize=7)
    fig.colorbar(image, ax=axes, shrink=0.8)
    return save_figure(fig, out / "attention_heatmaps.png")


def _heatmap(ax: Any, a: Analysis, layer: int, cells: pd.DataFrame, top: float) -> Any:
    """One layer's attention map of one model, titled with its user's sparsity S and rank k."""
    size = int(cells["query"].max()) + 1
    grid = np.zeros((size, size))
    grid[cells["query"], cells["key"]] = cells["value"]
    image = ax.imshow(grid, vmin=0, vmax=top, cmap="viridis")
    facts = a.spectra[a.spectra["layer"] == layer].iloc[0]
    ax.set_title(
        f"{a.label}, layer {layer}\nuser {int(facts['user'])}: S={facts['sparsity']:.4f}, "
        f"k={int(facts['rank'])}",
        fontsize=8,
    )
    ticks = range(0, size, 5)
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.tick_params(labelsize=6)
    return image


def _plot_spectra(plt: Any, with_maps: list[Analysis], layers: int, out: Path) -> Path:
    """singular_values.png: per layer, one user's spectrum with its threshold tau, and the mean spectrum."""
    fig, axes = plt.subplots(2, layers, figsize=(4 * layers, 6), squeeze=False)
    for i, a in enumerate(with_maps):
        colour = f"C{i}"
        for layer, group in a.spectra.groupby("layer"):
            top_ax, mean_ax = axes[0][layer], axes[1][layer]
            top_ax.plot(
                group["index"], group["singular value"], marker="o", ms=3, color=colour, label=a.label
            )
            top_ax.axhline(group["tau"].iloc[0], color=colour, ls="--", lw=0.8)
            mean_ax.plot(
                group["index"], group["mean singular value"], marker=".", color=colour, label=a.label
            )
            top_ax.set_title(
                f"layer {layer}: user {int(group['user'].iloc[0])} (dashed: tau, Eq. 8)", fontsize=8
            )
            mean_ax.set_title(f"layer {layer}: mean sorted spectrum over test users", fontsize=8)
    for ax in axes.ravel():
        ax.set_xlabel("index", fontsize=7)
        ax.set_ylabel("singular value", fontsize=7)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out / "singular_values.png")


def _plot_residual_scaling(plt: Any, sweeps: list[tuple[Analysis, pd.DataFrame]], out: Path) -> Path:
    """residual_scaling.png: per model, every quantity against alpha, and accuracy against HRLI@1."""
    fig, axes = plt.subplots(len(sweeps), 2, figsize=(10, 3.4 * len(sweeps)), squeeze=False)
    for (a, sweep), (ax, trade) in zip(sweeps, axes, strict=True):
        for quantity, group in sweep.groupby("quantity"):
            ax.plot(group["alpha"], group["value"], marker="o", ms=3, label=quantity)
        wide = sweep.pivot_table(index="alpha", columns="quantity", values="value")
        for metric in ("hr@10", "ndcg@10"):
            trade.plot(wide["hrli@1"], wide[metric], marker="o", ms=3, label=metric)
        ax.set_title(f"{a.label}: against alpha", fontsize=9)
        trade.set_title(f"{a.label}: accuracy against HRLI@1 (one point per alpha)", fontsize=9)
        ax.set_xlabel("alpha (attention skip scale)", fontsize=8)
        trade.set_xlabel("HRLI@1", fontsize=8)
        ax.legend(fontsize=7)
        trade.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out / "residual_scaling.png")


def _plot_reliance(plt: Any, reliance_rows: list[tuple[Analysis, pd.DataFrame]], out: Path) -> Path:
    """last_item_reliance.png, the residual paper's Figure 2: HRLI@1 vs HRL2I@1, grouped by model, one
    panel per dataset."""
    datasets = sorted({a.dataset for a, _ in reliance_rows})
    cols = min(3, len(datasets))  # the paper's five datasets: two rows, not one 40-inch strip
    grid_rows = -(-len(datasets) // cols)
    width = max(4.0, 1.1 * len(reliance_rows) / len(datasets) + 2)
    fig, axes = plt.subplots(grid_rows, cols, figsize=(width * cols, 3.4 * grid_rows), squeeze=False)
    for ax in axes.flat[len(datasets) :]:
        ax.set_visible(False)
    for ax, dataset in zip(axes.flat, datasets, strict=False):
        mine = sorted([a for a, _ in reliance_rows if a.dataset == dataset], key=paper_order)
        x = np.arange(len(mine))
        for offset, (quantity, name) in zip(
            (-0.2, 0.2), (("hrli@1", "HRLI@1"), ("hrl2i@1", "HRL2I@1")), strict=True
        ):
            ax.bar(x + offset, [_value(a.table, "hrli", quantity) for a in mine], 0.4, label=name)
        ax.set_xticks(x, [model_name(a) for a in mine], rotation=20, ha="right", fontsize=8)
        ax.set_title(f"{dataset}: last-item reliance (unfiltered)", fontsize=9)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, out / "last_item_reliance.png")


def _plot_recovery(plt: Any, curves: list[tuple[Analysis, pd.DataFrame]], out: Path) -> Path:
    """recovery.png: recovery rate and HR@10 on test against alpha, alpha* chosen on validation dashed."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for i, (a, c) in enumerate(curves):
        for quantity, style in (("recovery rate (test)", "-"), ("hr@10 (test)", ":")):
            g = c[c["quantity"] == quantity]
            ax.plot(
                g["alpha"],
                g["value"],
                ls=style,
                marker="o",
                ms=3,
                color=f"C{i}",
                label=f"{a.label}: {quantity}",
            )
        chosen = c.loc[c["quantity"] == "alpha* (validation, epsilon=0.01)", "value"]
        if len(chosen):
            ax.axvline(float(chosen.iloc[0]), color=f"C{i}", lw=0.8, ls="--")
    ax.set_xlabel("alpha (dashed: alpha* chosen on validation)")
    ax.legend(fontsize=6)
    fig.tight_layout()
    return save_figure(fig, out / "recovery.png")
