"""`modsar report`: the paper's AE-vs-AR tables, seed statistics and plots of a results folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from modsar.cli.common import Subparsers, add_command
from modsar.errors import ModsarError
from modsar.outputs import write_text

EPILOG = """examples:
  modsar report                                        # every experiment under ./results, Markdown to stdout
  modsar report --experiment quickstart-synthetic --out results/report
  modsar report --dataset video --format latex --out paper/

Cells are test metrics of the configuration selected on validation (mean ± std over `--seeds` re-runs
when present); missing cells show "–"; Best Improv. = (best AR - best AE) / best AE."""


def add_parser(sub: Subparsers) -> None:
    """The `report` command and its options."""
    report = add_command(sub, "report", "the paper's AE-vs-AR tables, seed statistics and plots", run, EPILOG)
    report.add_argument("--results", default="results", help="results root: a path or a pyarrow URI")
    report.add_argument("--experiment", action="append", help="only these experiments (repeatable)")
    report.add_argument("--space", action="append", help="only these spaces (repeatable)")
    report.add_argument("--dataset", action="append", help="only these datasets (repeatable)")
    report.add_argument("--metric", default="ndcg@10", help="headline metric for verdicts and plots")
    report.add_argument("--format", default="md", choices=["md", "latex", "csv", "html"])
    report.add_argument("--out", help="write report.<format> and PNG plots into this folder")


def run(args: argparse.Namespace) -> int:
    """Render the report of the chosen rows to stdout, or write it and its plots to --out."""
    from modsar.records.rows import read_rows
    from modsar.records.selection import report_rows
    from modsar.report import REPORT_KEYS, build_reports, plot_all, render

    rows = read_rows(args.results)
    if not len(rows):
        raise ModsarError(
            f"no trial rows under {args.results}; pass --results the folder `modsar search` or "
            "`modsar train` wrote to"
        )
    if missing := [k for k in REPORT_KEYS if k not in rows]:  # marked rows a tool of one's own wrote
        others = f" (nor {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise ModsarError(
            f"the trial rows under {args.results} have no {missing[0]!r} column, which a report "
            f"reads{others}; move the files that lack {'them' if others else 'it'} out of the "
            "trials folders"
        )
    rows = report_rows(rows, args.results, args.experiment, args.space, args.dataset)
    held = sorted(
        (c.removeprefix("test.") for c in rows if c.startswith("test.") and rows[c].notna().any()),
        key=_metric_order,
    )
    if held and args.metric not in held:
        raise ModsarError(
            f"--metric {args.metric!r} is not a test metric of these rows; pass one they hold: "
            + ", ".join(held)
        )
    reports = build_reports(rows, headline=args.metric)
    text = render(reports, args.format, args.metric)
    if not args.out:
        print(text, end="")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"report.{'tex' if args.format == 'latex' else args.format}"
    write_text(target, text)
    plots = [
        path
        for r in reports  # one plot folder per experiment when the report is split by experiment
        for path in plot_all(
            r.rows, r.cells, r.datasets, r.spaces, args.metric, out / r.experiment if r.experiment else out
        )
    ]
    print(text if args.format == "md" else "\n".join(v for r in reports for v in r.verdicts))
    print(f"wrote {target} and {len(plots)} plots in {out}")
    return 0


def _metric_order(metric: str) -> tuple[str, int]:
    """recall@5 before recall@10."""
    name, _, k = metric.partition("@")
    return name, int(k) if k.isdigit() else 0
