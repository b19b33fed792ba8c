"""HF backbones (stock transformers v5) as item-ID models: the AE/AR switch holds in both directions."""

from __future__ import annotations

import pytest
import torch

from hf_plugins.adapter import HFBackbone
from modsar.config import Config, LossConfig, load_config
from modsar.errors import ModsarError
from modsar.model.losses import training_loss
from modsar.model.skips import residual_scale

N_ITEMS, MAX_LEN = 30, 12
BACKBONES = ["albert", "llama", "hf:bert", "hf:gpt2", "transfo_xl", "hf:roberta"]


def make(backbone: str, task: str, **model) -> HFBackbone:
    torch.manual_seed(0)
    defaults = {
        "hidden_size": 16,
        "num_layers": 2,
        "num_heads": 2,
        "dropout": 0.0,
        "attn_dropout": 0.0,
        "activation": "relu" if backbone == "transfo_xl" else "gelu",
    }
    cfg = Config.from_dict({"task": task, "model": {**defaults, "backbone": backbone, **model}})
    return HFBackbone(cfg.model, N_ITEMS, 4, MAX_LEN, task).eval()


def batch() -> torch.Tensor:
    x = torch.randint(1, N_ITEMS + 1, (3, 9), generator=torch.Generator().manual_seed(2))
    x[1, :3] = 0
    return x


@pytest.mark.parametrize("backbone", BACKBONES)
def test_ar_never_sees_the_future(backbone):
    model, x = make(backbone, "ar"), batch()
    base = model(x)
    for t in range(3, 8):
        changed = x.clone()
        changed[:, t + 1 :] = changed[:, t + 1 :] % N_ITEMS + 1
        out = model(changed)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-5)
        assert (out[:, t + 1 :] - base[:, t + 1 :]).abs().max() > 1e-4


@pytest.mark.parametrize("backbone", BACKBONES)
def test_ae_sees_both_sides(backbone):
    model, x = make(backbone, "ae"), batch()
    changed = x.clone()
    changed[:, 6] = changed[:, 6] % N_ITEMS + 1
    diff = (model(changed) - model(x)).abs()
    assert diff[:, 5].max() > 1e-4 and diff[:, 7].max() > 1e-4


@pytest.mark.parametrize("task", ["ar", "ae"])
@pytest.mark.parametrize("backbone", BACKBONES)
def test_padding_changes_nothing(backbone, task):
    model, x = make(backbone, task), batch()
    padded = torch.cat([torch.zeros(3, 3, dtype=torch.long), x], dim=1)
    torch.testing.assert_close(model(padded)[:, 3:][x > 0], model(x)[x > 0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_attention_maps_in_eager_mode(backbone):
    model, x = make(backbone, "ar"), batch()
    hidden, maps = model(x, need_weights=True)
    torch.testing.assert_close(hidden, model(x), rtol=0, atol=1e-5)  # eager and SDPA agree
    assert len(maps) == 2 and maps[0].shape == (3, 2, 9, 9)
    assert maps[0][:, :, 4, 5:].abs().max() == 0 and maps[0][1, :, 5, :3].abs().max() == 0


@pytest.mark.parametrize("backbone", BACKBONES)
def test_a_few_steps_lower_the_loss(backbone):
    model = make(backbone, "ar").train()
    x = batch()
    inputs, labels = x[:, :-1], x[:, 1:] * (x[:, :-1] > 0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss = training_loss(model, model(inputs), labels, torch.ones(3, dtype=torch.long), LossConfig("ce"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_llama_attention_dropout_is_real():
    model, x = make("llama", "ar", attn_dropout=0.5), batch()
    model.train()
    torch.manual_seed(1)
    a = model(x)
    torch.manual_seed(2)
    assert (model(x) - a).abs().max() > 1e-4  # dropout active in training mode
    model.eval()
    torch.testing.assert_close(model(x), model(x))


@pytest.mark.parametrize(
    "override,message",
    [
        ("model.dropout=0.2", "llama has no hidden/embedding dropout"),
        ("model.norm=post", "llama is pre-norm by design"),
        ("model.positional=learned", "llama uses rope positions"),
        ("model.local_heads=1", "llama has no 'model.local_heads' \\(a design knob of the modular backbone"),
    ],
)
def test_knobs_llama_does_not_have_are_refused(override, message):
    with pytest.raises(ModsarError, match=message):
        load_config(None, ["model.backbone=llama", "model.dropout=0", override])


def test_generic_backbone_maps_the_fields_it_finds():
    model = make("hf:roberta", "ar", dropout=0.3, attn_dropout=0.1)
    assert (
        model.model.config.hidden_dropout_prob == 0.3
        and model.model.config.attention_probs_dropout_prob == 0.1
    )
    with pytest.raises(ModsarError, match="hf:mamba has no hidden/embedding dropout"):
        load_config(None, ["model.backbone=hf:mamba", "model.dropout=0.1", "model.attn_dropout=0"])


def test_generic_backbone_with_factorised_embeddings_scores_items():
    """ELECTRA's embedding_size defaults to 128: the generic adapter sets it to the hidden size so the tied
    item head fits."""
    model = make("hf:electra", "ar")
    scores = model.score(model(batch())[:, -1])
    assert model.model.config.embedding_size == 16 and scores.shape == (3, N_ITEMS)


def test_unknown_backbone():
    with pytest.raises(ModsarError, match=r"'model.backbone' 'hf:nosuch' is unknown"):
        load_config(None, ["model.backbone=hf:nosuch"])


@pytest.mark.parametrize("backbone", BACKBONES)
def test_residual_scaling_is_identity_at_one_and_acts_below(backbone):
    model, x = make(backbone, "ar"), batch()
    with torch.no_grad():
        plain = model(x)
        with residual_scale(model, 1.0):
            assert torch.equal(model(x), plain)
        with residual_scale(model, 0.3):
            assert (model(x) - plain).abs().max() > 1e-3
        assert torch.equal(model(x), plain)  # the hooks are gone afterwards


def test_residual_scaling_matches_the_sublayer_written_out():
    """Post-norm BERT: LN(alpha x + W_O ctx); pre-norm LLaMA: z = alpha x + Attn(RMSNorm x), then z +
    MLP(...)."""
    alpha, h = 0.3, torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(1))
    bert = make("hf:bert", "ae")
    attention = bert.model.encoder.layer[0].attention
    with torch.no_grad():
        with residual_scale(bert, alpha):
            out = attention(h)
        context = attention.self(h)
        written = attention.output.LayerNorm(
            alpha * h + attention.output.dense(context[0] if isinstance(context, tuple) else context)
        )
    torch.testing.assert_close(out[0] if isinstance(out, tuple) else out, written, rtol=0, atol=1e-5)

    llama = make("llama", "ar")
    layer = llama.model.layers[0]
    rotary = llama.model.rotary_emb(h, torch.arange(7)[None].expand(2, 7))
    with torch.no_grad():
        with residual_scale(llama, alpha):
            out = layer(h, attention_mask=None, position_embeddings=rotary)
        z = (
            alpha * h
            + layer.self_attn(
                hidden_states=layer.input_layernorm(h), position_embeddings=rotary, attention_mask=None
            )[0]
        )
        written = z + layer.mlp(layer.post_attention_layernorm(z))
    torch.testing.assert_close(out[0] if isinstance(out, tuple) else out, written, rtol=0, atol=1e-5)


def test_residual_scaling_refused_where_the_layers_are_unknown():
    model = make("hf:electra", "ar")
    with pytest.raises(ModsarError, match="not defined for model type 'electra'"), residual_scale(model, 0.5):
        pass
