"""Modular backbone: AR never sees the future, AE sees both sides, padding changes nothing, windows hold."""

from __future__ import annotations

import itertools

import pytest
import torch

from modsar.config import ModelConfig
from modsar.model.modular import ModularSAR
from modsar.model.toolkit import attention_mask

N_ITEMS, N_USERS, MAX_LEN = 40, 8, 12

VARIANTS = {
    "global-pre": {},
    "global-post": {"norm": "post"},
    "sasrec-block": {"norm": "sasrec"},
    "normed-skip-block": {"norm": "normed_skip", "init": "xavier_uniform", "activation": "relu"},
    "two-heads": {"num_heads": 2},
    "local-only": {"num_heads": 1, "local_heads": 1, "local_window": 2},
    "global+local": {"num_heads": 2, "local_heads": 1, "local_window": 1},
    "sinusoidal": {"positional": "sinusoidal"},
    "no-positions": {"positional": "none"},
    "ssept-user": {"user_fusion": "concat", "item_sse_prob": 0.3, "user_sse_prob": 0.3},
    "relu-3-layers": {"activation": "relu", "num_layers": 3},
    "positions-from-start": {"positions_from": "start"},
    "xavier-init": {"init": "xavier"},
    "xavier-attention-init": {"init": "xavier_attention"},
    "target-aligned": {"positional": "target_aligned", "num_heads": 2},
    "target-aligned-narrow": {"positional": "target_aligned", "pos_dim": 3, "norm": "sasrec"},
    "positions-concatenated": {"pos_fusion": "concat", "pos_dim": 4},
    "positions-projected": {"pos_fusion": "project", "pos_dim": 4, "positional": "sinusoidal"},
    "user-token": {"user_fusion": "token", "num_heads": 2, "local_heads": 1},
    "user-token-target-aligned": {"user_fusion": "token", "positional": "target_aligned"},
    "user-bias": {"user_fusion": "bias", "user_sse_prob": 0.3},
    "time-gap": {"time_bias": "gap", "num_heads": 2},
    "time-gap-target-aligned": {"time_bias": "gap", "positional": "target_aligned", "num_heads": 2},
    "time-session-user-token": {"time_bias": "session", "session_gap": 600.0, "user_fusion": "token"},
    "bert4rec-table4": {
        "norm": "post",
        "embedding_norm": True,
        "scale_embedding": False,
        "head": "bert4rec",
        "positions_from": "start",
    },
}


def make(task: str, **overrides) -> ModularSAR:
    torch.manual_seed(0)
    cfg = ModelConfig(
        **{"hidden_size": 16, "num_layers": 2, "dropout": 0.0, "attn_dropout": 0.0, **overrides}
    )
    model = ModularSAR(cfg, N_ITEMS, N_USERS, MAX_LEN, task).eval()
    for table in model.time_tables or []:  # trained-looking biases: zero ones would make every check trivial
        torch.nn.init.normal_(table.weight, std=2.0)  # type: ignore[union-attr]
    return model


def clock(x: torch.Tensor) -> torch.Tensor:
    """Times for a batch (seconds before each row's last item; padding 0): gaps from seconds to days."""
    g = torch.Generator().manual_seed(2)
    gaps = torch.exp(torch.rand(x.shape, generator=g) * 12)  # 1 s .. 2 days
    times = gaps.cumsum(1)
    return torch.where(x > 0, times - times[:, -1:], 0.0)


def run(
    model: ModularSAR, x: torch.Tensor, users: torch.Tensor, times: torch.Tensor | None = None
) -> torch.Tensor:
    """The model's states; time_bias variants read `times` (default: clock(x))."""
    return model(x, users, times=clock(x) if times is None else times) if model.timed else model(x, users)


