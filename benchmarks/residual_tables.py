"""The residual paper's Table 2 (mixing ratios Attn / +Res / +LN) three ways and Table 3 (+LN per layer at L,
L-1, L-2), mean ± std over seeds, beside the paper's figures, from an analysis written by
`benchmarks/residual_table2.sh` (`modsar analyze --out`), and the test accuracy from the rows behind it.

    python benchmarks/residual_tables.py results/published/residual-table2 toys
    python benchmarks/residual_tables.py results/published/residual-table2 toys residual-toys-40epochs

The paper does not state over which positions Table 2 averages, so it is given pooled (every real position of
every layer, position 1 included), without each sequence's first position, and at L (the final position, mean
of the two layers). Layers are numbered from 1 here (the analysis numbers them from 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from modsar.records.rows import read_rows

PAPER_TABLE2 = {  # (Attn, +Res, +LN) per dataset and model
    ("toys", "modular"): (0.772, 0.123, 0.123),
    ("toys", "duorec"): (0.780, 0.121, 0.121),
    ("beauty", "modular"): (0.776, 0.119, 0.119),
    ("beauty", "duorec"): (0.776, 0.116, 0.115),
    ("sports", "modular"): (0.775, 0.126, 0.122),
    ("sports", "duorec"): (0.790, 0.119, 0.119),
    ("video", "modular"): (0.798, 0.169, 0.169),
    ("video", "duorec"): (0.773, 0.170, 0.170),
    ("diginetica", "modular"): (0.721, 0.150, 0.149),
    ("diginetica", "duorec"): (0.724, 0.152, 0.151),
}
PAPER_TABLE3 = {
    "toys": {1: (0.1278, 0.1283, 0.1251), 2: (0.1182, 0.1178, 0.1135)}
}  # SASRec +LN at L, L-1, L-2
NAMES = {"modular": "SASRec", "duorec": "DuoRec"}


def cell(values: pd.Series) -> str:
    return f"{values.mean():.3f} ± {values.std(ddof=1):.3f}" if len(values) > 1 else f"{values.mean():.3f}"


def main(root: str, dataset: str, experiment: str = "") -> None:
    experiment = experiment or f"residual-{dataset}"
    frame = pd.read_parquet(Path(root) / f"{experiment}-analysis" / "diagnostics.parquet")
    mixing = frame[frame["diagnostic"] == "mixing"]
    rows = read_rows(root, experiment).set_index("checkpoint")
    print(f"Table 2 on {dataset}: mixing Attn / +Res / +LN, mean ± std over seeds\n")
    print("| model | seeds | test N@10 / HR@10 | scope | Attn | +Res | +LN | paper |")
    print("|---|---|---|---|---|---|---|---|")
    for backbone, group in mixing.groupby("backbone", sort=False):
        runs = rows.loc[group["checkpoint"].unique()]
        accuracy = f"{runs['test.ndcg@10'].mean():.4f} / {runs['test.recall@10'].mean():.4f}"
        paper = "/".join(f"{v:.3f}" for v in PAPER_TABLE2.get((dataset, backbone), ()))
        for scope, suffix in (
            ("pooled", ""),
            ("without position 1", " without position 1"),
            ("at L", " at L"),
        ):
            values = []
            for kind in ("attn", "res", "ln"):
                picked = group[group["quantity"] == f"mixing_{kind}{suffix}"]
                per_run = picked.groupby("checkpoint")["value"].mean()  # at L: the mean of the layers
                values.append(cell(per_run))
            print(
                f"| {NAMES.get(backbone, backbone)} | {runs['seed'].nunique()} | {accuracy} | {scope} | "
                f"{' | '.join(values)} | {paper} |"
            )
    print(f"\nTable 3 on {dataset}: +LN per layer and position, mean ± std over seeds (paper: SASRec)\n")
    print("| model | layer | L | L-1 | L-2 | paper L / L-1 / L-2 |")
    print("|---|---|---|---|---|---|")
    for backbone, group in mixing.groupby("backbone", sort=False):
        for layer in sorted(group["layer"].unique()):
            if layer == "all":
                continue
            values = [
                cell(
                    group[
                        (group["quantity"] == f"mixing_ln at {name}") & (group["layer"] == layer)
                    ].set_index("checkpoint")["value"]
                )
                for name in ("L", "L-1", "L-2")
            ]
            paper = PAPER_TABLE3.get(dataset, {}).get(int(layer) + 1) if backbone == "modular" else None
            paper_text = " / ".join(f"{v:.4f}" for v in paper) if paper else ""
            print(
                f"| {NAMES.get(backbone, backbone)} | {int(layer) + 1} | {' | '.join(values)} | "
                f"{paper_text} |"
            )


if __name__ == "__main__":
    main(*(sys.argv[1:] or ["results/published/residual-table2", "toys"]))
