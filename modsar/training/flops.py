"""Model FLOPs of a training epoch, and the share of the device's matmul rate a trial reaches (MFU, as
nanoGPT reports it), so a slow trial shows as slow against the machine, not only against another trial.

FLOPs count the weight products, forward + backward = 6 per weight per use: the encoder's dense weights at
every real input position and the output layer's d x C product at every labelled position (C = all N items
for `ce`, the target + k candidates for the sampled losses). Attention scores (~12 L d T per position, 1% of
the Video CE epoch) and DuoRec's extra contrastive forward passes are not counted. The peak is measured, not
read from a data sheet: the rate of a large square matmul in the training dtype, on this device, with this
process's threads (so MFU on a shared CPU compares the trial with what the same threads reach on matmuls).
"""

from __future__ import annotations

import functools
import time

import torch
from torch import nn

from modsar.config import Config
from modsar.model.interface import Recommender


def output_candidates(cfg: Config, num_items: int) -> int:
    """Items the output layer scores at each labelled position."""
    return num_items if cfg.loss.name == "ce" else 1 + cfg.loss.num_negatives


def epoch_flops(
    model: Recommender, cfg: Config, tokens: int, labelled: int, num_items: int
) -> tuple[float, float]:
    """(output-layer FLOPs, model FLOPs) of one training epoch with `tokens` real input positions, `labelled`
    of them with a label."""
    tables = {
        id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters(recurse=False)
    }
    dense = sum(p.numel() for p in dict.fromkeys(model.parameters()) if id(p) not in tables and p.dim() >= 2)
    width = model.item_emb.embedding_dim
    output = 6.0 * labelled * output_candidates(cfg, num_items) * width
    return output, output + 6.0 * dense * tokens


@functools.cache
def matmul_peak(device: str, dtype: torch.dtype, threads: int) -> float:
    """FLOP/s of an n x n x n matmul (n 2048 on CPU, 8192 on CUDA), best of three after a warm-up. `threads`
    is part of the cache key only: the rate is that of the process's current thread count."""
    n = 8192 if device.startswith("cuda") else 2048
    # a private generator: drawing from torch's global one would shift the trial's dropout stream, so the
    # trial that first measures the peak in a process would train differently from every other one
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=generator).to(dtype)
    b = torch.randn(n, n, device=device, generator=generator).to(dtype)
    best = float("inf")
    for _ in range(4):
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        tick = time.perf_counter()
        a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - tick)
    return 2.0 * n**3 / best


def utilisation(flops: float, seconds: float, device: torch.device, dtype: torch.dtype) -> float:
    """Model FLOPs per second of training over the measured matmul peak (0..1, rarely above)."""
    peak = matmul_peak(str(device), dtype, torch.get_num_threads())
    return flops / seconds / peak if seconds > 0 else float("nan")
