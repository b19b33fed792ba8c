"""Import and prepare every dataset in ../shared/data with its registry preprocessing; check the statistics.

    python benchmarks/import_all.py [--shared ../shared/data] [--data-dir DIR] [--rows FILE.parquet]

Prints one line per dataset (users, items, interactions, avg length, density, seconds) and exits non-zero
if a registry dataset's statistics differ from the published ones recorded in the registry.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

from modsar.data.prepare import PrepareOptions, density_text
from modsar.data.registry import REGISTRY
from modsar.data.store import prepare_dataset
from modsar.outputs import atomic_write
from modsar.version import __version__

FILES = {
    "video": ["amazon-video-sasrec/Video.txt.gz"],
    "beauty": ["amazon-beauty-5core/Beauty.txt.gz"],
    "sports": ["amazon-sports-5core/Sports_and_Outdoors.txt.gz"],
    "toys": ["amazon-toys-5core/Toys_and_Games.txt.gz"],
    "yelp": ["yelp-s3rec/Yelp.txt.gz"],
    "lastfm": ["lastfm-s3rec/LastFM.txt.gz"],
    "ml-100k": ["ml-100k/ml-100k.inter.gz"],
    "diginetica": ["diginetica/train_sessions.txt.gz", "diginetica/test_sessions.txt.gz"],
    "ml-latest-small": ["ml-latest-small/ratings.csv.gz"],  # not a registry name: auto-detected as ml-csv
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--data-dir", default="/tmp/modsar-bench-data")
    parser.add_argument("--rows", help="also write one row per dataset (statistics, format, seconds) here")
    args = parser.parse_args()
    failed = 0
    rows = []
    for name, files in FILES.items():
        tick = time.perf_counter()
        options = None if name in REGISTRY else PrepareOptions(min_user_count=5, min_item_count=5)
        manifest, reused = prepare_dataset(
            name, [Path(args.shared) / f for f in files], options=options, root=args.data_dir, force=False
        )
        s = manifest["statistics"]
        expected = REGISTRY[name].expected if name in REGISTRY else {}
        wrong = {k: (s[k], v) for k, v in expected.items() if s[k] != v}
        failed += bool(wrong)
        seconds = time.perf_counter() - tick
        rows.append(
            {
                "dataset": name,
                "format": manifest["sources"][0]["format"],
                "files": ", ".join(files),
                **{k: s[k] for k in ("users", "items", "interactions", "avg_length", "density")},
                "seconds": seconds,
                "reused": reused,
                "matches_registry": not wrong,
                "modsar": __version__,
            }
        )
        print(
            f"{name:<16} {s['users']:>8,} users {s['items']:>7,} items {s['interactions']:>9,} inter. "
            f"avg {s['avg_length']:6.2f} density {density_text(s):>7} "
            f"[{manifest['sources'][0]['format']}] {time.perf_counter() - tick:5.1f}s"
            f"{' (reused)' if reused else ''}{'  MISMATCH ' + str(wrong) if wrong else ''}"
        )
    if args.rows:
        with atomic_write(args.rows) as tmp:
            pd.DataFrame(rows).to_parquet(tmp, index=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
