"""Peak memory and time per training step of sampled_ce: one matrix product vs the old per-row broadcast.

    python benchmarks/sampled_ce_memory.py [--steps 6] [--threads 1] [--max-gb 2] \
        [--variants TASK:LOSS:K:BATCH:PATH ...]

Why (issue 11): sampled_ce used to score its K shared negatives by expanding them per position and summing a
broadcast product, which materialises (positions x K x d) tensors. With search_spaces/loss_sampled.yaml
(K up to 3000) on ML-1M (max_len 200, batch 128) that is about 20 GB per tensor. It now computes one
(positions x d) @ (d x K) product, so its memory grows with positions x K.

The log is synthetic but ML-1M-sized (6,040 users, 3,416 items, 1,000,209 interactions; at least 20 per
user, mean 165.6, exponential tail), so batch shapes match ML-1M without the licensed data. Model: the
loss_sampled base (2 layers, hidden 64, 1 head, dropout 0.2, Adam lr 1e-3), max_len 200, padding-free.

Each variant TASK:LOSS:K:BATCH:PATH runs in a fresh subprocess: TASK ar|ae (AE: mask_prob 0.2), LOSS
sampled_ce|ce (ce: full softmax, K ignored), PATH matmul (this repository's code) or broadcast (the
pre-issue-11 scoring, replicated in this script only). The child trains `--steps` steps (forward, backward,
Adam) on the epoch's batches with the most labelled positions, i.e. the epoch's worst case for memory, and
reports its peak resident memory (ru_maxrss) after setup (data, model, optimizer) and after the steps, and
the time of the fastest step after the first (load from other jobs only ever adds time; memory does not
drift with it). Same seed, same batches: a broadcast row's last loss equals its matmul twin's up to rounding.

A broadcast variant whose (positions x K x d) tensor would exceed --max-gb is skipped: at K=3000 and batch
128 the old path would exhaust a 24 GB machine. The broadcast rows at small K are fitted with a line in K
and extrapolated to K=3000 (an estimate, printed as such).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import torch

from modsar.config import Config, load_config
from modsar.data.batches import Batch, TrainBatches
from modsar.data.split import LeaveOneOut
from modsar.model.losses import training_loss
from modsar.model.modular import ModularSAR
from modsar.training.trainer import build_model, make_optimizer, seed_everything

USERS, ITEMS, INTERACTIONS, MIN_LEN, MAX_LEN, HIDDEN = 6040, 3416, 1_000_209, 20, 200, 64
DEFAULT_VARIANTS = [
    "ar:ce:0:128:matmul",
    "ar:sampled_ce:3000:128:matmul",
    "ar:sampled_ce:256:128:matmul",
    "ar:sampled_ce:64:128:matmul",
    "ar:sampled_ce:64:128:broadcast",
    "ar:sampled_ce:128:128:broadcast",
    "ar:sampled_ce:256:128:broadcast",
    "ar:sampled_ce:3000:128:broadcast",
    "ar:sampled_ce:3000:8:matmul",
    "ar:sampled_ce:3000:8:broadcast",
    "ae:ce:0:128:matmul",
    "ae:sampled_ce:3000:128:matmul",
    "ae:sampled_ce:256:128:broadcast",
    "ae:sampled_ce:1024:128:broadcast",
    "ae:sampled_ce:3000:128:broadcast",
]


def ml1m_like_split(seed: int = 0) -> LeaveOneOut:
    """Uniform random items; per-user lengths >= 20 with ML-1M's total, so the batch shapes match."""
    rng = np.random.default_rng(seed)
    extra = rng.exponential(1.0, USERS)
    lengths = MIN_LEN + np.floor(extra * (INTERACTIONS - MIN_LEN * USERS) / extra.sum()).astype(np.int64)
    lengths[rng.choice(USERS, INTERACTIONS - lengths.sum(), replace=False)] += 1
    user = np.repeat(np.arange(1, USERS + 1), lengths)
    return LeaveOneOut.from_log(user, rng.integers(1, ITEMS + 1, INTERACTIONS), USERS, ITEMS)


