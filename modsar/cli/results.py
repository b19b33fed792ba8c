"""`modsar results`: list and filter the trial rows (Parquet) under a results root."""

from __future__ import annotations

import argparse

from modsar.cli.common import Subparsers, add_command, print_json
from modsar.errors import ModsarError
from modsar.outputs import to_json

EPILOG = """examples:
  modsar results --experiment loss_ce-synthetic
  modsar results --where task=ar --where status=finished --columns trial_id,model.hidden_size,valid.ndcg@10
  modsar results --where selected=true --json"""

DEFAULT_COLUMNS = [
    "trial_id",
    "task",
    "status",
    "selected",
    "epochs_run",
    "best_epoch",
    "valid.ndcg@10",
    "valid.recall@10",
    "test.ndcg@10",
    "test.recall@10",
]  # shown without --columns, those the rows have


def add_parser(sub: Subparsers) -> None:
    """The `results` command and its options."""
    results = add_command(sub, "results", "list and filter trial rows (Parquet)", run, EPILOG)
    results.add_argument("--experiment", help="one experiment (default: all under --results)")
    results.add_argument("--results", default="results", help="results root: a path or a pyarrow URI")
    results.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keep rows whose column equals the value (repeatable): numbers by value (train.lr=1e-3 is "
        "0.001), text in any case, and an empty value a missing one (test.ndcg@10= : the untested trials)",
    )
    results.add_argument("--columns", help="comma-separated columns to show")
    results.add_argument("--sort", help="column to sort by, descending (default: the validation ndcg@10)")
    results.add_argument("--limit", type=int, default=50, help="rows to show (default 50)")
    results.add_argument("--json", action="store_true", help="print rows as JSON")


def run(args: argparse.Namespace) -> int:
    """Print the matching rows, best first, as a table of the chosen columns or as JSON."""
    from modsar.records.rows import matching_rows

    if args.limit < 1:
        raise ModsarError(f"--limit must be >= 1 (rows to show); got {args.limit}")
    rows = matching_rows(args.results, args.experiment, args.where)
    if not len(rows) and not args.json:  # a query with no answer is an answer: said, not pandas' empty frame
        print(f"no trial row under {args.results} matches --where {' '.join(args.where)}")
        return 0
    sort = args.sort or next((c for c in ("valid.ndcg@10", "valid.recall@10") if c in rows), None)
    if sort:
        if sort not in rows:
            raise ModsarError(f"--sort: unknown column '{sort}'")
        rows = rows.sort_values(sort, ascending=False, na_position="last")
    columns = args.columns.split(",") if args.columns else [c for c in DEFAULT_COLUMNS if c in rows]
    missing = [c for c in columns if c not in rows]
    if missing:
        raise ModsarError(f"--columns: unknown column '{missing[0]}'")
    rows = rows.head(args.limit)
    if args.json:
        print_json(args, to_json(rows.to_dict("records"), default=str))
    else:
        print(rows[columns].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0
