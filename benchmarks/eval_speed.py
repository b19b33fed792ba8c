"""Seconds of one all-user full-ranking validation pass (seen items removed) for several eval batch sizes, in
one process, alternating rounds; the metrics must be identical for every batch size.

    python benchmarks/eval_speed.py --dataset video --threads 2 --batch-sizes 128,256,512 --rounds 2

A pass is: the encoder forward at each user's last position (users in order of history length), the item
scores (a B x N matmul, ~94 GFLOP on Video), and the ranking (a target's rank is how many candidates score >=
it; seen items are subtracted through their (row, item) pairs, not a dense B x N mask). Batch sizes above what
16M scores allow (707 users on Video) are capped to it, as in training runs. Run it on an old checkout
(PYTHONPATH=<checkout>) for a before/after ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd
import torch

from modsar.config import load_config
from modsar.data.split import make_split
from modsar.data.store import load_dataset
from modsar.evaluation.ranking import Evaluator, model_scorer
from modsar.outputs import atomic_write
from modsar.training.trainer import build_model, seed_everything


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="video")
    parser.add_argument("--batch-sizes", default="256,1024,4096")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--rows", help="also write one row per pass (batch size, round, seconds, NDCG@10) here"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dataset = load_dataset(args.dataset)
    cfg = load_config(
        None,
        [
            f"dataset={args.dataset}",
            "data.max_len=50",
            "model.hidden_size=64",
            "model.num_heads=1",
            "eval.filter_seen=history",
        ],
    )
    split = make_split(cfg, dataset)
    seed_everything(0)
    model = build_model(cfg, dataset.num_items, dataset.num_users, 50).eval()
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    times: dict[int, list[float]] = {b: [] for b in sizes}
    metrics, rows = {}, []
    for r in range(args.rounds):
        for b in sizes if r % 2 == 0 else sizes[::-1]:
            evaluator = Evaluator.of(split, cfg, 50, torch.device("cpu"), batch_size=b)
            tick = time.perf_counter()
            metrics[b] = evaluator(model_scorer(model), "valid")
            times[b].append(time.perf_counter() - tick)
            rows.append(
                {
                    "dataset": args.dataset,
                    "threads": args.threads,
                    "eval_batch": b,
                    "round": r,
                    "seconds": times[b][-1],
                    "users": len(split.targets("valid")[0]),
                    "items": dataset.num_items,
                    "ndcg@10": metrics[b]["ndcg@10"],
                    "torch": torch.__version__,
                }
            )
    users = len(split.targets("valid")[0])
    print(f"{args.dataset}: {users:,} validation users x {dataset.num_items:,} items, {args.threads} threads")
    for b in sizes:
        print(
            f"eval batch {b:>5}: {', '.join(f'{t:.2f}' for t in times[b])} s "
            f"(mean {statistics.mean(times[b]):.2f})"
            f"  N@10 {metrics[b]['ndcg@10']:.6f}"
        )
    assert len({m["ndcg@10"] for m in metrics.values()}) == 1, "metrics differ between batch sizes"
    if args.rows:
        with atomic_write(args.rows) as tmp:
            pd.DataFrame(rows).to_parquet(tmp, index=False)


if __name__ == "__main__":
    main()
