"""`modsar analyze`: attention sparsity/rank, last-item reliance and the other diagnostics of trained models,
named by checkpoint, by experiment (its selected or best trials), or read back from an earlier --out."""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from modsar.cli.common import Subparsers, add_command, add_data_dir
from modsar.errors import ModsarError

if TYPE_CHECKING:
    from modsar.analysis.analyze import Analysis

EXAMPLES = """examples:
  modsar analyze --checkpoint results/train-video/checkpoints/ar-1234abcd.pt --out results/analysis
  modsar analyze --experiment vanilla-video --diagnostic sparsity,rank,hrli,shuffle
  modsar analyze --experiment vanilla-video --experiment local_attn-video --diagnostic sparsity,rank \\
      --out results/tables-2-3          # Vanilla-AE vs Local-AE vs Vanilla-AR: heatmaps, spectra, S and k
  modsar analyze --checkpoint sasrec.pt --diagnostic hrli,shuffle,mixing,residual-scaling,nonfinal,recovery
  modsar analyze --experiment bluesky-beauty --diagnostic user   # user fusion: swapped-user drop, token mass
  modsar analyze --from results/toys-analysis --from results/beauty-analysis --out results/both
                                  # earlier --out folders side by side (one Figure 2 panel per dataset), \
no recompute

Prints ModSAR Tables 2-3 (S, k per layer and on average) and the residual-dominance summary side by side;
--out adds Parquet tables of every figure and PNG heatmaps, singular-value spectra and alpha sweeps.
"""
CONVENTIONS = """

Conventions (window, head averaging, padding, where alpha acts) are in modsar/analysis/analyze.py and in \
every row."""


def epilog() -> str:
    """The help's closing text, with the backbones whose attention skips the registry knows (plugins too)."""
    from modsar.model import registry  # torch-free

    try:
        known = ", ".join(registry.skip_site_backbones())
    except ModsarError:  # a broken plugin is reported where it is used, not by --help
        known = "see modsar.model.registry"
    return (
        EXAMPLES
        + textwrap.fill(  # the list may grow: wrapped where the help's other lines are
            f"Mixing and residual scaling need the layers' attention skip, which ModSAR knows for {known}; "
            "for any other backbone they are skipped with a note.",
            width=110,
            break_long_words=False,
            break_on_hyphens=False,
        )
        + CONVENTIONS
    )


def add_parser(sub: Subparsers) -> None:
    """The `analyze` command and its options."""
    analyze = add_command(
        sub, "analyze", "attention sparsity/rank and last-item-reliance diagnostics", run, epilog
    )
    _add_models(analyze)
    _add_measures(analyze)
    analyze.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    analyze.add_argument("--quiet", action="store_true", help="no progress bar")
    analyze.add_argument(
        "--out", help="write diagnostics.parquet, attention_maps.parquet, spectra.parquet and PNG plots here"
    )
    add_data_dir(analyze)


def _add_models(analyze: argparse.ArgumentParser) -> None:
    """Which models: checkpoints or experiments, and earlier --out folders."""
    target = analyze.add_mutually_exclusive_group()
    target.add_argument(
        "--checkpoint",
        action="append",
        help="a best.pt written by modsar train or search (repeat to compare models side by side)",
    )
    target.add_argument(
        "--experiment",
        action="append",
        help="the selected AE and AR trials of this search, or the best checkpoint per task of a "
        "`modsar train` experiment (repeatable: e.g. vanilla-video and local_attn-video give "
        "Vanilla-AE, Local-AE, Vanilla-AR, ...)",
    )
    analyze.add_argument(
        "--from",
        dest="from_dirs",
        action="append",
        metavar="DIR",
        help="an earlier `modsar analyze --out` folder: its models are shown beside the others "
        "from its Parquet tables, not recomputed (its notes are not stored, --diagnostic does "
        "not apply to it, and all models are shown in the papers' order); repeatable, e.g. "
        "one folder per dataset for one Figure 2 with a panel each",
    )
    analyze.add_argument("--results", default="results", help="results root (with --experiment)")
    analyze.add_argument(
        "--dataset",
        action="append",
        help="with --experiment: only its trials on this dataset (repeatable); by default an experiment "
        "that holds several datasets is analysed on each, every model labelled with its dataset",
    )


