"""`modsar data profile`: the entropy structure of a log (Zipf law, permutation entropy, compressibility,
mutual-information decay), alone or against a second corpus at a matched budget."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from modsar.cli.common import Subparsers, add_command, add_data_dir, print_json
from modsar.errors import ModsarError
from modsar.outputs import to_json, write_text

EPILOG = """examples:
  modsar data profile video                                  # print every measure with its shuffled baseline
  modsar data profile ml-1m --compare wiki --out results/profile   # matched budget, JSON + Parquet + plots
  modsar data profile video --json | jq .top1pct_mass

Any integer-id corpus can be profiled the same way once imported, e.g. tokenized text with one document per
line: `modsar data prepare wiki --source tokens.txt --format sessions` (a dataset of your own is imported
without filters). Definitions and conventions: modsar/data/profile.py."""


def add_parser(actions: Subparsers) -> None:
    """The `data profile` action and its options."""
    prof = add_command(
        actions,
        "profile",
        "entropy structure of a log: Zipf law, permutation entropy, "
        "compressibility, mutual-information decay",
        run,
        EPILOG,
    )
    prof.add_argument("name", help="a prepared dataset (any integer-id corpus imported with `data prepare`)")
    prof.add_argument(
        "--compare", metavar="OTHER", help="profile OTHER too, both cut to the same number of symbols"
    )
    prof.add_argument(
        "--budget", type=int, help="profile only the first N symbols (whole sequences, the last cut)"
    )
    prof.add_argument("--orders", default="3,4,5,6", help="permutation-entropy orders (default 3,4,5,6)")
    prof.add_argument(
        "--max-gap",
        type=int,
        default=20,
        help="mutual information at gaps 1..G, at most the longest "
        "sequence's length - 1: no pair is further apart (default 20)",
    )
    prof.add_argument("--seed", type=int, default=0, help="seed of the shuffled baselines")
    prof.add_argument(
        "--json", action="store_true", help="print the profile as JSON (fields fixed for scripts)"
    )
    prof.add_argument("--out", help="write profile.json, profile.parquet and the PNG plots here")
    prof.add_argument("--quiet", action="store_true", help="no progress bar")
    add_data_dir(prof)


def _orders(text: str) -> tuple[int, ...]:
    """The --orders option: comma-separated permutation-entropy orders from 2 to 8."""
    try:
        orders = tuple(int(m) for m in text.split(","))
    except ValueError:
        orders = ()
    if not orders or min(orders) < 2 or max(orders) > 8:
        raise ModsarError(f"--orders must be comma-separated integers from 2 to 8; got {text!r}")
    return orders


def run(args: argparse.Namespace) -> int:
    """Profile the dataset (and --compare's) on the same number of symbols; print it, write it to --out."""
    from modsar.data import profile, profile_output
    from modsar.data.store import load_dataset
    from modsar.outputs import write_parquet

    orders = _orders(args.orders)
    if args.max_gap < 1 or (args.budget is not None and args.budget < 1):
        raise ModsarError("--max-gap and --budget must be >= 1")
    corpora = [
        profile.Corpus.of_dataset(load_dataset(name, args.data_dir))
        for name in [args.name] + ([args.compare] if args.compare else [])
    ]
    budget = min([len(c.items) for c in corpora] + ([args.budget] if args.budget else []))
    corpora = [c.truncated(budget) for c in corpora]
    # a gap of the longest sequence's length or more has no pair (its row would be null): measured up to there
    longest = max(int((c.offsets[1:] - c.offsets[:-1]).max(initial=0)) for c in corpora)
    max_gap = min(args.max_gap, max(1, longest - 1))
    found = [profile.profile(c, orders, max_gap, args.seed, progress=not args.quiet) for c in corpora]
    # the first corpus's fields at the top level; --compare adds the other under "compare" (file and stdout
    # alike)
    document = to_json({**found[0], **({"compare": found[1]} if args.compare else {})})
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "profile.json", document + "\n")
        written = [
            out / "profile.json",
            write_parquet(profile_output.long_table(found), out / "profile.parquet"),
        ]
        written += profile_output.plot(found, corpora, out)
    if args.json:
        print_json(args, document)
    else:
        print(profile_output.summary(found))
    if args.out:
        print(
            f"wrote {len(written)} file(s) to {args.out}: {', '.join(p.name for p in written)}",
            file=sys.stderr if args.json else sys.stdout,
        )
    return 0
