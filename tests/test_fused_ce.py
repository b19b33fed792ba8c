"""The fused, chunked full-softmax CE gives the loss and the gradients of the plain logits + cross_entropy:
by hand on a two-item case, against autograd across chunk boundaries, with row weights, with logit gaps
where the target's probability underflows, and through every backbone's `output_layer`."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hf_plugins.adapter import HFBackbone
from modsar.config import Config, LossConfig
from modsar.model import registry
from modsar.model.fused_ce import chunk_rows, linear_cross_entropy
from modsar.model.losses import training_loss


def test_two_items_by_hand():
    # logits (0, ln 3): softmax (1/4, 3/4); target 0 -> loss ln 4, d loss / d logits = (-3/4, 3/4)
    h = torch.tensor([[1.0, 0.0]], requires_grad=True)
    w = torch.tensor([[0.0, 0.0], [math.log(3), 0.0]], requires_grad=True)
    loss = linear_cross_entropy(h, w, torch.tensor([0]))
    loss.backward()
    assert loss.item() == pytest.approx(math.log(4), abs=1e-6)
    torch.testing.assert_close(h.grad, torch.tensor([[0.75 * math.log(3), 0.0]]))  # g @ W
    torch.testing.assert_close(w.grad, torch.tensor([[-0.75, 0.0], [0.75, 0.0]]))  # g.T @ h


def plain(h, w, b, t, weight=None):
    logits = h @ w.T + (b if b is not None else 0)
    per_row = F.cross_entropy(logits, t, reduction="none")
    return per_row.mean() if weight is None else (per_row * weight).sum() / weight.sum()


@pytest.mark.parametrize("rows", [1, 3, 7, 64])  # chunks of one row, uneven chunks, one chunk
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_equals_autograd_through_the_plain_logits(rows, with_bias, weighted):
    g = torch.Generator().manual_seed(0)
    P, N, d = 10, 37, 8
    h0, w0 = torch.randn(P, d, generator=g), torch.randn(N, d, generator=g)
    b0, t = torch.randn(N, generator=g), torch.randint(0, N, (P,), generator=g)
    weight = (torch.arange(P) % 3 != 0).float() if weighted else None  # dense mode: padding rows weigh 0
    grads = []
    for fused in (True, False):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        b = b0.clone().requires_grad_() if with_bias else None
        loss = linear_cross_entropy(h, w, t, b, weight, rows=rows) if fused else plain(h, w, b, t, weight)
        (2.5 * loss).backward()  # backward must scale by the incoming gradient
        grads.append([loss.detach(), h.grad, w.grad] + ([b.grad] if b is not None else []))
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_exact_where_the_target_probability_underflows():
    # logit gap 200: p_target = e^-200 is 0 in float32, the loss is still 200 (not inf, not -log(tiny))
    h = torch.tensor([[1.0], [1.0]])
    w = torch.tensor([[0.0], [200.0], [-5.0]])
    loss = linear_cross_entropy(h, w, torch.tensor([0, 1]))
    want = plain(h.double(), w.double(), None, torch.tensor([0, 1])).item()
    assert loss.item() == pytest.approx(want, rel=1e-6)
    assert want == pytest.approx(
        (200 + math.log1p(math.exp(-200) + math.exp(-205)) + math.log1p(math.exp(-205))) / 2, rel=1e-9
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_underflowed_rows_among_others_keep_their_bias_weight_and_gradients(dtype):
    """Rows whose target probability underflows (gaps of 150 and 300 through the item bias) get their exact
    loss among ordinary rows, weighted, under either product dtype; the gradients are the plain ones."""
    g = torch.Generator().manual_seed(4)
    h0, w0 = torch.randn(6, 4, generator=g), torch.randn(9, 4, generator=g)
    b0 = torch.zeros(9)
    b0[3], b0[5] = 150.0, 300.0
    t = torch.tensor([0, 3, 1, 2, 5, 7])  # item 5 leads by ~300 (~150 over item 3): only row 4's is not 0
    weight = torch.tensor([1.0, 2.0, 0.5, 1.0, 1.0, 3.0])
    h, w, b = (x.clone().requires_grad_() for x in (h0, w0, b0))
    loss = linear_cross_entropy(h, w, t, b, weight, dtype=dtype, rows=4)
    loss.backward()
    h64, w64, b64 = (x.double().requires_grad_() for x in (h0, w0, b0))
    want = plain(h64, w64, b64, t, weight.double())
    want.backward()
    assert want.item() > 100  # the underflowed rows carry the loss
    assert loss.item() == pytest.approx(want.item(), rel=1e-6 if dtype == torch.float32 else 1e-2)
    if dtype == torch.float32:
        torch.testing.assert_close(w.grad, w64.grad.float(), rtol=1e-4, atol=1e-6)


def test_a_nan_logit_gives_a_nan_loss_which_the_trainer_reads_as_diverged():
    h = torch.tensor([[1.0], [float("nan")]])
    w = torch.tensor([[0.0], [1.0]])
    assert math.isnan(linear_cross_entropy(h, w, torch.tensor([0, 1])).item())


def test_bf16_products_stay_close_and_keep_float32_gradients():
    g = torch.Generator().manual_seed(1)
    h = (0.5 * torch.randn(64, 16, generator=g)).requires_grad_()
    w = (0.5 * torch.randn(500, 16, generator=g)).requires_grad_()
    t = torch.randint(0, 500, (64,), generator=g)
    loss = linear_cross_entropy(h, w, t, dtype=torch.bfloat16, rows=16)
    loss.backward()
    assert h.grad.dtype == w.grad.dtype == torch.float32
    h32, w32 = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    want = plain(h32, w32, None, t)
    want.backward()
    assert loss.item() == pytest.approx(want.item(), rel=1e-2)
    assert F.cosine_similarity(w.grad.flatten(), w32.grad.flatten(), dim=0) > 0.99


def test_chunks_hold_about_the_budget():
    assert chunk_rows(23_715) == 176  # 4M floats: 16 MiB of logits per chunk on Video
    assert chunk_rows(10_000_000) == 16  # a huge catalogue still gets whole rows


BACKBONES = [
    ("modular", {}),
    ("modular", {"head": "bert4rec", "embedding_norm": True}),
    ("modular", {"user_fusion": "concat"}),
    ("gru4rec", {}),
    ("bsarec", {}),
    ("duorec", {}),
    ("llama", {}),
]


@pytest.mark.parametrize(("backbone", "extra"), BACKBONES)
@pytest.mark.parametrize("padding_free", [True, False])
def test_training_loss_fused_equals_plain_on_every_backbone(backbone, extra, padding_free):
    """Same loss and parameter gradients as the plain logits, head, item bias and SSE-PT offset included."""
    n_items, n_users = 30, 5
    cfg = Config.from_dict(
        {
            "task": "ar",
            "model": {
                "backbone": backbone,
                "hidden_size": 16,
                "num_layers": 1,
                "num_heads": 2,
                "dropout": 0.0,
                "attn_dropout": 0.0,
                **extra,
            },
        }
    )
    torch.manual_seed(0)
    model = registry.build(cfg, n_items, n_users, 8)
    if isinstance(model, HFBackbone) or backbone != "modular":
        assert hasattr(model, "output_layer")
    x = torch.randint(1, n_items + 1, (3, 6), generator=torch.Generator().manual_seed(2))
    x[1, :2] = 0
    labels = torch.where(
        x > 0, torch.randint(1, n_items + 1, x.shape, generator=torch.Generator().manual_seed(3)), 0
    )
    users = torch.tensor([1, 2, 3])
    grads = []
    for fused in (True, False):
        model.zero_grad()
        hidden = model(x, users)
        loss = training_loss(model, hidden, labels, users, LossConfig(name="ce", fused=fused), padding_free)
        loss.backward()
        grads.append([loss.detach()] + [p.grad.clone() for p in model.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1]) > 3
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_float64_inputs_get_float64_gradients_and_no_grad_skips_them():
    g = torch.Generator().manual_seed(2)
    h = torch.randn(5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(9, 4, generator=g, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 9, (5,), generator=g)
    loss = linear_cross_entropy(h, w, t)
    loss.backward()
    assert h.grad.dtype == w.grad.dtype == torch.float64
    torch.testing.assert_close(loss.double(), plain(h.detach(), w.detach(), None, t), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        assert not linear_cross_entropy(h, w, t).requires_grad


@pytest.mark.parametrize("loss", [{"name": "bce"}, {"name": "ce", "fused": False}])
def test_bf16_is_refused_where_there_is_no_fused_ce(loss):
    from modsar.errors import ModsarError

    with pytest.raises(ModsarError, match=r"train\.precision=bf16 runs the fused full-softmax CE"):
        Config.from_dict({"train": {"precision": "bf16"}, "loss": loss})
    assert Config.from_dict({"train": {"precision": "bf16"}}).train.precision == "bf16"
