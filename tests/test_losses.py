"""sampled_ce scores its shared negatives with one matrix product; the numbers match the per-row gather it
replaced and a softmax written out by hand (target + K negatives, hits masked)."""

from __future__ import annotations

import pytest
import torch

from hf_plugins.adapter import HFBackbone
from modsar.config import Config, LossConfig, ModelConfig
from modsar.model.losses import training_loss
from modsar.model.modular import ModularSAR

N_ITEMS, N_USERS, MAX_LEN, K = 40, 6, 12, 30


def modular(ssept: bool) -> ModularSAR:
    torch.manual_seed(0)
    cfg = ModelConfig(
        hidden_size=16, num_layers=2, dropout=0.0, attn_dropout=0.0, user_fusion="concat" if ssept else "none"
    )
    model = ModularSAR(cfg, N_ITEMS, N_USERS, MAX_LEN, "ar").eval()
    with torch.no_grad():  # O(1) scores and user offsets, so a dropped term cannot hide under the tolerance
        model.item_emb.weight.normal_()
        if model.user_emb is not None:
            model.user_emb.weight.normal_()
    return model


def hf(backbone: str) -> HFBackbone:
    torch.manual_seed(0)
    model = {
        "backbone": backbone,
        "hidden_size": 16,
        "num_layers": 2,
        "num_heads": 2,
        "dropout": 0.0,
        "attn_dropout": 0.0,
        "activation": "relu" if backbone == "transfo_xl" else "gelu",
    }
    cfg = Config.from_dict({"task": "ar", "model": model})
    return HFBackbone(cfg.model, N_ITEMS, N_USERS, MAX_LEN, "ar").eval()


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """AR inputs, labels (0 = no loss) and users of three rows, one left-padded."""
    x = torch.randint(1, N_ITEMS + 1, (3, 10), generator=torch.Generator().manual_seed(1))
    x[1, :3] = 0
    return x[:, :-1], x[:, 1:] * (x[:, :-1] > 0), torch.tensor([1, 4, 6])


def per_row_reference(model, hidden: torch.Tensor, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """Scores of items (K,) for hidden (P, d), gathered per row as (P, K, d) and written out term by term."""
    item_dim = getattr(model, "item_dim", hidden.size(-1))
    rows = model.item_emb.weight[items[None, :].expand(len(hidden), -1)]
    scores = (hidden[:, None, :item_dim] * rows).sum(-1)
    if getattr(model, "user_emb", None) is not None:
        scores = scores + (hidden[:, item_dim:] * model.user_emb.weight[users]).sum(-1)[:, None]
    return scores


def flat_hidden(model) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, _, users = batch()
    hidden = model(inputs, users)
    return hidden.reshape(-1, hidden.size(-1)), users[:, None].expand(inputs.shape).reshape(-1)


@pytest.mark.parametrize("backbone", ["modular", "modular-ssept", "llama", "albert", "transfo_xl"])
def test_shared_candidates_equal_the_per_row_gather(backbone):
    model = modular(backbone == "modular-ssept") if backbone.startswith("modular") else hf(backbone)
    h, u = flat_hidden(model)
    negatives = torch.randint(1, N_ITEMS + 1, (K,), generator=torch.Generator().manual_seed(3))
    shared = model.score(h, u, negatives)
    assert shared.shape == (len(h), K)
    torch.testing.assert_close(shared, per_row_reference(model, h, u, negatives))
    torch.testing.assert_close(shared, model.score(h, u, negatives[None, :].expand(len(h), -1)))
    torch.testing.assert_close(model.score(h, u, torch.arange(1, N_ITEMS + 1)), model.score(h, u))


def test_the_user_offset_is_in_the_shared_scores():
    """Guards the test above: with SSE-PT the offset is large enough that leaving it out would fail."""
    model = modular(True)
    h, u = flat_hidden(model)
    item_only = h[:, : model.item_dim] @ model.item_emb.weight[1:5].T
    assert (model.score(h, u, torch.arange(1, 5)) - item_only).abs().max() > 0.1


def hand_sampled_ce(
    model, hidden: torch.Tensor, labels: torch.Tensor, users: torch.Tensor, negatives: torch.Tensor
) -> torch.Tensor:
    """Mean over labelled positions of -log softmax(target) over [target] + the negatives that are not it."""
    item_dim = getattr(model, "item_dim", hidden.size(-1))
    losses = []
    for b, t in labels.nonzero().tolist():
        target = int(labels[b, t])
        candidates = torch.tensor([target] + [k for k in negatives.tolist() if k != target])
        logits = model.item_emb.weight[candidates] @ hidden[b, t, :item_dim]
        if getattr(model, "user_emb", None) is not None:
            logits = logits + hidden[b, t, item_dim:] @ model.user_emb.weight[users[b]]
        losses.append(torch.logsumexp(logits, 0) - logits[0])
    return torch.stack(losses).mean()


@pytest.mark.parametrize("padding_free", [True, False], ids=["padding-free", "dense"])
@pytest.mark.parametrize("ssept", [False, True], ids=["modular", "modular-ssept"])
def test_sampled_ce_equals_the_softmax_written_out(ssept, padding_free):
    model = modular(ssept)
    inputs, labels, users = batch()
    hidden = model(inputs, users)
    cfg, draw = LossConfig("sampled_ce", num_negatives=K), torch.Generator().manual_seed(5)
    loss = training_loss(model, hidden, labels, users, cfg, padding_free, generator=draw)
    negatives = torch.randint(1, N_ITEMS + 1, (K,), generator=torch.Generator().manual_seed(5))
    assert torch.isin(labels[labels > 0], negatives).any()  # the case has hits, so masking is exercised
    expected = hand_sampled_ce(model, hidden, labels, users, negatives)
    torch.testing.assert_close(loss, expected)
    params = [p for p in model.parameters() if p.requires_grad]
    got = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    want = torch.autograd.grad(expected, params, allow_unused=True)
    for g, w in zip(got, want, strict=True):
        assert (g is None) == (w is None)
        if g is not None:
            torch.testing.assert_close(g, w)


def test_sampled_ce_never_builds_a_positions_by_negatives_by_d_tensor(monkeypatch):
    """Every tensor sampled_ce creates is at most positions x K (or an embedding table): the (P, K, d) gather
    of the old per-row path would show up as a 3-D float tensor with P * K * d elements."""
    model = modular(ssept=True)
    inputs, labels, users = batch()
    hidden = model(inputs, users)
    positions = int((labels > 0).sum())
    largest = []

    class Sizes(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor):
                largest.append(out.numel())
            return out

    with Sizes():
        training_loss(
            model,
            hidden,
            labels,
            users,
            LossConfig("sampled_ce", num_negatives=K),
            True,
            generator=torch.Generator().manual_seed(5),
        )
    assert largest and max(largest) <= max(positions * (K + 1), model.item_emb.weight.numel())
    assert positions * K * 16 > 2 * max(largest)  # the old path's tensor would have been far larger
