"""Two 1-thread trials at once, or one 2-thread trial at a time: which uses a 2-core machine better for a
search?

    python benchmarks/trial_threads.py --dataset beauty --rounds 3
    python benchmarks/trial_threads.py --dataset beauty task=ae mask_prob=0.4 --rounds 2

Each round runs, in turn, (a) two `modsar train` processes at once with train.threads=1 and (b) the same two
trainings one after the other with train.threads=2, each for --epochs epochs of the given config. It reports
the training epochs per second of wall-clock of each arrangement (from the rows' epoch_time_s, so start-up
is not counted) and of the whole processes (start-up, validation and test included), and their ratios, per
round and as the median: the arrangements alternate, so a drifting machine load hits both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

import modsar
from modsar.outputs import write_parquet

BASE = ["task=ar", "model.hidden_size=64", "model.num_heads=2", "model.num_layers=2", "data.max_len=50"]


def trainings(
    dataset: str, overrides: list[str], threads: int, epochs: int, parallel: bool
) -> tuple[float, list]:
    """(wall seconds, the two rows' facts) of two trainings, at once or one after the other."""
    executable = str(Path(sys.executable).with_name("modsar"))  # the command of this environment
    command = [executable, "train", "--dataset", dataset, "--quiet", "--json", "--no-checkpoint"]
    budget = [f"train.threads={threads}", f"train.max_epochs={epochs}", f"train.eval_every={epochs}"]
    args = [*BASE, *overrides, *budget]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with tempfile.TemporaryDirectory() as results:
        runs = [
            [*command, "--results", results, "--experiment", f"t{i}", *args, f"seed={i}"] for i in range(2)
        ]
        started = time.perf_counter()
        if parallel:
            procs = [subprocess.Popen(r, stdout=subprocess.PIPE, env=env, text=True) for r in runs]
            outs = [p.communicate()[0] for p in procs]
            codes = [p.returncode for p in procs]
        else:
            done = [subprocess.run(r, stdout=subprocess.PIPE, env=env, text=True) for r in runs]
            outs, codes = [d.stdout for d in done], [d.returncode for d in done]
        wall = time.perf_counter() - started
    if any(codes):
        raise SystemExit(f"a training failed (exit {codes}); run it by hand: {' '.join(runs[0])}")
    return wall, [json.loads(out) for out in outs]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="beauty")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--out", help="folder for trial-threads-<dataset>.parquet, one line per round")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    train_ratio, wall_ratio, lines = [], [], []
    for r in range(args.rounds):
        one_wall, one = trainings(args.dataset, args.overrides, 1, args.epochs, parallel=True)
        two_wall, two = trainings(args.dataset, args.overrides, 2, args.epochs, parallel=False)
        # epochs per second of training: two at once finish when the slower one does
        one_rate = 2 * args.epochs / max(row["epoch_time_s"] * args.epochs for row in one)
        two_rate = 2 * args.epochs / sum(row["epoch_time_s"] * args.epochs for row in two)
        train_ratio.append(one_rate / two_rate)
        wall_ratio.append(two_wall / one_wall)
        lines.append(
            {
                "dataset": args.dataset,
                "round": r + 1,
                "config": " ".join([*BASE, *args.overrides]),
                "epochs": args.epochs,
                "one_thread_epoch_s": max(row["epoch_time_s"] for row in one),
                "two_threads_epoch_s": statistics.mean(row["epoch_time_s"] for row in two),
                "one_thread_wall_s": one_wall,
                "two_threads_wall_s": two_wall,
                "training_ratio": train_ratio[-1],
                "process_ratio": wall_ratio[-1],
                "modsar": modsar.__version__,
            }
        )
        ones, twos = ([round(row["epoch_time_s"], 2) for row in rows] for rows in (one, two))
        print(
            f"round {r + 1}: 2 x 1 thread: {ones} s/epoch, {one_wall:.1f} s wall; 1 x 2 threads: {twos} "
            f"s/epoch, {two_wall:.1f} s wall; training throughput 2x1 / 1x2 = {train_ratio[-1]:.2f}, "
            f"whole processes {wall_ratio[-1]:.2f}",
            flush=True,
        )
    train, wall = statistics.median(train_ratio), statistics.median(wall_ratio)
    print(
        f"median over {args.rounds} rounds: two 1-thread trials train {train:.2f}x the epochs per second of "
        f"one 2-thread trial ({wall:.2f}x counting whole processes)"
    )
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        write_parquet(pd.DataFrame(lines), Path(args.out) / f"trial-threads-{args.dataset}.parquet")


if __name__ == "__main__":
    main()