def parse(variant: str) -> dict:
    task, loss, k, batch, path = variant.split(":")
    if task not in ("ar", "ae") or loss not in ("ce", "sampled_ce") or path not in ("matmul", "broadcast"):
        raise SystemExit(f"bad variant {variant!r}; expected TASK:LOSS:K:BATCH:PATH, see --help")
    return {
        "task": task,
        "loss": loss,
        "k": int(k) if loss == "sampled_ce" else 0,
        "batch": int(batch),
        "path": path if loss == "sampled_ce" else "-",
        "name": variant,
    }


def config(spec: dict) -> Config:
    return load_config(
        None,
        [
            f"task={spec['task']}",
            "model.num_layers=2",
            f"model.hidden_size={HIDDEN}",
            "model.num_heads=1",
            "train.optimizer=adam",
            "train.lr=0.001",
            "mask_prob=0.2",
            f"data.max_len={MAX_LEN}",
            f"data.batch_size={spec['batch']}",
            f"loss.name={spec['loss']}",
            f"loss.num_negatives={max(spec['k'], 1)}",
        ],
    )


def heaviest_batches(split: LeaveOneOut, cfg: Config, steps: int) -> list[Batch]:
    batches = TrainBatches(split, cfg.task, MAX_LEN, cfg.data.batch_size, cfg.mask_prob, True, seed=cfg.seed)
    return sorted(batches, key=lambda b: int((b.labels > 0).sum()), reverse=True)[:steps]


def broadcast_score(
    self: ModularSAR,
    hidden: torch.Tensor,
    users: torch.Tensor | None = None,
    items: torch.Tensor | None = None,
) -> torch.Tensor:
    """ModularSAR.score before issue 11, fed what sampled_ce passed it then: negatives expanded per row."""
    if items is not None and items.dim() == 1:
        items = items[None, :].expand(len(hidden), -1)
    h_item = hidden[..., : self.item_dim]
    if items is None:
        scores = h_item @ self.item_emb.weight[1 : self.num_items + 1].T
    else:
        scores = (h_item.unsqueeze(-2) * self.item_emb(items)).sum(-1)
    if self.user_emb is not None and users is not None:
        scores = scores + (hidden[..., self.item_dim :] * self.user_emb(users)).sum(-1, keepdim=True)
    return scores


def max_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def child(spec: dict, steps: int) -> dict:
    """One variant in this (fresh) process: its peak RSS is the variant's alone."""
    cfg = config(spec)
    split = ml1m_like_split()
    seed_everything(cfg.seed)
    model = build_model(cfg, ITEMS, USERS, MAX_LEN).train()
    if spec["path"] == "broadcast":
        ModularSAR.score = broadcast_score
    optimizer = make_optimizer(model, cfg)
    batches = heaviest_batches(split, cfg, steps)
    setup = max_rss_gb()
    times, loss = [], torch.tensor(float("nan"))
    for batch in batches:
        tick = time.perf_counter()
        hidden = model(batch.inputs, batch.users)
        loss = training_loss(model, hidden, batch.labels, batch.users, cfg.loss, cfg.data.padding_free)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - tick)
    return {
        "positions": int((batches[0].labels > 0).sum()),
        "setup_gb": setup,
        "peak_gb": max_rss_gb(),
        "s_per_step": min(times[1:] or times),
        "loss": float(loss),
    }


def broadcast_gb(positions: int, k: int) -> float:
    """Size of one (positions x K x d) float32 tensor of the old path."""
    return positions * k * HIDDEN * 4 / 1e9


