"""What `modsar data profile` prints and writes: the side-by-side summary, the long Parquet table and the
plots (rank-frequency with both fits, MI decay, permutation entropy by order). The measures: profile.py."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from modsar.data.profile import Corpus


def _finish(fig, ax, xlabel: str, ylabel: str, path: Path, legend_size: int = 7) -> Path:
    from modsar.outputs import save_figure

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    return save_figure(fig, path)


def _signed(value: float) -> str:
    """4 decimals, without the '-0.0000' of a tiny negative estimate."""
    text = f"{value:.4f}"
    return text[1:] if text == "-0.0000" else text


def summary(profiles: list[dict[str, Any]]) -> str:
    """The printed profile: one column per corpus, each measure beside its shuffled baseline."""
    lines = [*_distribution_lines(profiles), *_order_lines(profiles)]
    width = max(len(name) for name, _ in lines)
    columns = [
        max(len(p["dataset"]), *(len(values[j]) for _, values in lines)) for j, p in enumerate(profiles)
    ]
    header = (
        " " * width + "  " + "  ".join(p["dataset"].ljust(w) for p, w in zip(profiles, columns, strict=True))
    )
    body = [
        name.ljust(width) + "  " + "  ".join(v.ljust(w) for v, w in zip(values, columns, strict=True))
        for name, values in lines
    ]
    seconds = ", ".join(f"{p['dataset']} {p['seconds']:.1f} s" for p in profiles)
    return "\n".join(
        [
            header,
            *body,
            f"(shuffled: every sequence's items permuted, seed {profiles[0]['seed']}; profiled in {seconds})",
        ]
    )


def _distribution_lines(profiles: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The summary's rows on what the items are, whatever their order: sizes, Zipf fits, mass, entropy and
    compressibility (the last beside the shuffled baseline)."""

    def pair(p: dict[str, Any], key: str, digits: int = 3) -> str:
        value, shuffled = p[key], p.get(f"{key}_shuffled")
        return f"{value:.{digits}f}" + (f" ({shuffled:.{digits}f})" if shuffled is not None else "")

    return [
        (
            "symbols / sequences / distinct items",
            [f"{p['symbols']:,} / {p['sequences']:,} / {p['distinct_items']:,}" for p in profiles],
        ),
        (
            "Zipf s, OLS (ranks)",
            [
                f"{p['zipf_exponent_ols']:.3f} ({p['zipf_ols_ranks'][0]}-{p['zipf_ols_ranks'][1]})"
                for p in profiles
            ],
        ),
        (
            "Zipf s, power-law MLE (alpha, x_min, KS)",
            [
                f"{p['zipf_exponent_mle']:.3f} ({p['powerlaw_alpha']:.3f}, {p['powerlaw_x_min']:g}, "
                f"{p['powerlaw_ks']:.3f})"
                + (" alpha at its search bound" if p.get("powerlaw_alpha_at_bound") else "")
                for p in profiles
            ],
        ),
        ("top-1% mass", [f"{p['top1pct_mass']:.3f}" for p in profiles]),
        ("unigram entropy, bits", [f"{p['unigram_entropy_bits']:.3f}" for p in profiles]),
        ("lzma bits / symbol (shuffled)", [pair(p, "bits_per_symbol_lzma") for p in profiles]),
        ("zlib bits / symbol (shuffled)", [pair(p, "bits_per_symbol_zlib") for p in profiles]),
    ]


