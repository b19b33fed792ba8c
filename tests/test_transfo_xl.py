"""hf_plugins' Transformer-XL: relative shift and memory on hand-worked cases, segment consistency, Auto."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModel

from hf_plugins.transfo_xl import TransfoXLConfig, TransfoXLModel, rel_shift


def tiny(**kw) -> TransfoXLModel:
    torch.manual_seed(0)
    settings = {
        "vocab_size": 20,
        "d_model": 8,
        "d_embed": 8,
        "n_head": 2,
        "d_head": 4,
        "d_inner": 16,
        "n_layer": 2,
        "mem_len": 0,
        "clamp_len": 100,
        "same_length": False,
        "dropout": 0.0,
        "dropatt": 0.0,
    }
    model = TransfoXLModel(TransfoXLConfig(**{**settings, **kw})).eval()
    with torch.no_grad():  # make the relative-position term large enough to matter in these small tests
        for layer in model.layers:
            layer.dec_attn.r_net.weight.mul_(50)
    return model


def test_rel_shift_hand_worked():
    # qlen 2, klen 3 (1 memory slot): column r holds relative distance 2 - r. Query i at absolute
    # position 1 + i must read distance (1 + i - j) for key j; the j > 1 + i cell is the masked region.
    x = torch.arange(6.0).view(2, 3)
    shifted = rel_shift(x)
    assert shifted[0, :2].tolist() == [1.0, 2.0]  # query 0: keys 0, 1 at distances 1, 0
    assert shifted[1].tolist() == [3.0, 4.0, 5.0]  # query 1: keys 0, 1, 2 at distances 2, 1, 0


def test_memory_update_hand_worked():
    model = tiny()
    model.mem_len = 3
    mems = [torch.tensor([[[1.0]], [[2.0]]])]  # mlen 2, (time, batch, d) = (2, 1, 1)
    hids = [torch.tensor([[[3.0]], [[4.0]]], requires_grad=True)]  # qlen 2
    new = model.update_mems(hids, mems, mlen=2, qlen=2)
    assert new[0].flatten().tolist() == [2.0, 3.0, 4.0]  # the last mem_len steps
    assert not new[0].requires_grad  # gradient stopped
    assert model.update_mems(hids, None, 0, 2) is None


def test_segments_with_memory_equal_one_long_pass():
    model = tiny(mem_len=10)
    x = torch.randint(1, 20, (2, 7), generator=torch.Generator().manual_seed(3))
    empty = [torch.zeros(0, 2, 8) for _ in range(2)]
    full = model(x, mems=empty).last_hidden_state
    first = model(x[:, :4], mems=empty)
    second = model(x[:, 4:], mems=first.mems)
    assert first.mems[0].shape == (4, 2, 8)
    torch.testing.assert_close(second.last_hidden_state, full[:, 4:], rtol=1e-5, atol=1e-5)
    alone = model(x[:, 4:], mems=empty).last_hidden_state
    assert (alone - full[:, 4:]).abs().max() > 1e-3  # the memory really carried the first segment


def test_clamp_len_caps_distances():
    far, near = tiny(), tiny()
    near.clamp_len = 1
    x = torch.randint(1, 20, (1, 6), generator=torch.Generator().manual_seed(4))
    assert (far(x).last_hidden_state - near(x).last_hidden_state).abs().max() > 1e-4
    assert torch.allclose(far(x[:, :2]).last_hidden_state, near(x[:, :2]).last_hidden_state, atol=1e-6)


def test_save_pretrained_reloads_through_auto_classes(tmp_path):
    model = tiny(untie_r=False)
    model.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "modsar_transfo_xl"
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert type(loaded) is TransfoXLModel
    x = torch.randint(1, 20, (2, 5))
    torch.testing.assert_close(loaded(x).last_hidden_state, model(x).last_hidden_state)


def test_4x_parameter_names():
    names = set(tiny(untie_r=False).state_dict())
    for expected in (
        "word_emb.emb_layers.0.weight",
        "r_w_bias",
        "r_r_bias",
        "layers.0.dec_attn.qkv_net.weight",
        "layers.0.dec_attn.r_net.weight",
        "layers.0.dec_attn.o_net.weight",
        "layers.0.dec_attn.layer_norm.weight",
        "layers.1.pos_ff.CoreNet.0.weight",
        "layers.1.pos_ff.CoreNet.3.bias",
        "layers.1.pos_ff.layer_norm.bias",
    ):
        assert expected in names


FIXTURE = Path(__file__).parent / "fixtures" / "transfo_xl_4x.pt"


@pytest.mark.parametrize("case", ["post_untied", "pre_tied_same_length"])
def test_reproduces_transformers_4x_hidden_states_and_memory(case):
    """A 4.x TransfoXLModel state dict loads unchanged and gives the same outputs, with and without memory."""
    ref = torch.load(FIXTURE, weights_only=True)["cases"][case]
    settings = {
        "vocab_size": 30,
        "d_model": 8,
        "d_embed": 8,
        "n_head": 2,
        "d_head": 4,
        "d_inner": 16,
        "n_layer": 2,
        "dropout": 0.0,
        "dropatt": 0.0,
        **ref["config"],
    }
    model = TransfoXLModel(TransfoXLConfig(**settings)).eval()
    loaded = model.load_state_dict(ref["state_dict"], strict=True)  # same names as 4.x, nothing left over
    assert not loaded.missing_keys and not loaded.unexpected_keys
    with torch.no_grad():
        first = model(ref["first"])  # 4.x default: zero memories of mem_len
        second = model(ref["second"], mems=first.mems)
    torch.testing.assert_close(first.last_hidden_state, ref["hidden1"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(second.last_hidden_state, ref["hidden2"], rtol=1e-5, atol=1e-5)
    for ours, theirs in zip(first.mems + second.mems, ref["mems1"] + ref["mems2"], strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
