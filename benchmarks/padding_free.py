"""Epoch time with and without the padding-free computation, measured as a ratio within one run.

    python benchmarks/padding_free.py --dataset video [--rounds 2] [--max-len 50] [--threads 2]

Both modes train the same model (same initial weights, same config) and alternate epoch by epoch, so a
noisy, shared machine slows both alike. "dense" pads every batch to max_len and runs the output layer and
loss at every slot (masking padding afterwards); "padding-free" uses length-bucketed batches and runs the
output layer only at labelled positions.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch

from modsar.config import load_config
from modsar.data.batches import TrainBatches
from modsar.data.split import LeaveOneOut
from modsar.data.store import load_dataset
from modsar.training.trainer import build_model, make_optimizer, seed_everything, train_epoch


def main() -> None:
    args = _arguments()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(args.config, [f"dataset={args.dataset}", *args.overrides])
    data = load_dataset(cfg.dataset)
    split = LeaveOneOut.from_log(data.user, data.item, data.num_users, data.num_items)
    max_len = cfg.data.max_len or data.default_max_len
    seed_everything(cfg.seed)
    base = build_model(cfg, data.num_items, data.num_users, max_len)
    runs = {}
    for mode, padding_free in (("padding-free", True), ("dense", False)):
        mode_cfg = copy.deepcopy(cfg)
        mode_cfg.data.padding_free = padding_free
        model = copy.deepcopy(base).train()
        batches = TrainBatches(
            split, cfg.task, max_len, cfg.data.batch_size, cfg.mask_prob, padding_free, seed=cfg.seed
        )
        slots = sum(
            b.inputs.numel()
            for b in TrainBatches(
                split, cfg.task, max_len, cfg.data.batch_size, cfg.mask_prob, padding_free, seed=cfg.seed
            )
        )
        runs[mode] = {
            "cfg": mode_cfg,
            "model": model,
            "opt": make_optimizer(model, mode_cfg),
            "batches": batches,
            "times": [],
            "slots": slots,
        }
    device = torch.device("cpu")
    for r in range(args.rounds):
        for mode, run in runs.items():
            tick = time.perf_counter()
            loss = train_epoch(run["model"], run["opt"], run["batches"], run["cfg"], device, r + 1)
            run["times"].append(time.perf_counter() - tick)
            print(f"round {r + 1} {mode:<13} {run['times'][-1]:7.1f} s  loss {loss:.4f}", flush=True)
    _print_summary(cfg, runs)


def _arguments() -> argparse.Namespace:
    """The command line: dataset, config and overrides, rounds and threads."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="video")
    parser.add_argument("--config", default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("overrides", nargs="*")
    return parser.parse_args()


def _print_summary(cfg, runs: dict[str, dict]) -> None:
    """Seconds per epoch and batch slots (with their share of padding) of both modes, and their ratio."""
    free, dense = (np.mean(runs[m]["times"]) for m in ("padding-free", "dense"))
    targets = runs["padding-free"]["batches"].num_targets
    print(
        f"\n{cfg.dataset}: {len(runs['dense']['batches'])} batches of {cfg.data.batch_size}, "
        f"{targets:,} labelled positions per epoch"
    )
    for mode, run in runs.items():
        print(
            f"  {mode:<13} {np.mean(run['times']):7.1f} s/epoch   {run['slots']:>10,} batch slots "
            f"({100 * (1 - targets / run['slots']):.0f}% padding)"
        )
    print(
        f"  dense / padding-free epoch-time ratio: {dense / free:.2f}x  (torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads)"
    )


if __name__ == "__main__":
    main()