def batch(T: int = 10, B: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(1, N_ITEMS + 1, (B, T), generator=g)
    x[1, :3] = 0  # a left-padded row
    return x, torch.arange(1, B + 1)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_ar_future_leak(variant):
    """Changing items after t leaves every AR output at positions <= t unchanged."""
    model = make("ar", **VARIANTS[variant])
    x, users = batch()
    base = run(model, x, users)
    for t in range(3, x.size(1) - 1):
        changed = x.clone()
        changed[:, t + 1 :] = (changed[:, t + 1 :] % N_ITEMS) + 1
        out = run(model, changed, users)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_ae_is_bidirectional(variant):
    """AE output at an early position changes when a later item changes."""
    model = make("ae", **VARIANTS[variant])
    x, users = batch()
    base = run(model, x, users)
    changed = x.clone()
    changed[:, 5] = (changed[:, 5] % N_ITEMS) + 1
    out = run(model, changed, users)
    assert (out[:, 4] - base[:, 4]).abs().max() > 1e-4  # left neighbour sees the right side
    assert (out[:, 6] - base[:, 6]).abs().max() > 1e-4


@pytest.mark.parametrize("task,variant", list(itertools.product(["ar", "ae"], sorted(VARIANTS))))
def test_padding_invariance(task, variant):
    """Extra left padding changes no output at a real position."""
    model = make(task, **VARIANTS[variant])
    x, users = batch(T=8)
    padded = torch.cat([torch.zeros(3, 4, dtype=torch.long), x], dim=1)
    times = torch.cat([torch.zeros(3, 4), clock(x)], dim=1)
    torch.testing.assert_close(
        run(model, padded, users, times)[:, 4:][x > 0], run(model, x, users)[x > 0], rtol=0, atol=1e-5
    )


def test_local_window_heads_see_only_their_window():
    x = torch.tensor([[0, 5, 6, 7, 8, 9, 10]])
    for causal in (True, False):
        mask = attention_mask(x, causal, num_heads=2, local_heads=1, window=2)
        local, glob = mask[0, 1], mask[0, 0]
        i, j = 5, torch.arange(7)
        expected_local = (j >= 1) & ((i - j).abs() <= 2) & ((j <= i) if causal else True)
        expected_global = (j >= 1) & ((j <= i) if causal else True)
        assert local[i].tolist() == expected_local.tolist()
        assert glob[i].tolist() == expected_global.tolist()


def test_attention_probabilities_are_returned_and_respect_masks():
    model = make("ar", num_heads=2, local_heads=1, local_window=1)
    x, users = batch()
    hidden, attentions = model(x, users, need_weights=True)
    assert len(attentions) == 2 and attentions[0].shape == (3, 2, 10, 10)
    torch.testing.assert_close(hidden, model(x, users), rtol=0, atol=1e-5)
    probs = attentions[0]
    torch.testing.assert_close(probs.sum(-1), torch.ones(3, 2, 10))
    assert probs[..., 4, 5:].abs().max() == 0  # causal: no weight on the future
    assert probs[:, 1, 6, :5].abs().max() == 0  # local head, window 1: only positions 5 and 6
    assert probs[1, :, 5, :3].abs().max() == 0  # no weight on padding keys


def test_scores_cover_only_real_items():
    model = make("ae")
    x, users = batch()
    scores = model.score(model(x, users)[:, -1], users)
    assert scores.shape == (3, N_ITEMS)


def test_bert4rec_head_scores_by_hand():
    """head=bert4rec: LN(GELU(W h + b)) . E + item bias, the same for all items, shared and per-row
    candidates."""
    model = make("ar", head="bert4rec", embedding_norm=True, scale_embedding=False)
    with torch.no_grad():
        model.head.item_bias.copy_(torch.randn(N_ITEMS + 2))
    h = torch.randn(3, 16)
    t = torch.nn.functional.layer_norm(
        torch.nn.functional.gelu(h @ model.head.dense.weight.T + model.head.dense.bias),
        (16,),
        model.head.norm.weight,
        model.head.norm.bias,
        eps=1e-12,
    )
    expected = t @ model.item_emb.weight[1 : N_ITEMS + 1].T + model.head.item_bias[1 : N_ITEMS + 1]
    torch.testing.assert_close(model.score(h), expected)
    items = torch.tensor([3, 7, 40])
    torch.testing.assert_close(model.score(h, items=items), expected[:, items - 1])
    per_row = torch.tensor([[1], [2], [3]])
    torch.testing.assert_close(model.score(h, items=per_row), expected.gather(1, per_row - 1))


@pytest.mark.parametrize("norm", ["pre", "post", "sasrec", "normed_skip"])
def test_block_styles_compute_their_formulas(norm):
    """Each norm placement, written out with the block's own sub-modules (eval mode: dropout is the identity).
    The attention call is checked against a hand-written single-head softmax(q k^T / sqrt(d)) v."""
    model = make("ar", norm=norm, num_heads=1)
    block = model.blocks[0]
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3))
    mask = attention_mask(torch.ones(2, 5, dtype=torch.long), True, 1, 0, 0)
    w, b = block.attn.qkv.weight, block.attn.qkv.bias

    def attn(query_in, kv_in):
        q, k, v = query_in @ w[:16].T + b[:16], kv_in @ w[16:32].T + b[16:32], kv_in @ w[32:].T + b[32:]
        scores = (q @ k.transpose(-2, -1) / 4.0).masked_fill(~mask[:, 0], float("-inf"))
        return block.attn.proj(scores.softmax(-1) @ v)

    ln1, ln2, ffn = block.norm1, block.norm2, block.ffn
    if norm == "pre":
        h = x + attn(ln1(x), ln1(x))
        expected = h + ffn(ln2(h))
    elif norm == "post":
        h = ln1(x + attn(x, x))
        expected = ln2(h + ffn(h))
    else:
        q = ln1(x)
        h = ln2(q + attn(q, x if norm == "sasrec" else q))
        expected = h + ffn(h)
    with torch.no_grad():
        torch.testing.assert_close(block(x, mask)[0], expected, rtol=0, atol=1e-5)
    assert isinstance(model.final_norm, torch.nn.LayerNorm) == (norm != "post")


