"""Target-aligned positions, position channels and user fusion in the modular backbone (data-first paper
§3-4).

Future leak, bidirectionality and padding invariance of every variant are in test_model.py (VARIANTS).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from modsar.config import ModelConfig
from modsar.model.modular import ModularSAR, code_count, target_codes

N_ITEMS, N_USERS, MAX_LEN = 30, 5, 10


def make(task: str, **overrides) -> ModularSAR:
    torch.manual_seed(0)
    cfg = ModelConfig(
        **{
            "hidden_size": 16,
            "num_layers": 2,
            "num_heads": 2,
            "dropout": 0.0,
            "attn_dropout": 0.0,
            **overrides,
        }
    )
    return ModularSAR(cfg, N_ITEMS, N_USERS, MAX_LEN, task).eval()


def test_ar_codes_are_the_distance_to_the_target():
    """Query t predicts t + 1: key j gets code t + 1 - j (1 = the item just before the target), 0 for the
    future."""
    codes = target_codes(6, 0, causal=True, positions=11, device=torch.device("cpu"))
    for t in range(6):
        for j in range(6):
            assert codes[t, j] == (t + 1 - j if j <= t else 0)
    assert (codes.diagonal() == 1).all()  # the immediate predecessor of every target: one code


def test_ae_codes_are_signed_distances_to_the_masked_position():
    positions = 11
    codes = target_codes(6, 0, causal=False, positions=positions, device=torch.device("cpu"))
    for m in range(6):
        for j in range(6):
            assert (
                codes[m, j] == (m - j) + positions
            )  # distance 0 (the mask itself) -> code P; after it: below
    assert codes.min() >= 1 and codes.max() < code_count(False, positions) - 1


@pytest.mark.parametrize("causal", [True, False])
def test_a_code_depends_only_on_the_distance_and_user_tokens_have_their_own(causal):
    positions, width, prefix = 9, 7, 1
    codes = target_codes(width, prefix, causal, positions, torch.device("cpu"))
    user = code_count(causal, positions) - 1
    assert (codes[0] == user).all() and (codes[:, 0] == user).all()
    by_distance: dict[int, set[int]] = {}
    for i in range(prefix, width):
        for j in range(prefix, width):
            if causal and j > i:
                assert codes[i, j] == 0
                continue
            by_distance.setdefault(i - j, set()).add(int(codes[i, j]))
    assert all(len(c) == 1 for c in by_distance.values())  # one code per distance
    assert len({next(iter(c)) for c in by_distance.values()} | {user}) == len(by_distance) + 1  # all distinct


@torch.no_grad()
def test_attention_with_relative_keys_by_hand():
    """softmax((q . k + q[:p] . R[code]) / sqrt(d_h)) with the module's own weights, AR, one row, one head."""
    model = make("ar", positional="target_aligned", pos_dim=3, num_heads=1, num_layers=1)
    model.blocks[0].attn.rel_keys.weight.normal_()
    x = torch.tensor([[0, 0, 4, 9, 2, 7]])
    _, maps = model(x, torch.tensor([1]), need_weights=True)
    h = model.drop(model.embed_norm(model.embed(x, None)))[0]  # post-norm block: attention reads h
    attn = model.blocks[0].attn
    q, k, _ = (h @ attn.qkv.weight.T + attn.qkv.bias).split(16, dim=-1)
    R = attn.rel_keys.weight
    expected = torch.zeros(6, 6)
    for t in range(2, 6):
        logits = torch.tensor([q[t] @ k[j] + q[t, :3] @ R[t + 1 - j] for j in range(2, t + 1)]) / math.sqrt(
            16
        )
        expected[t, 2 : t + 1] = logits.softmax(0)
    torch.testing.assert_close(maps[0][0, 0, 2:], expected[2:], rtol=0, atol=1e-5)


def test_a_shifted_prefix_gives_the_same_ar_output_as_in_place():
    """Target-aligned: the state at position t of a sequence equals the final state of its first t + 1 items
    fed alone (so it sits in another slot); absolute positions counted from the end cannot do this."""
    x = torch.tensor([[3, 8, 1, 5, 9, 2, 6]])
    users = torch.tensor([2])
    for positional, same in (("target_aligned", True), ("learned", False)):
        model = make("ar", positional=positional)
        full = model(x, users)
        for t in range(2, 6):  # t = 6 is the whole row
            alone = model(x[:, : t + 1], users)[:, -1]
            assert torch.allclose(alone, full[:, t], atol=1e-5) == same, (positional, t)


