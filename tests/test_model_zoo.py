"""The residual-dominance paper's other models: GRU4Rec, DuoRec, BSARec and the gBCE loss.

Known answers: no AR path reads the future (GRU4Rec, DuoRec, BSARec-AR, BSARec's frequency branch alone);
BSARec's filter equals numpy's FFT low-pass on the official window; DuoRec's InfoNCE equals a batch of three
worked out by hand; gBCE equals its formula at t = 0 (plain BCE) and t = 1; same-target partners are real
training prefixes of the same next item.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from modsar.config import Config, LossConfig, ModelConfig, load_config
from modsar.data.batches import Batch, TrainBatches
from modsar.data.split import LeaveOneOut
from modsar.errors import ModsarError
from modsar.model import registry
from modsar.model.bsarec import BSARec, low_pass_matrix
from modsar.model.duorec import DuoRec, final_states, info_nce
from modsar.model.gru4rec import GRU4Rec
from modsar.model.losses import gbce_beta, training_loss

N_ITEMS, N_USERS, MAX_LEN = 40, 8, 12

AR_MODELS = {
    "gru4rec": (GRU4Rec, {}),
    "gru4rec-2-layers-wide": (GRU4Rec, {"num_layers": 2, "gru_size": 24}),
    "duorec": (DuoRec, {}),
    "bsarec": (BSARec, {}),
    "bsarec-frequency-only": (BSARec, {"bsa_alpha": 1.0, "bsa_cutoff": 5}),
    "bsarec-cutoff-0": (BSARec, {"bsa_alpha": 0.5, "bsa_cutoff": 0}),
    "bsarec-positions-from-start": (BSARec, {"positions_from": "start"}),
}


def make(cls, task: str, **overrides):
    torch.manual_seed(0)
    cfg = ModelConfig(
        **{"hidden_size": 16, "num_layers": 2, "dropout": 0.0, "attn_dropout": 0.0, **overrides}
    )
    return cls(cfg, N_ITEMS, N_USERS, MAX_LEN, task).eval()


def batch(T: int = 10, B: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randint(1, N_ITEMS + 1, (B, T), generator=torch.Generator().manual_seed(1))
    x[1, :3] = 0  # a left-padded row
    return x, torch.arange(1, B + 1)


@pytest.mark.parametrize("name", sorted(AR_MODELS))
def test_ar_future_leak(name):
    """Changing items after t leaves every AR output at positions <= t unchanged (and changes later ones)."""
    cls, overrides = AR_MODELS[name]
    model = make(cls, "ar", **overrides)
    x, users = batch()
    base = model(x, users)
    for t in range(3, x.size(1) - 1):
        changed = x.clone()
        changed[:, t + 1 :] = (changed[:, t + 1 :] % N_ITEMS) + 1
        out = model(changed, users)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :])


@pytest.mark.parametrize(
    "name, overrides, consistent",
    [
        ("gru4rec", {}, True),
        ("duorec", {"positions_from": "start"}, True),
        ("bsarec", {"positions_from": "start"}, True),
        (
            "bsarec",
            {"positions_from": "end"},
            False,
        ),  # the official positions: a prefix's slots move as items follow
    ],
)
def test_ar_state_is_a_function_of_the_prefix(name, overrides, consistent):
    """The state at t inside a sequence equals the last state of the prefix x_0..x_t encoded alone, exactly
    when positions count from the first item (or there are none); BSARec's official end-aligned positions do
    not."""
    model = make(AR_MODELS[name][0], "ar", **overrides)
    x, users = batch()
    full = model(x, users)
    gaps = []
    for t in range(4, x.size(1) - 1):
        prefix = torch.cat([torch.zeros(3, x.size(1) - 1 - t, dtype=torch.long), x[:, : t + 1]], dim=1)
        gaps.append((model(prefix, users)[:, -1] - full[:, t]).abs().max().item())
    if consistent:
        assert max(gaps) < 1e-5
    else:
        assert min(gaps) > 1e-2


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device here: the zoo's CUDA check needs one"
)
def test_the_zoo_on_cuda_matches_cpu():
    """On CUDA, every AR variant and BSARec-AE: the same outputs as on CPU, no future leak under AR, and a
    finite training step with its own loss (DuoRec's regulariser, gBCE for the others) in float32, and with
    bf16 products in the fused CE."""
    from modsar.training.trainer import batch_loss

    for name, task in [*((n, "ar") for n in sorted(AR_MODELS)), ("bsarec", "ae")]:
        cls, overrides = AR_MODELS.get(name, (BSARec, {}))
        model = make(cls, task, **overrides)
        x, users = batch()
        expected = model(x, users)
        model = model.cuda()
        got = model(x.cuda(), users.cuda())
        torch.testing.assert_close(
            got.cpu(), expected, rtol=1e-4, atol=1e-4, msg=f"{name}: CUDA differs from CPU"
        )
        if task == "ar":
            changed = x.clone().cuda()
            changed[:, 6:] = (changed[:, 6:] % N_ITEMS) + 1
            torch.testing.assert_close(model(changed, users.cuda())[:, :6], got[:, :6], rtol=0, atol=1e-5)
        backbone = name.split("-")[0]
        own = {"cl_views": "un"} if backbone == "duorec" else {"name": "gbce", "num_negatives": 4}
        for precision, loss in (
            ("fp32", own),
            ("bf16", own if backbone == "duorec" else {}),
        ):  # bf16: fused CE
            cfg = Config.from_dict(
                {
                    "model": {"backbone": backbone, **overrides},
                    "task": task,
                    "train": {"precision": precision},
                    "loss": loss,
                }
            )
            b = Batch(x[:, :-1], x[:, 1:] * (x[:, :-1] > 0), users).to(torch.device("cuda"))
            value = batch_loss(model.train(), b, cfg, per_batch=float((b.labels > 0).sum()))
            value.backward()
            assert torch.isfinite(value), (name, precision)
            assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters()), (
                name,
                precision,
            )
            model.zero_grad()


@pytest.mark.parametrize("name", sorted(AR_MODELS))
def test_padding_changes_nothing(name):
    """Extra left padding changes no output at a real position (GRU4Rec: the zero state survives padding)."""
    cls, overrides = AR_MODELS[name]
    model = make(cls, "ar", **overrides)
    x, users = batch(T=8)
    padded = torch.cat([torch.zeros(3, 4, dtype=torch.long), x], dim=1)
    torch.testing.assert_close(model(padded, users)[:, 4:][x > 0], model(x, users)[x > 0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("alpha", [1.0, 0.9, 0.0])
def test_bsarec_ae_is_bidirectional_and_padding_free(alpha):
    model = make(BSARec, "ae", bsa_alpha=alpha)
    x, users = batch()
    base = model(x, users)
    changed = x.clone()
    changed[:, 5] = (changed[:, 5] % N_ITEMS) + 1
    out = model(changed, users)
    assert (out[:, 4] - base[:, 4]).abs().max() > 1e-4  # the left neighbour sees the right side
    padded = torch.cat([torch.zeros(3, 2, dtype=torch.long), x], dim=1)
    torch.testing.assert_close(model(padded, users)[:, 2:][x > 0], base[x > 0], rtol=0, atol=1e-5)


def numpy_low_pass(window: np.ndarray, keep: int) -> np.ndarray:
    """The official filter on one (N, d) window: rfft along time (ortho), bins >= keep zeroed, irfft."""
    spectrum = np.fft.rfft(window, axis=0, norm="ortho")
    spectrum[keep:] = 0
    return np.fft.irfft(spectrum, n=len(window), axis=0, norm="ortho")


@pytest.mark.parametrize("cutoff", [0, 3, 5, 9])
def test_bsarec_filter_against_numpy_fft(cutoff):
    """AE: the window's low-pass. AR: at each t, the low-pass of the prefix ending at t left-padded to N, read
    at its last position (what the official model computes for a sequence ending at t)."""
    N, T, d, keep = MAX_LEN, 7, 5, cutoff // 2 + 1
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, d))
    window = np.vstack([np.zeros((N - T, d)), x])  # left padding as zeros
    ae = low_pass_matrix(N, keep, causal=False)[-T:, -T:].double().numpy() @ x
    np.testing.assert_allclose(ae, numpy_low_pass(window, keep)[-T:], atol=1e-6)
    ar = low_pass_matrix(N, keep, causal=True)[-T:, -T:].double().numpy() @ x
    for t in range(T):
        prefix = np.vstack([np.zeros((N - t - 1, d)), x[: t + 1]])
        np.testing.assert_allclose(ar[t], numpy_low_pass(prefix, keep)[-1], atol=1e-6)
    assert not np.allclose(ae, ar)  # the two directions really differ


def test_bsarec_frequency_branch_by_formula():
    """F(x) = LN(x + low(x) + beta^2 (x - low(x))) with padding read as zero (dropout off)."""
    model = make(BSARec, "ar")
    branch = model.layers[0].frequency
    x = torch.randn(2, 6, 16)
    real = torch.tensor([[True] * 6, [False] * 2 + [True] * 4])
    signal = x * real[..., None]
    low = low_pass_matrix(MAX_LEN, 2, causal=True)[-6:, -6:] @ signal
    expected = torch.nn.functional.layer_norm(
        x + low + branch.sqrt_beta**2 * (signal - low), (16,), branch.norm.weight, branch.norm.bias, 1e-12
    )
    torch.testing.assert_close(branch(x, real), expected)


def test_info_nce_by_hand():
    """Three sequences, targets 5, 6, 5; dot similarity, tau 1. Each view's positive is its partner; the other
    view of the same target is no negative. Written out row by row."""
    first = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    second = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 1.0]])
    e = math.e
    rows = [
        -math.log(e / (e + 2)),  # a1: partner b1 (1); negatives a2 (0), b2 (0)
        -math.log(e**2 / (e**2 + 1 + e + 1 + e)),  # a2: partner b2 (2); a1 0, a3 1, b1 0, b3 1
        -math.log(e / (e + e + e**2)),  # a3: partner b3 (1); a2 1, b2 2
        -math.log(e / (e + 2)),  # b1: partner a1 (1); a2 0, b2 0
        -math.log(e**2 / (e**2 + 1 + e**2 + 1 + e**2)),  # b2: partner a2 (2); a1 0, a3 2, b1 0, b3 2
        -math.log(e / (e + e + e**2)),
    ]  # b3: partner a3 (1); a2 1, b2 2
    got = info_nce(first, second, torch.tensor([5, 6, 5]), temperature=1.0)
    assert got.item() == pytest.approx(sum(rows) / 6, rel=1e-6)
    # temperature divides every similarity; cosine normalises first
    half = info_nce(first, second, torch.tensor([5, 6, 5]), temperature=2.0)
    assert half.item() == pytest.approx(
        info_nce(first / 2**0.5, second / 2**0.5, torch.tensor([5, 6, 5]), 1.0).item(), rel=1e-6
    )
    unit = info_nce(first, second, torch.tensor([5, 6, 5]), 1.0, "cos")
    normed = torch.nn.functional.normalize
    assert unit.item() == pytest.approx(
        info_nce(normed(first, dim=-1), normed(second, dim=-1), torch.tensor([5, 6, 5]), 1.0).item(), rel=1e-6
    )


def duorec_batch() -> Batch:
    x, users = batch()
    return Batch(
        x[:, :-1],
        x[:, 1:] * (x[:, :-1] > 0),
        users,
        partners=x[[2, 0, 1], :-2],
        partner_users=users[[2, 0, 1]],
    )


@pytest.mark.parametrize("views", ["un", "su", "us", "us_x"])
def test_duorec_regularizer_contrasts_the_named_views(views):
    """With dropout off, the dropout view equals the plain encoding, so each mode reduces to a known
    InfoNCE."""
    model = make(DuoRec, "ar")
    b = duorec_batch()
    hidden = model(b.inputs, b.users)
    cfg = LossConfig(cl_weight=0.3, cl_views=views, cl_temperature=0.5)
    plain, partner = hidden[:, -1], model(b.partners, b.partner_users)[:, -1]
    targets = b.labels[:, -1]
    pairs = {
        "un": [(plain, plain)],
        "su": [(plain, partner)],
        "us": [(plain, plain), (plain, partner)],
        "us_x": [(plain, partner)],
    }[views]
    expected = 0.3 * sum(info_nce(a, c, targets, 0.5) for a, c in pairs)
    torch.testing.assert_close(model.regularizer(b, hidden, cfg), expected)
    assert model.regularizer(b, hidden, LossConfig(cl_weight=0.0)) is None


def test_duorec_training_loss_is_ce_plus_lambda_info_nce():
    """The loss a DuoRec batch trains on (training.batch_loss): full-softmax CE over every labelled position
    plus lambda times the InfoNCE of the last states, each written out here from the scores and states."""
    from modsar.training.trainer import batch_loss

    model = make(DuoRec, "ar")
    b = duorec_batch()
    cfg = Config.from_dict(
        {
            "model": {"backbone": "duorec"},
            "task": "ar",
            "loss": {"cl_weight": 0.3, "cl_views": "su", "cl_temperature": 0.5},
        }
    )
    hidden = model(b.inputs, b.users)
    real = b.labels > 0
    ce = torch.nn.functional.cross_entropy(model.score(hidden[real]), b.labels[real] - 1)
    partner = model(b.partners, b.partner_users)[:, -1]
    expected = ce + 0.3 * info_nce(hidden[:, -1], partner, b.labels[:, -1], 0.5)
    got = batch_loss(model, b, cfg, per_batch=float(real.sum()))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert (got - ce).item() > 1e-3  # the contrastive term is really there


def test_partner_states_encoded_by_length_equal_one_padded_pass():
    """Partners are encoded in length-sorted groups, each only as wide as its longest row: the same final
    states, in row order, as one pass over the whole padded batch, and gradients flow through them."""
    model = make(DuoRec, "ar")
    x = torch.randint(1, N_ITEMS + 1, (7, 9), generator=torch.Generator().manual_seed(3))
    for row, length in enumerate([9, 1, 4, 2, 9, 3, 6]):
        x[row, : 9 - length] = 0
    users = torch.arange(1, 8)
    expected = model(x, users)[:, -1]
    got = final_states(model, x, users, group=2)
    torch.testing.assert_close(got, expected)
    # a weighted sum: the states end in a LayerNorm, whose rows sum to ~0 whatever the input, so the
    # gradient of a plain sum is exactly zero even when gradients flow
    weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(4))
    (got * weights).sum().backward()
    assert model.item_emb.weight.grad is not None and model.item_emb.weight.grad.abs().sum() > 0


def test_duorec_dropout_view_is_a_second_forward_pass():
    """In training mode the unsupervised view is a fresh encoding (another dropout mask), not the first
    one."""
    model = make(DuoRec, "ar", dropout=0.5, attn_dropout=0.5).train()
    b = duorec_batch()
    torch.manual_seed(1)
    hidden = model(b.inputs, b.users)
    cfg = LossConfig(cl_weight=1.0, cl_views="un")
    torch.manual_seed(2)
    got = model.regularizer(b, hidden, cfg)
    torch.manual_seed(2)
    second = model(b.inputs, b.users)[:, -1]
    assert not torch.allclose(second, hidden[:, -1])  # the two views differ
    torch.testing.assert_close(got, info_nce(hidden[:, -1], second, b.labels[:, -1], 1.0))


def toy_split() -> LeaveOneOut:
    # user 1: 1 2 3 4 5 6 (train 1..4), user 2: 7 3 8 9 (train 7 3), user 3: 2 3 4 10 11 (train 2 3 4),
    # user 4: 5 12 (train only: fewer than 3 items)
    users = np.repeat([1, 2, 3, 4], [6, 4, 5, 2])
    items = np.array([1, 2, 3, 4, 5, 6, 7, 3, 8, 9, 2, 3, 4, 10, 11, 5, 12])
    return LeaveOneOut.from_log(users, items, 4, 12)


def test_same_target_partners_are_training_prefixes_of_the_same_next_item():
    split = toy_split()
    batches = TrainBatches(split, "ar", max_len=2, batch_size=8, partners=True, seed=0)
    seen = {}
    for _ in range(50):
        b = batches.make(np.arange(len(batches.users)))
        for row, target in enumerate(b.labels[:, -1].tolist()):
            prefix = tuple(v for v in b.partners[row].tolist() if v)
            seen.setdefault(target, set()).add((int(b.partner_users[row]), prefix))
    # the rows' last training items: user 1 -> 4, user 2 -> 3, user 3 -> 4, user 4 -> 12
    assert seen[4] == {(3, (2, 3)), (1, (2, 3))}  # each other's prefix before 4 (max_len 2), never its own
    assert seen[3] == {(1, (1, 2)), (3, (2,))}  # another user's prefix before 3 (user 2's own excluded)
    assert seen[12] == {(4, (5,))}  # nobody else: the row's own prefix
    # no held-out item (6, 5 of user 1, 8 9 of user 2, 10 11 of user 3) is ever in a partner prefix
    assert all(v not in {6, 8, 9, 10, 11} for prefixes in seen.values() for _, p in prefixes for v in p)


def test_same_target_partners_of_prefix_samples():
    """samples=prefixes (DuoRec's own recipe): every prefix row gets another prefix with its next item."""
    split = toy_split()
    batches = TrainBatches(split, "ar", max_len=2, batch_size=8, partners=True, seed=0, samples="prefixes")
    seen = {}
    for _ in range(50):
        b = batches.make(np.arange(len(batches.users)))
        for row in range(len(b.users)):
            key = (int(b.users[row]), tuple(v for v in b.inputs[row].tolist() if v), int(b.labels[row, -1]))
            seen.setdefault(key, set()).add(
                (int(b.partner_users[row]), tuple(v for v in b.partners[row].tolist() if v))
            )
    assert seen == {
        (1, (1,), 2): {(1, (1,))},  # nobody else has next item 2: its own prefix
        (1, (1, 2), 3): {(2, (7,)), (3, (2,))},
        (2, (7,), 3): {(1, (1, 2)), (3, (2,))},
        (3, (2,), 3): {(1, (1, 2)), (2, (7,))},
        (1, (2, 3), 4): {(3, (2, 3))},
        (3, (2, 3), 4): {(1, (2, 3))},
        (4, (5,), 12): {(4, (5,))},
    }


def test_gbce_matches_its_formula_at_t0_and_t1():
    """gbce = (beta softplus(-s+) + sum softplus(s-)) / (1 + k), beta = alpha (t (1 - 1/alpha) + 1/alpha),
    alpha = k / (N - 1); t = 0 is BCE with logits against [1, 0, ..., 0], t = 1 raises sigma(s+) to alpha."""
    model = make(GRU4Rec, "ar")
    x, users = batch()
    inputs, labels = x[:, :-1], x[:, 1:] * (x[:, :-1] > 0)
    hidden = model(inputs, users)
    k = 7
    h, y = hidden[labels > 0], labels[labels > 0]
    negatives = torch.randint(1, N_ITEMS + 1, (len(h), k), generator=torch.Generator().manual_seed(5))
    pos = model.score(h, None, y[:, None])[:, 0]
    neg = model.score(h, None, negatives)
    valid = negatives != y[:, None]
    for t, beta in [(0.0, 1.0), (1.0, k / (N_ITEMS - 1))]:
        assert gbce_beta(k, N_ITEMS, t) == pytest.approx(beta)
        cfg = LossConfig(name="gbce", num_negatives=k, gbce_t=t)
        got = training_loss(model, hidden, labels, users, cfg, generator=torch.Generator().manual_seed(5))
        per_position = (
            -beta * torch.log(torch.sigmoid(pos)) - (torch.log(1 - torch.sigmoid(neg)) * valid).sum(1)
        ) / (1 + k)
        torch.testing.assert_close(got, per_position.mean())
        if (
            t == 0.0
        ):  # BCE with logits over the 1 + k entries of a position (a negative that hit the target: 0)
            logits = torch.cat([pos[:, None], neg], 1)
            target = torch.cat([torch.ones(len(h), 1), torch.zeros(len(h), k)], 1)
            weight = torch.cat([torch.ones(len(h), 1), valid.float()], 1)
            bce = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, target, weight, reduction="none"
            )
            torch.testing.assert_close(got, bce.mean(1).mean())


def test_gbce_equals_gsasrecs_transformed_logit_form():
    """gSASRec computes gBCE as BCE on a transformed positive logit log(1 / (sigmoid(s)^-beta - 1)) (float64);
    our beta softplus(-s) must give the same loss."""
    from modsar.model.losses import gbce_beta

    k, n_items, t = 256, 3000, 0.75
    beta = gbce_beta(k, n_items, t)
    g = torch.Generator().manual_seed(0)
    pos, neg = (
        torch.randn(50, 1, generator=g, dtype=torch.float64) * 3,
        torch.randn(50, k, generator=g, dtype=torch.float64) * 3,
    )
    transformed = torch.log(1.0 / (torch.sigmoid(pos).pow(-beta) - 1.0))
    logits = torch.cat([transformed, neg], 1)
    target = torch.cat([torch.ones(50, 1), torch.zeros(50, k)], 1).double()
    theirs = torch.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none").mean(1)
    ours = (beta * torch.nn.functional.softplus(-pos[:, 0]) + torch.nn.functional.softplus(neg).sum(1)) / (
        1 + k
    )
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


def test_registry_refuses_what_the_models_cannot_do():
    with pytest.raises(ModsarError, match="gru4rec implements task ar only"):
        load_config(None, ["model.backbone=gru4rec", "task=ae"])
    with pytest.raises(ModsarError, match="duorec implements task ar only"):
        load_config(None, ["model.backbone=duorec", "task=ae"])
    with pytest.raises(ModsarError, match="bsarec's layers are post-LN"):
        load_config(None, ["model.backbone=bsarec", "model.norm=pre"])
    with pytest.raises(ModsarError, match="bsa_alpha"):
        load_config(None, ["model.backbone=bsarec", "model.bsa_alpha=1.5"])
    with pytest.raises(ModsarError, match=r"gru4rec has no 'model\.head'"):  # a knob it would silently ignore
        load_config(None, ["model.backbone=gru4rec", "model.head=bert4rec"])
    with pytest.raises(ModsarError, match=r"bsarec has no 'model\.init'"):
        load_config(None, ["model.backbone=bsarec", "model.init=xavier"])
    with pytest.raises(ModsarError, match="gbce_t"):
        load_config(None, ["loss.name=gbce", "loss.gbce_t=2"])
    # another backbone's knob: refused, not ignored
    for setting, (owner,) in registry.owned_settings().items():
        value = {
            "loss.cl_views": "un",
            "loss.cl_similarity": "cos",
            "model.gru_size": "32",
            "model.bsa_cutoff": "5",
        }.get(setting, "0.5")
        with pytest.raises(ModsarError, match=rf"'{setting}=.*' is read by model.backbone={owner} only"):
            load_config(None, ["model.backbone=modular", f"{setting}={value}"])
        load_config(None, [f"model.backbone={owner}", "task=ar", f"{setting}={value}"])
    with pytest.raises(ModsarError, match=r"'loss\.gbce_t' calibrates loss\.name=gbce only"):
        load_config(None, ["loss.name=bce", "loss.gbce_t=0.5"])
    stored = Config.from_dict({"model": {"backbone": "gru4rec"}, "task": "ar", "loss": {"cl_views": "un"}})
    assert stored.loss.cl_views == "un"  # an earlier run's record still loads (the setting was a no-op there)
    assert registry.lookup("gru4rec").recurrent and not registry.lookup("bsarec").recurrent
    for name in ("gru4rec", "duorec", "bsarec"):
        cfg = Config.from_dict({"model": {"backbone": name, "hidden_size": 8, "num_heads": 1}})
        model = registry.build(cfg, N_ITEMS, N_USERS, MAX_LEN)
        assert model.score(model(batch()[0])[:, -1]).shape == (3, N_ITEMS)


@pytest.mark.parametrize("task", ["ar", "ae"])
def test_bsarec_attention_branch_decomposes_exactly(task):
    """The residual analyses on BSARec's attention branch: sum_j c_ij + b_O is the real projection output,
    c^LN rebuilds the branch's real LayerNorm, and under scaled skips the branch computes LN(alpha x +
    Attn)."""
    from modsar.analysis.analyze import contributions
    from modsar.model.skips import scaled_skips

    model = make(BSARec, task, num_heads=2, bsa_alpha=0.6)
    sites = model.skip_sites()
    assert len(sites) == 2 and all(s.post_norm is not None for s in sites)
    inputs, _ = batch(T=9)
    seen: dict[str, list] = {"x": [], "proj": [], "ln": []}
    for alpha in (1.0, 0.3):
        for captured in seen.values():
            captured.clear()
        with torch.no_grad(), scaled_skips(sites, alpha):
            hooks = [
                s.container.register_forward_pre_hook(lambda m, a: seen["x"].append(a[0])) for s in sites
            ]
            hooks += [
                s.projection.register_forward_hook(lambda m, a, out: seen["proj"].append(out)) for s in sites
            ]
            hooks += [
                s.post_norm.register_forward_pre_hook(lambda m, a: seen["ln"].append(a[0])) for s in sites
            ]
            _, maps = model(inputs, need_weights=True)
            for hook in hooks:
                hook.remove()
        for layer, (site, probs) in enumerate(zip(sites, maps, strict=True)):
            x, b_o = seen["x"][layer], site.b_o()
            c = contributions(site, x, probs, alpha)
            torch.testing.assert_close(
                c["attn"].sum(2) + b_o - (1 - alpha) * x, seen["proj"][layer], rtol=0, atol=1e-5
            )
            z = c["res"].sum(2) + b_o
            torch.testing.assert_close(seen["ln"][layer], z, rtol=0, atol=1e-5)  # alpha x + Attn(x) + b_O
            ln = site.post_norm
            s = torch.sqrt(z.var(-1, unbiased=False) + ln.eps)[..., None]
            torch.testing.assert_close(
                c["ln"].sum(2) + ln.weight * (b_o - b_o.mean()) / s + ln.bias, ln(z), rtol=0, atol=1e-4
            )


@pytest.fixture(scope="module")
def zoo_checkpoints(tmp_path_factory):
    """GRU4Rec, DuoRec and BSARec (on gBCE) briefly trained on the synthetic data (one data root for the
    module)."""
    from modsar.training.trainer import run_trial

    root = tmp_path_factory.mktemp("zoo")
    common = ["train.max_epochs=2", "train.patience=0", "model.hidden_size=16", "seed=3"]
    paths = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MODSAR_DATA", str(root / "data"))
        for name, extra in [
            ("gru4rec", []),
            ("duorec", []),
            ("bsarec", ["loss.name=gbce", "loss.num_negatives=8"]),
        ]:
            paths[name] = root / f"{name}.pt"  # BSARec trains on gBCE: the loss through the whole trainer
            run_trial(
                load_config(None, [*common, f"model.backbone={name}", *extra]),
                checkpoint_path=paths[name],
                progress=False,
                evaluate_test=False,
            )
    return root / "data", paths


def test_diagnostics_on_the_zoo(zoo_checkpoints):
    """Every model gets last-item reliance, shuffles, non-final predictions and recovery's set R; the
    attention models also mixing, residual scaling and Rec(alpha); GRU4Rec says plainly why it has not
    those."""
    from modsar.analysis.analyze import run

    data, paths = zoo_checkpoints
    wanted = ["hrli", "shuffle", "mixing", "residual-scaling", "nonfinal", "recovery"]
    for name, label in [("gru4rec", "GRU4Rec"), ("duorec", "DuoRec"), ("bsarec", "BSARec")]:
        analysis = run(paths[name], wanted, str(data), alphas=(0.5, 1.0))
        assert analysis.label == label
        got = set(analysis.table["diagnostic"])
        value = {
            (q, a): v
            for q, a, v in zip(
                analysis.table["quantity"], analysis.table["alpha"], analysis.table["value"], strict=True
            )
        }
        # R = miss at L and a hit at L-1, L-2 or L-3: at least each joint non-final share, at most their sum
        share_r, nonfinal = (
            value[("share of test users in R (miss at L, hit at L-1..3)", 1.0)],
            [value[(f"miss at L, hit at L-{o}", 1.0)] for o in (1, 2, 3)],
        )
        assert max(nonfinal) <= share_r <= sum(nonfinal)
        if name == "gru4rec":
            assert got == {"hrli", "shuffle", "nonfinal", "recovery"}
            assert set(analysis.table.loc[analysis.table["diagnostic"] == "recovery", "quantity"]) == {
                "share of test users in R (miss at L, hit at L-1..3)"
            }  # R only: there is no skip to scale
            assert analysis.notes == [
                f"{label}: mixing, residual-scaling not defined for recurrent models (gru4rec has no "
                "attention); last-item reliance, shuffles and non-final predictions are",
                f"{label}: recovery gives only its set R (misses at L that hit at L-1..3): Rec(alpha) scales "
                "the layers' attention skip, and gru4rec has no attention skip",
            ]
        else:
            assert got == set(wanted) and not analysis.notes
            assert max(nonfinal) < share_r < sum(nonfinal)  # the three sets overlap only in part
            assert value[("mixing_res", 0.5)] > value[("mixing_res", 1.0)]  # scaling the skip down mixes more


def test_cli_puts_the_models_side_by_side(zoo_checkpoints, tmp_path, capsys):
    """Figure 2 (HRLI@1 vs HRL2I@1 per model) as a PNG, Table 2 as DuoRec's mixing row, models in the paper's
    order."""
    from modsar.cli import main

    data, paths = zoo_checkpoints
    args = [
        "analyze",
        "--diagnostic",
        "hrli,mixing",
        "--data-dir",
        str(data),
        "--out",
        str(tmp_path),
        "--quiet",
    ]
    for name in ("gru4rec", "bsarec", "duorec"):
        args += ["--checkpoint", str(paths[name])]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert (tmp_path / "last_item_reliance.png").stat().st_size > 0
    table_2 = text.split("Residual-dominance paper Table 2")[1].split("\n\n")[0].splitlines()
    assert len(table_2) == 3 and table_2[2].startswith(
        "DuoRec (synthetic)"
    )  # SASRec absent, BSARec not in Table 2
    reliance = text.split("Last-item reliance")[1].split("\n\n")[0]
    rows = [line.split()[0] for line in reliance.splitlines()[3:] if not line.startswith("Residual paper")]
    assert rows == ["GRU4Rec", "BSARec", "DuoRec"]  # as given on the command line (--experiment sorts)

    # --from shows a written analysis again without recomputing it: the same tables (in the papers' order) and
    # Figure 2, and beside a fresh one of the same kind each is told apart by its source
    capsys.readouterr()
    assert main(["analyze", "--from", str(tmp_path), "--out", str(tmp_path / "again"), "--quiet"]) == 0
    again = capsys.readouterr().out
    reliance_again = again.split("Last-item reliance")[1].split("\n\n")[0]
    assert sorted(reliance_again.splitlines()) == sorted(
        reliance.splitlines()
    )  # the same figures, to the digit
    assert [
        line.split()[0] for line in reliance_again.splitlines()[3:] if not line.startswith("Residual")
    ] == ["DuoRec", "BSARec", "GRU4Rec"]  # the residual paper's order
    assert again.split("Residual-dominance paper Table 2")[1].split("\n\n")[0].splitlines() == table_2
    assert (tmp_path / "again" / "last_item_reliance.png").stat().st_size > 0
    assert (
        main(
            [
                "analyze",
                "--from",
                str(tmp_path),
                "--checkpoint",
                str(paths["duorec"]),
                "--diagnostic",
                "hrli",
                "--data-dir",
                str(data),
                "--quiet",
            ]
        )
        == 0
    )
    both = capsys.readouterr().out.split("Last-item reliance")[1].split("\n\n")[0]
    assert "DuoRec (" in both and both.count("DuoRec") == 2
    assert main(["analyze", "--from", str(tmp_path / "nosuch")]) == 2
    assert (
        "nosuch: no diagnostics.parquet; pass a folder written by `modsar analyze --out`"
        in capsys.readouterr().err
    )
