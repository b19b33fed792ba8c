"""Seconds per training epoch of named setups, one `modsar train` process per run, alternated A B .. B A, so
machine load and process warm-up hit every setup alike (one process running several models drifted by up
to 75% over its life in issue 12's harness). The epoch time is what `modsar train` itself records.

    python benchmarks/epoch_time.py --dataset video --rounds 2 --threads 2
    python benchmarks/epoch_time.py --variants base,defaults --rounds 4 --threads 1 --epochs 1
    python benchmarks/epoch_time.py --results results/published/speed     # rows for benchmarks/RESULTS.md

Setups share issue 12/17's settings (max length 50, hidden 64, 2 blocks, 1 head, dropout 0.2, batch 128,
Adam lr 1e-3, full-softmax CE); each variant adds its overrides (`--list` prints them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

COMMON = [
    "data.max_len=50",
    "model.hidden_size=64",
    "model.num_layers=2",
    "model.num_heads=1",
    "model.dropout=0.2",
    "model.attn_dropout=0.2",
    "data.batch_size=128",
    "train.optimizer=adam",
    "train.lr=0.001",
    "loss.name=ce",
    "eval.filter_seen=history",
    "eval.ks=[10]",
    "train.patience=0",
]
VARIANTS = {
    # the trainer before issue 12: length-bucketed batches, pre-LN, N(0, 0.02), attention-output dropout,
    # plain CE
    "base": [
        "data.batching=length",
        "model.norm=pre",
        "model.init=normal",
        "model.attn_output_dropout=true",
        "loss.fused=false",
    ],
    "defaults_plain": ["loss.fused=false"],  # the 0.2 defaults with the plain logits + cross_entropy
    "defaults": [],  # the 0.2 defaults: fused chunked CE, float32
    "defaults_bf16": ["train.precision=bf16"],
    # issue 16: what a target-aligned code table and the user inside attention cost beside learned positions
    "target_aligned": ["model.positional=target_aligned"],
    "user_token": ["model.user_fusion=token"],
    "user_bias": ["model.user_fusion=bias"],
    # issue 16: the time-gap and session biases (timestamped datasets only, e.g. --dataset ml-100k)
    "time_gap": ["model.time_bias=gap"],
    "time_session": ["model.time_bias=session"],
    # issue 14: one row per training prefix (RecBole's recipe) instead of one per user window
    "prefixes": ["data.samples=prefixes"],
}


def run(dataset: str, name: str, epochs: int, threads: int, results: str) -> dict:
    """One `modsar train` of a variant; its row (under RESULTS/epoch-time-NAME) is returned too."""
    cmd = [
        "modsar",
        "train",
        "--dataset",
        dataset,
        "--results",
        results,
        "--experiment",
        f"epoch-time-{name}",
        "--no-checkpoint",
        "--json",
        *COMMON,
        *VARIANTS[name],
        f"train.max_epochs={epochs}",
        f"train.threads={threads}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout[done.stdout.index("{") :])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="video")
    parser.add_argument("--variants", default="base,defaults_plain,defaults,defaults_bf16")
    parser.add_argument(
        "--rounds", type=int, default=2, help="each round runs every variant once (order flips)"
    )
    parser.add_argument("--epochs", type=int, default=1, help="epochs per run (the mean is recorded)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--list", action="store_true", help="print the variants and their overrides")
    parser.add_argument("--results", default="results", help="rows go to RESULTS/epoch-time-<variant>/trials")
    args = parser.parse_args()
    if args.list:
        for name, overrides in VARIANTS.items():
            print(f"{name:<16} {' '.join(overrides) or '(the defaults)'}")
        return
    names = args.variants.split(",")
    times: dict[str, list[float]] = {n: [] for n in names}
    facts: dict[str, dict] = {}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            row = run(args.dataset, name, args.epochs, args.threads, args.results)
            times[name].append(row["epoch_time_s"])
            facts[name] = row
            print(f"round {r + 1} {name}: {row['epoch_time_s']:.1f} s/epoch", flush=True)
    print(f"\n{args.dataset}, {args.threads} threads, {args.rounds} rounds, alternated")
    print(
        f"{'variant':<16} {'s / epoch':<28} {'mean':>6} {'ratio':>6} {'GFLOP/s':>8} {'MFU':>5}  "
        "valid N@10 (1 epoch)"
    )
    base = statistics.mean(times[names[0]])
    for n in names:
        mean = statistics.mean(times[n])
        row = facts[n]
        print(
            f"{n:<16} {', '.join(f'{t:.1f}' for t in times[n]):<28} {mean:6.1f} {mean / base:6.2f} "
            f"{row['epoch_gflop'] / mean:8.0f} "
            f"{row['epoch_gflop'] / mean / row['gflops'] * row['mfu']:5.0%}  "
            f"{row['valid.ndcg@10']:.4f}"
        )


if __name__ == "__main__":
    main()
