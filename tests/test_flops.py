"""Model FLOPs per epoch by hand for a small model, and the speed facts every trial writes."""

from __future__ import annotations

import math

import pytest

from modsar.config import Config
from modsar.model import registry
from modsar.training.flops import epoch_flops
from modsar.training.trainer import run_trial


@pytest.mark.parametrize(
    ("loss", "candidates"), [({"name": "ce"}, 30), ({"name": "bce", "num_negatives": 4}, 5)]
)
def test_epoch_flops_by_hand(loss, candidates):
    cfg = Config.from_dict(
        {"model": {"hidden_size": 8, "num_layers": 1, "num_heads": 1, "ffn_size": 32}, "loss": loss}
    )
    model = registry.build(cfg, 30, 5, 10)
    dense = 3 * 8 * 8 + 8 * 8 + 8 * 32 + 32 * 8  # qkv, output projection, FFN; biases, norms, tables are not
    output, total = epoch_flops(model, cfg, tokens=10, labelled=7, num_items=30)
    assert output == 6 * 7 * candidates * 8
    assert total == output + 6 * dense * 10


def test_a_trial_reports_its_flops_rate_and_mfu():
    import torch

    threads = torch.get_num_threads()
    cfg = Config.from_dict(
        {
            "dataset": "synthetic",
            "train": {"max_epochs": 1, "threads": 1},
            "model": {"hidden_size": 16, "num_layers": 1},
        }
    )
    try:
        result = run_trial(cfg, progress=False)
    finally:
        torch.set_num_threads(threads)  # the rest of the session keeps its threads
    assert result.epoch_gflop > 0
    assert result.gflops == pytest.approx(result.epoch_gflop / result.epoch_time_s)
    assert 0 < result.mfu < 2 and math.isfinite(result.mfu)


def test_the_heap_threshold_is_set_with_glibc():
    import platform

    from modsar.training.heap import bound_heap, roomy_heap

    assert bound_heap() is (platform.libc_ver()[0] == "glibc")
    with roomy_heap():  # evaluation's setting, then the training threshold again
        pass
    assert bound_heap() is (platform.libc_ver()[0] == "glibc")
