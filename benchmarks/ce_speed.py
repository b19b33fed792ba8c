"""Seconds per full-softmax CE training epoch and the output layer's GFLOP/s: plain logits vs the fused,
chunked CE (fp32 and bf16), measured in one process, alternating, so machine load hits all variants alike.

    python benchmarks/ce_speed.py --dataset video --rounds 3 --threads 2
    python benchmarks/ce_speed.py --dataset video --rounds 2 --batches 60 --variants plain,fused   # quicker
    python benchmarks/ce_speed.py --dataset beauty --variants fused --threads 1 --chunk-elements 1048576

`--chunk-elements` sets the fused loss's logits per chunk (modsar.model.fused_ce.CHUNK_ELEMENTS, sized to
a cache); two such processes side by side, one thread each, share the last-level cache as a search's two
trials do.

The setup is issue 17's (max length 50, hidden 64, 2 blocks, 1 head, batch 128, Adam lr 1e-3, ModSAR's
defaults otherwise). Each round trains every variant (a fresh model, same seed, same batches) for `--batches`
batches of the epoch plan (0 = the whole epoch) and times (a) the whole training step and (b) the output
layer alone: the loss and its backward on the batch's final hidden states, detached, which is where ~90% of
the FLOPs are (6 x positions x items x d). Epoch seconds are scaled from the batches timed to the whole plan.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from modsar.config import load_config
from modsar.data.batches import TrainBatches
from modsar.data.split import make_split
from modsar.data.store import load_dataset
from modsar.model import fused_ce
from modsar.model.losses import training_loss
from modsar.training.trainer import batch_loss, build_model, make_optimizer, output_dtype, seed_everything

BASE = [
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
]
VARIANTS = {"plain": ["loss.fused=false"], "fused": [], "fused_bf16": ["train.precision=bf16"]}


def main() -> None:
    args = _arguments()
    torch.set_num_threads(args.threads)
    if args.chunk_elements:  # the loss looks chunk_rows up when it runs
        default = fused_ce.chunk_rows
        fused_ce.chunk_rows = lambda items: default(items, args.chunk_elements)  # type: ignore[assignment]
    names = args.variants.split(",")
    dataset = load_dataset(args.dataset)
    cfgs = {n: load_config(None, [*BASE, *VARIANTS[n], f"dataset={args.dataset}"]) for n in names}
    first = cfgs[names[0]]
    split = make_split(first, dataset)
    batches = TrainBatches(split, "ar", 50, first.data.batch_size, seed=0, batching=first.data.batching)
    plan = batches.epoch_plan()
    timed = plan[: args.batches] if args.batches else plan
    made = [batches.make(rows) for rows in timed]
    positions = sum(int((b.labels > 0).sum()) for b in made)
    flop = 6.0 * positions * dataset.num_items * first.model.hidden_size  # output layer, fwd + bwd
    scale = len(plan) / len(timed)
    print(
        f"{args.dataset}: {len(plan)} batches per epoch, timing {len(timed)} ({positions:,} labelled "
        f"positions, output layer {flop / 1e12:.3f} TFLOP), {args.threads} threads"
    )
    step_s: dict[str, list[float]] = {n: [] for n in names}
    head_s: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            step, head = _time_variant(cfgs[name], dataset, made)
            step_s[name].append(step * scale)
            head_s[name].append(head)
    _print_table(names, step_s, head_s, flop)


def _arguments() -> argparse.Namespace:
    """The command line: which dataset and variants, how many rounds, batches and threads."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="video")
    parser.add_argument("--variants", default="plain,fused,fused_bf16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=0, help="batches timed per round (0 = whole epoch)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chunk-elements", type=int, default=0, help="fused logits per chunk (0: default)")
    return parser.parse_args()


def _time_variant(cfg, dataset, made: list) -> tuple[float, float]:
    """(seconds of the training steps over `made`, seconds of the output layer's forward and backward alone)
    for a fresh model of one variant, seeded the same for every variant and round."""
    seed_everything(0)
    model = build_model(cfg, dataset.num_items, dataset.num_users, 50).train()
    optimizer = make_optimizer(model, cfg)
    dtype = output_dtype(cfg)
    tick = time.perf_counter()
    for b in made:
        loss = batch_loss(model, b, cfg, 1.0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    step = time.perf_counter() - tick
    head = 0.0
    for b in made:
        with torch.no_grad():
            hidden = model(b.inputs, b.users)
        hidden.requires_grad_()
        tick = time.perf_counter()
        training_loss(model, hidden, b.labels, b.users, cfg.loss, dtype=dtype).backward()
        head += time.perf_counter() - tick  # the output layer alone
    return step, head


def _print_table(
    names: list[str], step_s: dict[str, list[float]], head_s: dict[str, list[float]], flop: float
) -> None:
    """Seconds per epoch of each variant per round, their mean and ratio to the first variant, and the output
    layer's seconds and GFLOP/s."""
    print(
        f"{'variant':<12} {'s / epoch (rounds)':<34} {'mean':>6} {'ratio':>6}   "
        "output layer s (timed) GFLOP/s"
    )
    base = statistics.mean(step_s[names[0]])
    for n in names:
        mean = statistics.mean(step_s[n])
        print(
            f"{n:<12} {', '.join(f'{t:.1f}' for t in step_s[n]):<34} {mean:6.1f} {mean / base:6.2f}   ",
            end="",
        )
        print(f"{statistics.mean(head_s[n]):.2f} s  {flop / statistics.mean(head_s[n]) / 1e9:.0f}")


if __name__ == "__main__":
    main()
