"""How much a model learns per epoch: validation NDCG@10 after each of the first epochs, one variant at a
time.

Issue 12 measured SASRec+ (RecSys'23) learning ~20% more per epoch than ModSAR at the same settings. This
script runs named variants of one base setup (the issue's: max length 50, hidden 64, 2 blocks, 1 head,
dropout 0.2, batch 128, Adam lr 1e-3, full-softmax CE, full ranking over all users with seen items removed),
same seeds, one after another in one process, and prints per-epoch validation NDCG@10 and seconds per epoch.

    python benchmarks/epoch_gap.py --dataset video --epochs 4 --variants base,token_batches,tok_post
    python benchmarks/epoch_gap.py --list            # the named variants and their overrides
    python benchmarks/epoch_gap.py --time-rounds 3 --variants base,token_batches   # s/epoch only, alternating

Learning curves are deterministic (same seed, same numbers under any load); seconds are not, so
`--time-rounds R` times training epochs only, alternating one epoch of each variant per round in one process
(order reversed every other round), and reports the mean and the ratio to the first variant.

Each finished run is appended to `--out` (JSON lines) as it ends, so a long background run keeps its figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from modsar.config import load_config
from modsar.data.batches import TrainBatches
from modsar.data.split import LeaveOneOut
from modsar.data.store import load_dataset
from modsar.training.trainer import build_model, make_optimizer, run_trial, seed_everything, train_epoch

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
    "eval.filter_seen=history",
    "train.patience=0",
    "eval.ks=[10]",
    # the trainer before issue 12 (its defaults then), so every row below changes only what it names
    "data.batching=length",
    "model.norm=pre",
    "model.init=normal",
    "model.attn_output_dropout=true",
]

TOKENS_POST = ["data.batching=tokens", "model.norm=post"]
VARIANTS: dict[str, list[str]] = {
    "base": [],
    "post_norm": ["model.norm=post"],
    "start_pos": ["model.positions_from=start"],
    "random_batches": ["data.batching=random"],
    "epoch_norm": ["loss.normalize=epoch"],
    "token_batches": ["data.batching=tokens"],
    "tok_post": TOKENS_POST,
    "tok_xavier": ["data.batching=tokens", "model.init=xavier"],
    "tok_xattn": ["data.batching=tokens", "model.init=xavier_attention"],
    "tok_ffn64": ["data.batching=tokens", "model.ffn_size=64", "model.activation=relu"],
    "tok_beta2": ["data.batching=tokens", "train.beta2=0.98"],
    "tok_post_embnorm": [*TOKENS_POST, "model.embedding_norm=true"],
    "tok_post_xattn": [*TOKENS_POST, "model.init=xavier_attention"],
    "tok_post_xattn_embnorm": [*TOKENS_POST, "model.init=xavier_attention", "model.embedding_norm=true"],
    "tok_post_xattn_noattnout": [
        *TOKENS_POST,
        "model.init=xavier_attention",
        "model.attn_output_dropout=false",
    ],
    # the 0.2 defaults: token batches, post-LN, SASRec+ init, no attention-output dropout
    "tok_post_splus_noattnout": [*TOKENS_POST, "model.init=sasrec_plus", "model.attn_output_dropout=false"],
    "s_pre": [
        "data.batching=tokens",
        "model.norm=pre",
        "model.init=sasrec_plus",
        "model.attn_output_dropout=false",
    ],
    "s_start": [
        *TOKENS_POST,
        "model.init=sasrec_plus",
        "model.attn_output_dropout=false",
        "model.positions_from=start",
    ],
    "s_ffn64": [
        *TOKENS_POST,
        "model.init=sasrec_plus",
        "model.attn_output_dropout=false",
        "model.ffn_size=64",
        "model.activation=relu",
    ],
    "defaults_bf16": [
        *TOKENS_POST,
        "model.init=sasrec_plus",
        "model.attn_output_dropout=false",
        "train.precision=bf16",
    ],  # the 0.2 defaults with the CE's products in bfloat16
    "s_sasrec": [
        "data.batching=tokens",
        "model.norm=sasrec",
        "model.init=sasrec_plus",
        "model.attn_output_dropout=false",
    ],
    "s_sasrec_exact": [
        "data.batching=tokens",
        "model.norm=sasrec",
        "model.init=sasrec_plus",
        "model.attn_output_dropout=false",
        "model.ffn_size=64",
        "model.activation=relu",
        "model.positions_from=start",
    ],
}


def config(overrides: list[str], dataset, epochs: int, seed: int, threads: int):
    return load_config(
        None,
        [
            *BASE,
            *overrides,
            f"dataset={dataset.name}",
            f"seed={seed}",
            f"train.max_epochs={epochs}",
            f"train.threads={threads}",
        ],
    )


def time_epochs(variants: dict[str, list[str]], names: list[str], dataset, rounds: int, threads: int) -> None:
    """Seconds per training epoch, one epoch of each variant per round, so machine load hits all alike."""
    torch.set_num_threads(threads)
    split = LeaveOneOut.from_log(dataset.user, dataset.item, dataset.num_users, dataset.num_items)
    runs = {}
    for name in names:
        cfg = config(variants[name], dataset, 1, 0, threads)
        seed_everything(cfg.seed)
        model = build_model(cfg, dataset.num_items, dataset.num_users, cfg.data.max_len).train()
        batches = TrainBatches(
            split,
            cfg.task,
            cfg.data.max_len,
            cfg.data.batch_size,
            cfg.mask_prob,
            cfg.data.padding_free,
            seed=cfg.seed,
            batching=cfg.data.batching,
        )
        runs[name] = (cfg, model, make_optimizer(model, cfg), batches, [])
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:  # A B, B A, ...: drift in machine load cancels
            cfg, model, optimizer, batches, times = runs[name]
            tick = time.perf_counter()
            train_epoch(model, optimizer, batches, cfg, torch.device("cpu"), r + 1)
            times.append(time.perf_counter() - tick)
            print(f"round {r + 1} {name:<16} {times[-1]:6.1f} s", flush=True)
    first = statistics.mean(runs[names[0]][4])
    print(f"\n| variant | s / training epoch (mean of {rounds}) | ratio to {names[0]} |\n|---|---|---|")
    for name, run in runs.items():
        print(f"| {name} | {statistics.mean(run[4]):.1f} | {statistics.mean(run[4]) / first:.2f} |")


def run(name: str, overrides: list[str], dataset, epochs: int, seed: int, threads: int) -> dict:
    cfg = config(overrides, dataset, epochs, seed, threads)
    curve: list[float] = []
    result = run_trial(
        cfg,
        dataset,
        on_eval=lambda epoch, m, *_: curve.append(m["ndcg@10"]),
        progress=False,
        evaluate_test=False,
    )
    return {
        "variant": name,
        "overrides": overrides,
        "seed": seed,
        "valid_ndcg@10": curve,
        "epoch_time_s": result.epoch_time_s,
        "eval_time_s": result.eval_time_s,
        "finished": time.time(),
    }


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    variants = dict(VARIANTS)
    for text in args.extra:
        name, _, body = text.partition(":")
        variants[name] = [x for x in body.split(",") if x]
    if args.list:
        for name, overrides in variants.items():
            print(f"{name:16s} {' '.join(overrides) or '(the base setup)'}")
        return 0
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in variants]
    if unknown:
        print(f"unknown variant(s) {', '.join(unknown)}; see --list", file=sys.stderr)
        return 2
    dataset = load_dataset(args.dataset)
    if args.time_rounds:
        time_epochs(variants, names, dataset, args.time_rounds, args.threads)
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for name in names:
            row = run(name, variants[name], dataset, args.epochs, seed, args.threads)
            rows.append(row)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(
                f"{name} seed {seed}: "
                + " / ".join(f"{v:.4f}" for v in row["valid_ndcg@10"])
                + f"  {row['epoch_time_s']:.1f} s/epoch",
                flush=True,
            )
    _print_table(variants, names, rows, args.epochs)
    return 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command line: dataset, epochs, seeds and variants (named or ad hoc), threads, output, and the
    --list and --time-rounds modes."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="video")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--variants", default="base", help="comma-separated names (see --list)")
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="NAME:KEY=V[,KEY=V]",
        help="an ad-hoc variant, e.g. --extra 'lr2:train.lr=0.002'",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="results/epoch_gap.jsonl")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--time-rounds", type=int, default=0, help="only time training epochs, R rounds")
    return parser.parse_args(argv)


def _print_table(variants: dict[str, list[str]], names: list[str], rows: list[dict], epochs: int) -> None:
    """The Markdown table: per variant, its overrides, the mean validation NDCG@10 after each epoch over the
    seeds, and the mean seconds per epoch."""
    print(
        f"\n| variant | overrides | valid NDCG@10 after epoch {' / '.join(map(str, range(1, epochs + 1)))} "
        "| s / epoch |\n|---|---|---|---|"
    )
    for name in names:
        mine = [r for r in rows if r["variant"] == name]
        curve = [statistics.mean(r["valid_ndcg@10"][e] for r in mine) for e in range(epochs)]
        print(
            f"| {name} | `{' '.join(variants[name]) or '-'}` | {' / '.join(f'{v:.4f}' for v in curve)} | "
            f"{statistics.mean(r['epoch_time_s'] for r in mine):.1f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