def test_positions_from_a_narrow_channel_are_concatenated_or_projected():
    concat = make("ar", pos_fusion="concat", pos_dim=4)
    assert concat.item_emb.embedding_dim == 12 and concat.pos_emb.embedding_dim == 4
    x = torch.tensor([[0, 2, 5, 7]])
    emb = concat.embed(x, None)
    torch.testing.assert_close(
        emb[0, :, 12:], concat.pos_emb.weight[-4:]
    )  # the channel is the position itself
    torch.testing.assert_close(emb[0, :, :12], concat.item_emb(x)[0] * math.sqrt(12))
    hidden = concat(x, torch.tensor([1]))
    assert concat.score(hidden).shape == (1, 4, N_ITEMS)
    project = make("ar", pos_fusion="project", pos_dim=4)
    assert project.item_emb.embedding_dim == 16 and project.pos_project.weight.shape == (16, 20)
    expected = (
        torch.cat([project.item_emb(x)[0] * 4.0, project.pos_emb.weight[-4:]], -1)
        @ project.pos_project.weight.T
    )
    torch.testing.assert_close(project.embed(x, None)[0], expected)


def test_a_user_token_is_column_zero_of_every_attention_map_and_seen_by_every_query():
    model = make("ar", user_fusion="token")
    x = torch.tensor([[0, 0, 4, 9, 2], [1, 3, 5, 7, 9]])
    hidden, maps = model(x, torch.tensor([1, 2]), need_weights=True)
    assert hidden.shape == (2, 5, 16) and maps[0].shape == (2, 2, 6, 6)
    real = torch.cat([torch.ones(2, 1, dtype=torch.bool), x > 0], 1)
    assert (maps[0][:, :, 1:, 0][real[:, None, 1:].expand(2, 2, 5)] > 0).all()
    assert maps[0][0, :, 0, 1:].abs().max() == 0  # AR: the token, first in time, sees only itself


@pytest.mark.parametrize("fusion", ["concat", "token", "bias"])
@pytest.mark.parametrize("task", ["ar", "ae"])
def test_every_fusion_makes_the_output_depend_on_the_user(fusion, task):
    model = make(task, user_fusion=fusion)
    if fusion == "bias":  # N(0, 0.02) at init: made O(1) so the dependence is far above float noise
        with torch.no_grad():
            for block in model.blocks:
                block.user_query.weight.normal_()
    x = torch.tensor([[2, 4, 6, 8]]).expand(2, 4)
    out = model(x, torch.tensor([1, 2]))
    assert (out[0] - out[1]).abs().max() > 1e-4
    none = make(task)
    same = none(x, torch.tensor([1, 2]))
    torch.testing.assert_close(same[0], same[1])


@torch.no_grad()
def test_user_bias_is_a_query_offset():
    """user_fusion=bias: each layer's attention logits get (W_u u) . k_j, the same for every query."""
    model = make("ae", user_fusion="bias", num_layers=1, num_heads=1)
    model.blocks[0].user_query.weight.normal_()
    x, users = torch.tensor([[2, 4, 6]]), torch.tensor([3])
    _, maps = model(x, users, need_weights=True)
    h = model.drop(model.embed_norm(model.embed(x, users)))[0]
    attn = model.blocks[0].attn
    q, k, _ = (h @ attn.qkv.weight.T + attn.qkv.bias).split(16, dim=-1)
    q = (
        q + 4.0 * model.user_emb(users)[0] @ model.blocks[0].user_query.weight.T
    )  # users scaled by sqrt(d) = 4
    torch.testing.assert_close(maps[0][0, 0], F.softmax(q @ k.T / 4.0, -1), rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [
        {"positional": "target_aligned"},
        {"user_fusion": "token", "local_heads": 1},
        {"user_fusion": "bias"},
        {"positional": "target_aligned", "pos_dim": 4, "user_fusion": "token", "norm": "sasrec"},
    ],
    ids=["target-aligned", "token-local", "bias", "all-sasrec"],
)
@pytest.mark.parametrize("task", ["ar", "ae"])
def test_the_fast_attention_path_equals_the_explicit_one(task, overrides):
    """SDPA with the float mask computes what the explicit softmax (checked by hand above) computes."""
    model = make(task, **overrides)
    with torch.no_grad():
        for block in model.blocks:
            if block.attn.rel_keys is not None:
                block.attn.rel_keys.weight.normal_()
            if block.user_query is not None:
                block.user_query.weight.normal_()
    x, users = torch.tensor([[0, 0, 4, 9, 2, 7], [3, 1, 5, 8, 6, 2]]), torch.tensor([1, 4])
    torch.testing.assert_close(model(x, users), model(x, users, need_weights=True)[0], rtol=0, atol=1e-5)