def test_ffn_inner_dropout_is_a_choice():
    """ffn_inner_dropout=false: BERT's FFN, W2 GELU(W1 x) with no dropout between (in training mode too)."""
    x = torch.randn(4, 16)
    for inner, same in ((True, False), (False, True)):
        ffn = make("ar", dropout=0.5, ffn_inner_dropout=inner).blocks[0].ffn.train()
        assert torch.equal(ffn(x), ffn(x)) == same


def test_xavier_uniform_init_bounds_every_matrix():
    """init=xavier_uniform (the ModSAR code): every matrix within its Glorot bound, embeddings included."""
    model = make("ar", init="xavier_uniform")
    for name, p in model.named_parameters():
        if p.dim() == 2:
            bound = (6 / sum(p.shape)) ** 0.5
            assert p.abs().max() <= bound + 1e-6 and p.abs().max() > 0.5 * bound, name
    assert torch.equal(model.item_emb.weight[0], torch.zeros(16))


def test_positions_from_start_count_from_the_first_real_item():
    """positions_from=start: a row's first real item gets position 0 wherever the row sits in the batch."""
    model = make("ar", positions_from="start", dropout=0.0)
    with torch.no_grad():
        model.pos_emb.weight.copy_(torch.arange(MAX_LEN + 1, dtype=torch.float)[:, None].expand(-1, 16))
        model.item_emb.weight.zero_()
    model.blocks = torch.nn.ModuleList()  # embeddings only: the output is the position code itself
    model.final_norm = torch.nn.Identity()
    x = torch.tensor([[0, 0, 5, 6, 7], [1, 2, 3, 4, 5]])
    assert model(x)[:, :, 0].tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
