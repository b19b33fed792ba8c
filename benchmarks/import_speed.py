"""Seconds to prepare a MovieLens-format ratings.csv of `--rows` synthetic interactions (ML-20M-sized by
default: 20M rows, 138,493 users, 26,744 items), end to end through `modsar data prepare`'s own function:
read, prepare (order, filter, remap), write Parquet.

    python benchmarks/import_speed.py                        # 20M rows
    python benchmarks/import_speed.py --rows 2000000 --line-reader   # also time the line-by-line reader

The file is generated once into `--workdir` (Zipf item popularity, random users and timestamps) with
pyarrow's CSV writer. `--line-reader` times the pure-Python reader on the same file too (the path malformed
files still take, for line-numbered errors), for a before/after ratio from one run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from modsar.data import importers
from modsar.data.store import prepare_dataset


def write_ratings(path: Path, rows: int, users: int, items: int) -> None:
    rng = np.random.default_rng(0)
    popularity = 1.0 / np.arange(1, items + 1) ** 0.9
    table = pa.table(
        {
            "userId": rng.integers(1, users + 1, rows),
            "movieId": rng.choice(items, rows, p=popularity / popularity.sum()) + 1,
            "rating": rng.integers(1, 11, rows) / 2.0,
            "timestamp": rng.integers(789_652_009, 1_427_784_002, rows),
        }
    )
    with path.open("wb") as out:  # MovieLens's header is unquoted; pyarrow's writer would quote it
        out.write(b"userId,movieId,rating,timestamp\n")
        pacsv.write_csv(table, out, pacsv.WriteOptions(include_header=False, quoting_style="none"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--users", type=int, default=138_493)
    parser.add_argument("--items", type=int, default=26_744)
    parser.add_argument(
        "--workdir", default=None, help="where the csv and the prepared dataset go (a temp dir)"
    )
    parser.add_argument("--line-reader", action="store_true", help="also time the line-by-line reader")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="modsar-import-"))
    work.mkdir(parents=True, exist_ok=True)
    source = work / f"ratings-{args.rows}.csv"
    if not source.exists():
        tick = time.perf_counter()
        write_ratings(source, args.rows, args.users, args.items)
        print(
            f"wrote {source} ({source.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - tick:.1f} s"
        )
    tick = time.perf_counter()
    manifest, _ = prepare_dataset("import-speed", [source], root=work / "datasets", force=True)
    total = time.perf_counter() - tick
    tick = time.perf_counter()
    fast = importers.fast_ml_csv(source)
    read = time.perf_counter() - tick
    assert fast is not None and len(fast) == args.rows
    stats = manifest["statistics"]
    print(
        f"prepare {args.rows:,} rows -> {stats['users']:,} users x {stats['items']:,} items: {total:.1f} s "
        f"(of which the pyarrow read {read:.1f} s)"
    )
    if args.line_reader:
        tick = time.perf_counter()
        slow = importers.READERS["ml-csv"](source, importers.read_text(source))
        slow_s = time.perf_counter() - tick
        assert np.array_equal(slow.user, fast.user) and np.array_equal(slow.timestamp, fast.timestamp)
        print(f"line-by-line reader: {slow_s:.1f} s, pyarrow {read:.1f} s: {slow_s / read:.1f}x")


if __name__ == "__main__":
    main()
