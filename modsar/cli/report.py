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
    from modsar.records.rows import deeper_rows_hint
    from modsar.records.selection import experiment_rows, report_rows
    from modsar.report import REPORT_KEYS, build_reports, render
    from modsar.sweep.interrupt import incomplete_searches

    rows = experiment_rows(args.results, args.experiment)
    if not len(rows):
        raise ModsarError(
            f"no trial rows under {args.results}; pass --results the folder `modsar search` or "
            f"`modsar train` wrote to{deeper_rows_hint(args.results)}"
        )
    if missing := [k for k in REPORT_KEYS if k not in rows]:  # marked rows a tool of one's own wrote
        others = f" (nor {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise ModsarError(
            f"the trial rows under {args.results} have no {missing[0]!r} column, which a report "
            f"reads{others}; move the files that lack {'them' if others else 'it'} out of the "
            "trials folders"
        )
    rows = report_rows(rows, args.results, args.space, args.dataset)
    held = sorted(
        (c.removeprefix("test.") for c in rows if c.startswith("test.") and rows[c].notna().any()),
        key=_metric_order,
    )
    if held and args.metric not in held:
        raise ModsarError(
            f"--metric {args.metric!r} is not a test metric of these rows; pass one they hold: "
            + ", ".join(held)
        )
    # a search stopped before its end (Ctrl-C, a kill) or still running: its verdicts say how far it got
    unfinished = incomplete_searches(args.results, sorted(set(rows["experiment"].dropna())))
    reports = build_reports(rows, headline=args.metric, unfinished=unfinished)
    text = render(reports, args.format, args.metric)
    if not args.out:
        print(text, end="")
        return 0
    target, plots = _write_out(args, reports, text)
    print(text if args.format == "md" else "\n".join(v for r in reports for v in r.verdicts))
    print(f"wrote {target} and {len(plots)} plots in {args.out}")
    return 0


def _write_out(args: argparse.Namespace, reports: list, text: str) -> tuple[Path, list[Path]]:
    """Write the report and its plots into --out, replacing the previous report's files there (its stale
    plots), never another file of the folder; the report's path and the plots'."""
    from modsar.report import plot_all
    from modsar.report.files import replace_outputs
    from modsar.report.plots import file_part

    name = f"report.{'tex' if args.format == 'latex' else args.format}"

    def produce(folder: Path) -> list[Path]:
        """The report and its plots, written into `folder` (replace_outputs' staging folder)."""
        return [write_text(folder / name, text)] + [
            path
            for r in reports  # one plot folder per experiment when the report is split by experiment
            for path in plot_all(
                r.rows,
                r.cells,
                r.datasets,
                r.spaces,
                args.metric,
                folder / file_part(r.experiment) if r.experiment else folder,  # a name: never a path
            )
        ]

    target, *plots = replace_outputs(Path(args.out), produce)
    return target, plots


def _metric_order(metric: str) -> tuple[str, int]:
    """recall@5 before recall@10."""
    name, _, k = metric.partition("@")
    return name, int(k) if k.isdigit() else 0
