"""Each derived model width is decided once (ModelConfig.ffn_width, .user_width, .timed) and every consumer
finds the same answer: the built backbones' layers, the memory estimate, the config checks and the HuggingFace
configs."""

from __future__ import annotations

import re

import pytest
import torch

from modsar.config import load_config
from modsar.errors import ModsarError
from modsar.memory import item_width
from modsar.model import registry


def _built(*overrides: str):
    cfg = load_config(None, list(overrides))
    with torch.device("meta"):
        return cfg, registry.build(cfg, num_items=50, num_users=20, max_len=12)


@pytest.mark.parametrize("ffn", [0, 80])
@pytest.mark.parametrize("backbone", ["modular", "bsarec", "hf:bert", "hf:llama", "hf:transfo_xl"])
def test_the_ffn_width_is_one_answer_in_every_backbone(backbone, ffn):
    dropout = ["model.dropout=0"] if backbone == "hf:llama" else []  # LLaMA has no hidden dropout to set
    cfg, model = _built(
        f"model.backbone={backbone}", "model.hidden_size=32", f"model.ffn_size={ffn}", *dropout
    )
    assert cfg.model.ffn_width == (ffn or 4 * 32)
    widths = {(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    assert (32, cfg.model.ffn_width) in widths and (cfg.model.ffn_width, 32) in widths, widths


@pytest.mark.parametrize("user_size", [0, 10])
def test_the_user_width_is_one_answer_for_the_model_the_memory_estimate_and_the_check(user_size):
    cfg, model = _built(
        "model.hidden_size=32",
        "model.user_fusion=concat",
        f"model.user_size={user_size}",
        "model.positional=none",
    )
    width = cfg.model.user_width
    assert width == (user_size or 16)
    assert model.user_dim == width and model.item_dim == 32 - width == item_width(cfg)
    plain, _ = _built("model.hidden_size=32")
    assert plain.model.user_width == 0 and item_width(plain) == 32
    with pytest.raises(
        ModsarError, match=re.escape("'model.user_size' must be between 1 and hidden_size - 1")
    ):
        load_config(None, ["model.hidden_size=32", "model.user_fusion=concat", "model.user_size=32"])


def test_timed_is_one_answer_for_the_model_and_the_checks():
    cfg, model = _built("model.time_bias=gap")
    assert cfg.model.timed and model.timed
    plain, flat = _built()
    assert not plain.model.timed and not flat.timed


def test_the_history_window_is_one_answer_for_the_trainer_the_estimate_and_the_check(tmp_path, monkeypatch):
    """data.max_len=0 reads the dataset's own window (its manifest's), given: its own; the cost estimate and
    the space check size the same window as the trainer."""
    from modsar.data.registry import DEFAULT_MAX_LEN
    from modsar.data.store import load_dataset, window
    from modsar.training.trainer import Trainer

    monkeypatch.setenv("MODSAR_DATA", str(tmp_path))
    dataset = load_dataset("synthetic")
    assert window(0, dataset.default_max_len) == dataset.default_max_len and window(7, 30) == 7
    assert window(0, None) == DEFAULT_MAX_LEN == 50
    for given in (0, 9):
        trainer = Trainer(
            load_config(None, [f"data.max_len={given}", "model.hidden_size=16"]), progress=False
        )
        trainer.setup(dataset)
        assert trainer.max_len == window(given, dataset.default_max_len)


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["model.positional=sinusoidal"],
        ["model.positional=none"],
        ["model.pos_fusion=concat", "model.pos_dim=8"],
        ["model.pos_fusion=concat", "model.pos_dim=8", "model.user_fusion=concat"],
        ["model.positional=target_aligned", "model.num_heads=2", "model.pos_dim=4"],
        ["model.norm=pre", "model.positional=learned"],
        ["model.norm=sasrec"],
    ],
)
def test_position_and_item_widths_are_one_answer(overrides):
    cfg, model = _built("model.hidden_size=32", *overrides)
    m = cfg.model
    assert model.absolute == m.absolute_positions == (m.positional in ("auto", "learned", "sinusoidal"))
    assert model.positional == m.position_code == ("learned" if m.positional == "auto" else m.positional)
    assert all(block.style == m.norm_style for block in model.blocks)
    assert model.item_dim == m.item_width == item_width(cfg) == model.item_emb.embedding_dim
    assert m.head_size == 32 // m.num_heads
