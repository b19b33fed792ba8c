"""train.optimizer=adamw_bert: BERT's AdamW (no bias correction, eps inside, decoupled decay) step by step."""

from __future__ import annotations

import math

import pytest
import torch

from modsar.config import load_config
from modsar.model.registry import build
from modsar.training.optim import BertAdamW
from modsar.training.trainer import make_optimizer


def test_two_steps_by_hand():
    p = torch.nn.Parameter(torch.tensor([1.0]))
    opt = BertAdamW([p], lr=0.1, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
    m = v = 0.0
    value = 1.0
    for g in (0.5, -1.0):
        p.grad = torch.tensor([g])
        opt.step()
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        value -= 0.1 * (m / (math.sqrt(v) + 1e-6) + 0.01 * value)
        assert p.item() == pytest.approx(value, rel=1e-6)
    first = 1.0 - 0.1 * (0.05 / (math.sqrt(0.00025) + 1e-6) + 0.01)  # step 1 written out: m = .05, v = .00025
    assert value == pytest.approx(
        first - 0.1 * ((0.045 - 0.1) / (math.sqrt(0.999 * 0.00025 + 0.001) + 1e-6) + 0.01 * first), rel=1e-9
    )
    # torch's AdamW corrects the bias: its first step moves by lr (the normalised gradient is exactly 1)
    q = torch.nn.Parameter(torch.tensor([1.0]))
    torch_opt = torch.optim.AdamW([q], lr=0.1, weight_decay=0.0)
    q.grad = torch.tensor([0.5])
    torch_opt.step()
    assert q.item() == pytest.approx(0.9, rel=1e-6)


def test_the_config_choice_builds_it_with_the_decay_groups():
    cfg = load_config(
        None,
        ["train.optimizer=adamw_bert", "train.weight_decay=0.1", "model.hidden_size=8", "model.num_heads=1"],
    )
    optimizer = make_optimizer(build(cfg, 20, 3, 6), cfg)
    assert isinstance(optimizer, BertAdamW)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [
        0.1,
        0.0,
    ]  # norms and biases kept from decay
