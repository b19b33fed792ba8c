"""`modsar generate`: H-step rollouts from each test user's history, compared with the true future."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from modsar.cli.common import Subparsers, add_command, add_data_dir, print_json
from modsar.errors import ModsarError
from modsar.outputs import to_json

EPILOG = """examples:
  modsar generate --checkpoint results/train-ml-100k/checkpoints/ar-1234abcd.pt --steps 10
  modsar generate --checkpoint C --steps 10 --strategy nucleus --top-p 0.9 --seed 1 --out results/gen-nucleus
  modsar generate --checkpoint C --steps 20 --strategy topk --top-k 5 --exclude history --json

Every test user's history is continued for H steps with the model's own picks (AE: by appending a mask
token), then compared with the user's true future: the log from the test target on. Under leave-one-out the
future is one item; train with data.split=temporal for a real multi-item future. Under
data.split_targets=every a user has a history per test timestamp, each rolled out once: the counts (and
--users) are of histories, not users. Metrics (defined in
modsar/evaluation/rollouts.py): alignment (hits, recall, NDCG, exact order), diversity (distinct ratio, \
immediate repeats,
distinct-2), entropy of generated vs true future items, catalogue coverage, the share of top-1% popular
items (mode collapse) and unseen transitions (oscillation). --json prints them; --out adds rollouts.parquet,
steps.parquet, metrics.json and generate.png."""


def add_parser(sub: Subparsers) -> None:
    """The `generate` command and its options."""
    gen = add_command(
        sub, "generate", "H-step rollouts from each test user's history vs the true future", run, EPILOG
    )
    gen.add_argument("--checkpoint", required=True, help="a best.pt written by modsar train or search")
    gen.add_argument("--steps", type=int, required=True, help="H, items generated per user")
    _add_sampling(gen)
    gen.add_argument(
        "--users",
        type=int,
        default=0,
        help="a seeded sample of this many test histories, one "
        "rollout each (0 = all): one per user, or under data.split_targets=every one per user and "
        "test timestamp",
    )
    gen.add_argument("--batch-size", type=int, default=512, help="users per forward pass (default 512)")
    gen.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    gen.add_argument("--json", action="store_true", help="print the metrics as JSON")
    gen.add_argument("--quiet", action="store_true", help="no progress bar")
    gen.add_argument(
        "--out", help="write rollouts.parquet, steps.parquet, metrics.json and generate.png here"
    )
    add_data_dir(gen)


def _add_sampling(gen: argparse.ArgumentParser) -> None:
    """How each next item is picked: the strategy, its parameters, the excluded items and the seed."""
    gen.add_argument("--strategy", default="greedy", help="greedy | topk | nucleus (default: %(default)s)")
    gen.add_argument("--top-k", type=int, default=10, help="topk: sample among the k best items (default 10)")
    gen.add_argument(
        "--top-p",
        type=float,
        default=0.9,
        help="nucleus: the smallest set of items holding this probability mass (default 0.9)",
    )
    gen.add_argument("--temperature", type=float, default=1.0, help="topk/nucleus: softmax temperature")
    gen.add_argument(
        "--exclude",
        default="auto",
        help="items a pick may not be: none | history | rollout (earlier "
        "picks) | all; auto (default) = history where the checkpoint's evaluation filters seen items "
        "(eval.filter_seen=history), else none",
    )
    gen.add_argument("--seed", type=int, default=0, help="sampling and --users sample seed (default 0)")


def run(args: argparse.Namespace) -> int:
    """Roll out every (sampled) test history; print the metrics, or JSON, and write the files to --out."""
    from modsar.devices import resolve as resolve_device
    from modsar.evaluation import rollouts as generate
    from modsar.training.checkpoints import checkpoint_split, load_checkpoint

    if not Path(args.checkpoint).is_file():
        raise ModsarError(f"checkpoint '{args.checkpoint}' does not exist")
    if args.users < 0 or args.batch_size < 1:
        raise ModsarError("--users must be >= 0 and --batch-size >= 1")
    if not 0 <= args.seed < 2**32:  # numpy's and torch's seeds, as the config's 'seed'
        raise ModsarError(f"--seed must be in 0..{2**32 - 1}; got {args.seed}")
    sampler = generate.Sampler(args.strategy, args.top_k, args.top_p, args.temperature)
    sampler.check()  # before the checkpoint and the data are loaded
    device = resolve_device(args.device, "--device")
    model, cfg, payload = load_checkpoint(args.checkpoint, str(device))
    split = checkpoint_split(cfg, args.data_dir)
    exclude = generate.resolve_exclude(args.exclude, cfg.eval.filter_seen)
    result = generate.generate(
        model,
        split,
        cfg.task,
        payload["max_len"],
        args.steps,
        sampler,
        exclude,
        args.seed,
        args.users,
        args.batch_size,
        device,
        progress=not args.quiet,
    )
    facts = {
        "checkpoint": str(args.checkpoint),
        "dataset": cfg.dataset,
        "task": cfg.task,
        "split": cfg.data.split,
        "strategy": args.strategy,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "temperature": args.temperature,
        "exclude": exclude,
        "seed": args.seed,
    }
    if args.json:
        print_json(args, to_json({**facts, **result.metrics}))
    else:
        _print_metrics(args, facts, result.metrics, result.counted())
    if args.out:
        written = generate.write(result, args.out, facts)
        if not args.json:
            print(f"wrote {len(written)} file(s) to {args.out}: {', '.join(p.name for p in written)}")
    return 0


def _print_metrics(
    args: argparse.Namespace, facts: dict[str, Any], metrics: dict[str, Any], counted: str
) -> None:
    """A heading (model, split, strategy, steps, who was rolled out), then one metric a line. `counted` names
    users, or histories where a user has several (data.split_targets=every)."""
    print(
        f"{facts['task'].upper()} {facts['dataset']} ({facts['split']} split), {args.strategy} rollouts of "
        f"{args.steps} steps for {counted} ({metrics['future_items_per_user']:.2f} true future "
        "items each"
        + ("; the users_* and *_per_user figures count histories" if "histories" in counted else "")
        + "):"
    )
    width = max(map(len, metrics))
    for key, value in metrics.items():
        if key not in ("users", "steps"):
            print(
                f"  {key:<{width}}  {value:.4f}" if isinstance(value, float) else f"  {key:<{width}}  {value}"
            )
