"""Training-epoch and full-ranking evaluation time per backbone on each available device, in one run.

    python benchmarks/device_speed.py [--users 31013 --items 23715] [--devices cuda,cpu] [--epochs 2]

The log is synthetic but Video-sized (Amazon Video 5-core: 31,013 users, 23,715 items, mean length 9.3),
so no licensed data has to travel to a GPU machine. Each backbone is trained for `--epochs` epochs on each
device from the same initial weights; the first epoch is reported separately (CUDA warm-up, cuDNN/SDPA
kernel selection) and the mean of the rest as the steady-state time. Evaluation is one exact full-ranking
pass over every validation user. Ratios between devices are measured in the same process.
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
from modsar.data.synthetic import generate
from modsar.evaluation.ranking import evaluate, model_scorer
from modsar.training.trainer import build_model, make_optimizer, seed_everything, train_epoch

BACKBONES = {
    "modular AR ce": ["task=ar", "loss.name=ce"],
    "modular AE ce": ["task=ae", "loss.name=ce"],
    "modular AR local w=20": [
        "task=ar",
        "loss.name=ce",
        "model.num_heads=2",
        "model.local_heads=2",
        "model.local_window=20",
    ],
    "hf llama AR": ["task=ar", "loss.name=ce", "model.backbone=llama", "model.dropout=0"],
    "hf albert AE": ["task=ae", "loss.name=ce", "model.backbone=albert"],
}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    args = _arguments()
    devices = [torch.device(d) for d in args.devices.split(",") if d != "cuda" or torch.cuda.is_available()]
    log = generate(num_users=args.users, num_items=args.items, min_len=5, max_len=14, seed=0)
    split = LeaveOneOut.from_log(log.user, log.item, args.users, args.items)
    print(
        f"synthetic log: {args.users:,} users, {args.items:,} items, {len(log.item):,} interactions; "
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
        f"devices {[str(d) for d in devices]}"
    )
    if any(d.type == "cuda" for d in devices):
        print(f"GPU: {torch.cuda.get_device_name(0)}")
    print(
        f"{'backbone':<28} {'device':<7} {'1st epoch s':>11} {'epoch s':>8} {'eval s':>7} {'loss':>7} "
        f"{'valid N@10':>10}"
    )
    for name in args.backbones.split(","):
        cfg = load_config(
            None,
            [
                "dataset=synthetic",
                "model.hidden_size=64",
                "model.num_layers=2",
                "data.max_len=50",
                *BACKBONES[name],
                *args.overrides,
            ],
        )
        seed_everything(cfg.seed)
        base = build_model(cfg, args.items, args.users, cfg.data.max_len)
        for device in devices:
            _time_on(name, cfg, base, split, device, args.epochs)


def _arguments() -> argparse.Namespace:
    """The command line: the log's size, the devices, epochs and backbones, and overrides for every one."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=31013)
    parser.add_argument("--items", type=int, default=23715)
    parser.add_argument("--devices", default="cuda,cpu")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--backbones", default=",".join(BACKBONES))
    parser.add_argument("overrides", nargs="*", help="config overrides applied to every backbone")
    return parser.parse_args()


def _time_on(name: str, cfg, base: torch.nn.Module, split, device: torch.device, epochs: int) -> None:
    """Train a copy of `base` (the same initial weights on every device) for `epochs` epochs on `device`,
    then one full-ranking validation pass, and print its line: first-epoch, steady-state and eval seconds."""
    model = copy.deepcopy(base).to(device).train()
    optimizer = make_optimizer(model, cfg)
    batches = TrainBatches(
        split,
        cfg.task,
        cfg.data.max_len,
        cfg.data.batch_size,
        cfg.mask_prob,
        cfg.data.padding_free,
        seed=cfg.seed,
    )
    times, loss = [], float("nan")
    for epoch in range(1, epochs + 1):
        synchronize(device)
        tick = time.perf_counter()
        loss = train_epoch(model, optimizer, batches, cfg, device, epoch)
        synchronize(device)
        times.append(time.perf_counter() - tick)
    model.eval()
    tick = time.perf_counter()
    metrics = evaluate(
        model_scorer(model),
        split,
        "valid",
        cfg.eval,
        cfg.task,
        cfg.data.max_len,
        cfg.data.eval_batch_size,
        device,
    )
    synchronize(device)
    eval_s = time.perf_counter() - tick
    steady = np.mean(times[1:]) if len(times) > 1 else times[0]
    print(
        f"{name:<28} {device.type:<7} {times[0]:>11.2f} {steady:>8.2f} {eval_s:>7.2f} {loss:>7.3f} "
        f"{metrics['ndcg@10']:>10.4f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
