"""`modsar data prepare`: import a raw log, filter it, remap ids, store it as Parquet."""

from __future__ import annotations

import argparse
import sys

from modsar.cli.common import Subparsers, add_command, add_data_dir, print_json
from modsar.outputs import to_json

EPILOG = """examples:
  modsar data prepare video --source ../shared/data/amazon-video-sasrec/Video.txt.gz
  modsar data prepare beauty --download                      # fetch from the registry URL, checksum-verified
  modsar data prepare ml-1m --source ml-1m.txt               # SASRec's pairs: ml-1m's filters, \
the file's format
  modsar data prepare mylog --source events.csv --format ml-csv --min-user-count 5 --min-item-count 5 --kcore
  modsar data prepare digi --source train_sessions.txt.gz --source test_sessions.txt.gz --format sessions

A registry name (see `modsar data list`) brings its usual preprocessing and max length; flags override it.
The format of a --source file is detected from its content (the registry's format, then the file's name,
only break a tie), unless --format names it, and printed as "read FILE as FORMAT (WHY)"; --download reads
the registry's own file in its known format.
Preparing again with the same sources and options reuses the stored dataset."""


def add_parser(actions: Subparsers) -> None:
    """The `data prepare` action and its options."""
    prep = add_command(
        actions, "prepare", "import a raw log, filter it, remap ids, store it as Parquet", run, EPILOG
    )
    prep.add_argument(
        "name",
        help="dataset name: a registry benchmark (beauty, video, ml-1m, ...), 'synthetic', or your own",
    )
    prep.add_argument("--source", action="append", help="raw file (.gz ok); repeat to concatenate files")
    prep.add_argument(
        "--format",
        default="auto",
        help="auto | pairs | user-lines | inter | ml-csv | ml-dat | sessions (default: auto-detect)",
    )
    prep.add_argument("--min-user-count", type=int, help="drop users with fewer interactions")
    prep.add_argument("--min-item-count", type=int, help="drop items with fewer interactions")
    prep.add_argument(
        "--kcore",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="repeat the min-count filter until both counts hold (k-core)",
    )
    prep.add_argument(
        "--dedup-consecutive",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="drop an interaction that repeats the user's previous item",
    )
    prep.add_argument("--min-rating", type=float, help="keep only ratings >= this (formats with ratings)")
    prep.add_argument(
        "--drop-timestamps",
        action="store_true",
        help="join sources with and without timestamps, ordering every history by its file lines "
        "(otherwise refused; recorded in the manifest's options)",
    )
    prep.add_argument("--max-len", type=int, help="default model history length for this dataset")
    prep.add_argument("--download", action="store_true", help="fetch a registry dataset from its URL")
    prep.add_argument("--url", help="download from this mirror instead (the registry checksum still applies)")
    prep.add_argument("--force", action="store_true", help="replace an existing dataset of this name")
    prep.add_argument("--json", action="store_true", help="print the manifest as JSON")
    add_data_dir(prep)


def run(args: argparse.Namespace) -> int:
    """Prepare the dataset (the registry's preprocessing unless a flag overrides it); say what it holds."""
    from modsar.data.prepare import PrepareOptions, density_text
    from modsar.data.registry import get_spec
    from modsar.data.store import evaluation_warning, prepare_dataset

    spec = get_spec(args.name)
    base = spec.options() if spec else PrepareOptions().to_dict()
    given = {
        "min_user_count": args.min_user_count,
        "min_item_count": args.min_item_count,
        "kcore": args.kcore,
        "dedup_consecutive": args.dedup_consecutive,
        "min_rating": args.min_rating,
    }
    options = PrepareOptions(
        **{k: (v if v is not None else base[k]) for k, v in given.items()},
        drop_timestamps=args.drop_timestamps,
    )
    announce = sys.stderr if args.json else sys.stdout  # --json keeps stdout for the manifest
    manifest, reused = prepare_dataset(
        args.name,
        args.source,
        args.format,
        options,
        args.data_dir,
        args.max_len,
        download_missing=args.download,
        url=args.url,
        force=args.force,
        announce=lambda line: print(line, file=announce),
    )
    warning = evaluation_warning(manifest["statistics"])
    if warning:
        print(f"modsar: warning: {args.name}: {warning}", file=sys.stderr)
    if args.json:
        print_json(args, to_json(manifest))
    else:
        s = manifest["statistics"]
        verb = "already prepared (reused)" if reused else "prepared"
        print(
            f"{args.name}: {verb}: {s['users']:,} users, {s['items']:,} items, {s['interactions']:,} "
            f"interactions, avg length {s['avg_length']:.2f}, density {density_text(s)}"
        )
    return 0