def _add_measures(analyze: argparse.ArgumentParser) -> None:
    """What is measured, on how many users, over which window."""
    analyze.add_argument(
        "--diagnostic",
        default="sparsity,rank,hrli,shuffle,mixing,residual-scaling",
        help="comma-separated: sparsity, rank, hrli, shuffle, mixing, residual-scaling, "
        "nonfinal, recovery, user (how much a model uses the user: NDCG@10 with users "
        "swapped, attention on a user token) (default: %(default)s)",
    )
    analyze.add_argument(
        "--users",
        type=int,
        default=2000,
        help="test users whose attention maps are measured (seeded sample; default %(default)s)",
    )
    analyze.add_argument(
        "--window", type=int, default=20, help="W: the last W positions per attention map (ModSAR: 20)"
    )
    analyze.add_argument(
        "--sigma",
        type=float,
        default=0.0,
        help="noise std added before the rank threshold "
        "(ModSAR Eq. 8; 0 = deterministic; > 0 also reports Gavish-Donoho known-sigma)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the diagnostics on every model, add the earlier folders' models, name them all apart and print
    the tables (and write them to --out)."""
    from modsar.analysis import analyze
    from modsar.analysis import output as analyze_output
    from modsar.devices import resolve as resolve_device

    resolve_device(args.device, "--device")  # before any checkpoint is read
    diagnostics = [d.strip() for d in args.diagnostic.split(",") if d.strip()]
    if not (args.checkpoint or args.experiment or args.from_dirs):
        raise ModsarError(
            "nothing to analyze: pass --checkpoint, --experiment or --from (see modsar analyze --help)"
        )
    if args.users < 1 or args.window < 2 or not math.isfinite(args.sigma) or args.sigma < 0:
        raise ModsarError(
            f"--users must be >= 1, --window >= 2 and --sigma a finite number >= 0 (0: no noise); got "
            f"--users {args.users}, --window {args.window}, --sigma {args.sigma}"
        )
    if args.dataset and not args.experiment:
        raise ModsarError("--dataset chooses among an experiment's trials: pass it with --experiment")
    targets = _without_timed(args, _targets(args))
    analyses = [
        analyze.run(
            path,
            diagnostics,
            args.data_dir,
            args.users,
            window=args.window,
            sigma=args.sigma,
            device=args.device,
            progress=not args.quiet,
        )
        for path, _ in targets
    ]
    # --from: shown as if computed here; a repeated kind is told apart by its folder
    for folder in args.from_dirs or []:
        loaded = analyze_output.load(Path(folder))
        analyses += loaded
        targets += [(str(a.table["checkpoint"].iloc[0]), Path(folder).resolve().name) for a in loaded]
    _name_models(analyses, targets)
    # the papers' orders: Vanilla-AE, Local-AE, Vanilla-AR, Local-AR; SASRec ... GRU4Rec
    if args.experiment or args.from_dirs:
        analyses.sort(key=analyze_output.paper_order)
    print(analyze_output.summary(analyses))
    if args.out:
        written = analyze_output.write(analyses, Path(args.out))
        print(f"\nwrote {len(written)} file(s) to {args.out}: {', '.join(p.name for p in written)}")
    return 0


def _targets(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(checkpoint path, where it came from) of every --checkpoint, then of each --experiment's chosen rows;
    every one must exist."""
    from modsar.records.rows import read_rows
    from modsar.records.selection import best_checkpoints

    targets = [(path, Path(path).stem) for path in args.checkpoint or []]
    for experiment in args.experiment or []:
        rows = read_rows(args.results, experiment)
        datasets = _datasets(args, experiment, rows)
        for dataset in datasets:  # best_checkpoints keeps one per task: on two datasets, one per dataset
            chosen = rows[rows["dataset"] == dataset] if len(datasets) > 1 or args.dataset else rows
            source = f"{experiment}, {dataset}" if len(datasets) > 1 else experiment
            targets += [
                (path, f"{source}, {arm}" if arm else source) for path, arm in best_checkpoints(chosen)
            ]
        if not targets or not targets[-1][1].startswith(experiment):
            raise ModsarError(
                f"experiment '{experiment}' has no selected trials or trained checkpoints under "
                f"{args.results}; run `modsar search` to the end (it selects the best AE and AR) "
                "or `modsar train`"
            )
    for path, _ in targets:
        if not Path(path).is_file():
            raise ModsarError(f"checkpoint '{path}' does not exist")
    return targets


def _datasets(args: argparse.Namespace, experiment: str, rows) -> list:
    """The datasets of an experiment's rows to analyse: those --dataset names (each must have rows), else
    every one, so that an experiment over two datasets never has one of them picked silently."""
    held = sorted(rows["dataset"].dropna().unique()) if "dataset" in rows else []
    if not args.dataset:
        return held or [None]
    missing = [d for d in args.dataset if d not in held]
    if missing:
        raise ModsarError(
            f"--dataset {missing[0]}: experiment '{experiment}' has no rows on it under {args.results}; "
            f"it holds {', '.join(held) or 'none'}"
        )
    return list(dict.fromkeys(args.dataset))


def _without_timed(args: argparse.Namespace, targets: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The targets trained without timestamps (model.time_bias none). A named timed checkpoint, or timed
    models alone, are refused; an experiment's timed arms are skipped with a note and the others analysed."""
    from modsar.analysis import analyze

    biases = [analyze.stored_time_bias(path) for path, _ in targets]
    timed = [(target, bias) for target, bias in zip(targets, biases, strict=True) if bias != "none"]
    if timed and (args.checkpoint or len(timed) == len(targets)):  # a named checkpoint, or nothing else to do
        analyze.refuse_timed(timed[0][0][0], timed[0][1])
    for (_, source), _ in timed:  # an experiment's timed arms: the others are still analysed
        print(
            f"skipping {source}: modsar analyze does not yet carry timestamps through its perturbations "
            "(model.time_bias)",
            file=sys.stderr,
        )
    return [t for t, bias in zip(targets, biases, strict=True) if bias == "none"]


def _name_models(analyses: list[Analysis], targets: list[tuple[str, str]]) -> None:
    """Give every model its papers' label ("Vanilla-AE", "SASRec", ...), made unique: two of one kind get
    their dataset (or their source, on one dataset), and a model given twice a number; each table says it."""
    from modsar.analysis import analyze

    analyze.paper_labels(analyses)
    labels = [a.label for a in analyses]
    datasets = [a.dataset for a in analyses]
    for a, dataset, (_, source) in zip(analyses, datasets, targets, strict=True):
        if labels.count(a.label) > 1:  # two models of one kind: say which is which
            same_data = [d for d, label in zip(datasets, labels, strict=True) if label == a.label].count(
                dataset
            )
            a.label = f"{a.label} ({dataset if same_data == 1 else source})"
    for i, a in enumerate(analyses):  # still two of one name (one checkpoint given twice): never average them
        if [b.label for b in analyses].count(a.label) > 1:
            a.label = f"{a.label} #{i + 1}"
    for a in analyses:
        for frame in (a.table, a.maps, a.spectra):
            if len(frame):
                frame["model"] = a.label