def run_variant(spec: dict, steps: int, threads: int) -> dict | str:
    """The child's measurements, or why there are none (a killed child says so instead of a number)."""
    command = [
        sys.executable,
        __file__,
        "--steps",
        str(steps),
        "--threads",
        str(threads),
        "--child",
        json.dumps(spec),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return f"failed (exit {done.returncode}): {done.stderr.strip()[-200:]}"
    return {**spec, **json.loads(done.stdout.strip().splitlines()[-1])}


def main() -> None:
    args = _arguments()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(child(json.loads(args.child), args.steps)))
        return

    split = ml1m_like_split()
    print(
        f"synthetic ML-1M-sized log: {USERS:,} users, {ITEMS:,} items, {len(split.items):,} interactions "
        f"(mean length {len(split.items) / USERS:.1f}); max_len {MAX_LEN}, hidden {HIDDEN}; "
        f"{args.steps} steps per variant on the heaviest batches; torch {torch.__version__}, "
        f"torch threads {torch.get_num_threads()}; load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| variant | K | batch | positions | setup RSS | peak RSS | peak - setup | s/step | last loss |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for spec in map(parse, args.variants):
        positions = int((heaviest_batches(split, config(spec), 1)[0].labels > 0).sum())
        kind = f"sampled_ce {spec['path']}" if spec["k"] else "ce (full softmax)"
        label = f"{spec['task'].upper()} {kind}"
        cells = f"| {label} | {spec['k'] or '-'} | {spec['batch']} | {positions:,} |"
        one_tensor = broadcast_gb(positions, spec["k"])
        if spec["path"] == "broadcast" and one_tensor > args.max_gb:
            print(f"{cells} skipped: one (P, K, d) tensor is {one_tensor:.1f} GB | | | | |", flush=True)
            continue
        result = run_variant(spec, args.steps, args.threads)
        if isinstance(result, str):
            print(f"{cells} {result} | | | | |", flush=True)
            continue
        rows.append(result)
        setup, peak = result["setup_gb"], result["peak_gb"]
        print(
            f"{cells} {setup:.2f} GB | {peak:.2f} GB | {peak - setup:.2f} GB | "
            f"{result['s_per_step']:.2f} | {result['loss']:.4f} |",
            flush=True,
        )
    extrapolate(rows)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


def _arguments() -> argparse.Namespace:
    """The command line: the variants, steps, memory cap and threads; --child runs one variant in this
    process (how the parent measures each in its own)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=DEFAULT_VARIANTS,
        metavar="TASK:LOSS:K:BATCH:PATH",
        help="variants to run, each in its own subprocess (default: the table RESULTS.md once showed)",
    )
    parser.add_argument("--steps", type=int, default=6, help="training steps per variant (first = warm-up)")
    parser.add_argument(
        "--max-gb",
        type=float,
        default=2.0,
        help="skip a broadcast variant whose (positions x K x d) tensor exceeds this many "
        "GB; the old path holds about 3 of them at once",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads per child (0 = torch's default); 1 is steadier on a busy machine",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args()


def extrapolate(rows: list[dict]) -> None:
    """Fit the old path's step memory (peak - setup) with a line in K per task and batch; estimate K=3000."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for row in rows:
        if row["path"] == "broadcast":
            groups.setdefault((row["task"], row["batch"]), []).append(row)
    for (task, batch), group in sorted(groups.items()):
        ks = np.array([r["k"] for r in group], dtype=float)
        if len(set(ks)) < 2:
            continue
        slope, intercept = np.polyfit(ks, [r["peak_gb"] - r["setup_gb"] for r in group], 1)
        positions = max(r["positions"] for r in group)
        copies = slope * 1e9 / (positions * HIDDEN * 4)
        print(
            f"\nestimate, broadcast {task.upper()} batch {batch} ({positions:,} positions): step memory "
            f"~ {intercept:.2f} GB + {slope * 1000:.2f} GB per 1000 negatives (~{copies:.1f} float32 "
            f"(P, K, d) tensors); at K=3000 ~ {intercept + slope * 3000:.1f} GB on top of setup"
        )


if __name__ == "__main__":
    main()