def _order_lines(profiles: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The summary's rows on what the order carries: permutation entropy per order, and MI at a few gaps
    (and the last), each beside the shuffled baseline."""
    lines = []
    for m in profiles[0]["permutation_entropy"]:
        lines.append(
            (
                f"permutation entropy m={m}: pooled / per user (shuffled)",
                [
                    f"{p['permutation_entropy'][m]:.4f} ({p['permutation_entropy_shuffled'][m]:.4f}) / "
                    f"{p['permutation_entropy_per_user'][m]:.4f} "
                    f"({p['permutation_entropy_per_user_shuffled'][m]:.4f})"
                    for p in profiles
                ],
            )
        )
    for i, (gap, _) in enumerate(profiles[0]["mi_decay"]):
        if gap in (1, 2, 3, 5, 10, 20) or i == len(profiles[0]["mi_decay"]) - 1:
            lines.append(
                (
                    f"MI at gap {gap}, bits (shuffled)",
                    [
                        f"{_signed(p['mi_decay'][i][1])} ({_signed(p['mi_decay_shuffled'][i][1])})"
                        for p in profiles
                    ],
                )
            )
    return lines


def long_table(profiles: list[dict[str, Any]]):
    """One row per (dataset, measure, parameter): value and its shuffled baseline (the Parquet output)."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for p in profiles:

        def add(
            measure: str,
            parameter: float | None,
            value: float,
            shuffled: float | None = None,
            p: dict[str, Any] = p,
        ) -> None:
            rows.append(
                {
                    "dataset": p["dataset"],
                    "symbols": p["symbols"],
                    "measure": measure,
                    "parameter": parameter,
                    "value": value,
                    "shuffled": shuffled,
                }
            )

        for key in (
            "zipf_exponent_ols",
            "zipf_exponent_mle",
            "powerlaw_alpha",
            "powerlaw_x_min",
            "top1pct_mass",
            "unigram_entropy_bits",
        ):
            add(key, None, p[key])
        for codec in ("lzma", "zlib"):
            add(
                f"bits_per_symbol_{codec}",
                None,
                p[f"bits_per_symbol_{codec}"],
                p[f"bits_per_symbol_{codec}_shuffled"],
            )
        for m, value in p["permutation_entropy"].items():
            add("permutation_entropy", int(m), value, p["permutation_entropy_shuffled"][m])
            add(
                "permutation_entropy_per_user",
                int(m),
                p["permutation_entropy_per_user"][m],
                p["permutation_entropy_per_user_shuffled"][m],
            )
        for (gap, value), (_, shuffled), (_, plug_in), (_, miller_madow) in zip(
            p["mi_decay"],
            p["mi_decay_shuffled"],
            p["mi_decay_plugin"],
            p["mi_decay_miller_madow"],
            strict=True,
        ):
            add("mi_decay", gap, value, shuffled)
            add("mi_plugin", gap, plug_in)
            add("mi_miller_madow", gap, miller_madow)
    return pd.DataFrame(rows)


def _zipf_line(ranked: np.ndarray, lo: int, hi: int, s: float) -> tuple[np.ndarray, np.ndarray]:
    """(ranks lo..hi, c * rank^-s), the level c fitted in log space to the counts over those ranks."""
    r = np.arange(lo, hi + 1)
    level = math.exp(np.mean(np.log(ranked[lo - 1 : hi]) + s * np.log(r)))
    return r, level * r**-s


def plot(profiles: list[dict[str, Any]], corpora: list[Corpus], out: Path) -> list[Path]:
    """rank_frequency.png (with both fits), mi_decay.png and permutation_entropy.png, one line per corpus."""
    from modsar.outputs import pyplot

    plt = pyplot()
    return [
        _plot_rank_frequency(plt, profiles, corpora, out),
        _plot_mi_decay(plt, profiles, out),
        _plot_permutation_entropy(plt, profiles, out),
    ]


def _plot_rank_frequency(plt: Any, profiles: list[dict[str, Any]], corpora: list[Corpus], out: Path) -> Path:
    """rank_frequency.png: each corpus's counts by rank, log-log, with its OLS and MLE Zipf lines."""
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for i, (p, corpus) in enumerate(zip(profiles, corpora, strict=True)):
        counts = np.bincount(corpus.items, minlength=corpus.num_items + 1)[1:]
        ranked = np.sort(counts[counts > 0])[::-1]
        r = np.arange(1, len(ranked) + 1)
        ax.loglog(
            r, ranked, ".", ms=2, color=f"C{i}", label=f"{p['dataset']} (top 1%: {p['top1pct_mass']:.0%})"
        )
        lo, hi = p["zipf_ols_ranks"]
        ax.loglog(
            *_zipf_line(ranked, lo, hi, p["zipf_exponent_ols"]),
            "-",
            color=f"C{i}",
            lw=1,
            label=f"OLS s = {p['zipf_exponent_ols']:.2f} (ranks {lo}-{hi})",
        )
        tail = int(p["powerlaw_tail_items"])
        if tail and math.isfinite(p["zipf_exponent_mle"]):  # the MLE's counts >= x_min: the top `tail` ranks
            ax.loglog(
                *_zipf_line(ranked, 1, tail, p["zipf_exponent_mle"]),
                "--",
                color=f"C{i}",
                lw=1,
                label=f"MLE s = {p['zipf_exponent_mle']:.2f} (counts >= {p['powerlaw_x_min']:g})",
            )
    return _finish(fig, ax, "rank", "count", out / "rank_frequency.png", 6)


def _plot_mi_decay(plt: Any, profiles: list[dict[str, Any]], out: Path) -> Path:
    """mi_decay.png: bias-corrected MI against the gap, each corpus beside its shuffled baseline."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for i, p in enumerate(profiles):
        gaps = [g for g, _ in p["mi_decay"]]
        ax.plot(gaps, [v for _, v in p["mi_decay"]], "o-", ms=3, color=f"C{i}", label=p["dataset"])
        ax.plot(
            gaps, [v for _, v in p["mi_decay_shuffled"]], ":", color=f"C{i}", label=f"{p['dataset']} shuffled"
        )
    ax.axhline(0, color="grey", lw=0.6)
    return _finish(fig, ax, "gap g", "I(x_t; x_t+g), bits (minus permuted pairs)", out / "mi_decay.png")


def _plot_permutation_entropy(plt: Any, profiles: list[dict[str, Any]], out: Path) -> Path:
    """permutation_entropy.png: pooled and mean-per-user entropy by order, real and shuffled."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for i, p in enumerate(profiles):
        orders = [int(m) for m in p["permutation_entropy"]]
        for key, style, label, extra in (
            ("permutation_entropy", "o-", "pooled", {}),
            ("permutation_entropy_per_user", "s--", "mean per user", {"ms": 3}),
            ("permutation_entropy_shuffled", ":", "shuffled", {}),
            ("permutation_entropy_per_user_shuffled", "-.", "per user, shuffled", {"lw": 0.8}),
        ):
            ax.plot(
                orders, list(p[key].values()), style, **extra, color=f"C{i}", label=f"{p['dataset']} {label}"
            )
    return _finish(fig, ax, "order m", "normalised permutation entropy", out / "permutation_entropy.png", 6)
