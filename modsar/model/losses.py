"""Training losses over the positions that carry a label.

  ce          softmax over all items 1..N; by default fused with the output layer and chunked (fused_ce.py),
              so the positions x items logits are never held whole
  sampled_ce  softmax over the target + `num_negatives` uniform items shared by the batch (hits masked);
              the shared negatives are scored as one matrix product, so memory grows with positions x K,
              not positions x K x d
  bce         sigmoid: target vs `num_negatives` uniform items per position
  bpr         -log sigmoid(target - negative), `num_negatives` per position
  gbce        gSASRec's generalised BCE: the target's sigmoid raised to beta = alpha (t (1 - 1/alpha) +
  1/alpha),
              alpha = k / (N - 1) the negative sampling rate, t = `gbce_t`; t = 0 is plain BCE. As gSASRec it
              is the mean over the 1 + k logits of a position (plain `bce` averages the negatives instead)
With `padding_free` the output layer runs only at labelled positions; otherwise it runs at every slot of
the padded batch and the padding is masked out of the loss afterwards (kept to measure the difference).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from modsar.config import LossConfig
from modsar.model.fused_ce import linear_cross_entropy
from modsar.model.interface import Recommender


def training_loss(
    model: Recommender,
    hidden: torch.Tensor,
    labels: torch.Tensor,
    users: torch.Tensor,
    cfg: LossConfig,
    padding_free: bool = True,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The mean loss over the labelled positions; `dtype` is that of the fused CE's matrix products."""
    has_label = labels > 0
    position_users = users[:, None].expand_as(labels)
    if padding_free:
        h, y, u = hidden[has_label], labels[has_label], position_users[has_label]
        weight = None
    else:
        h, y, u = hidden.reshape(-1, hidden.size(-1)), labels.reshape(-1), position_users.reshape(-1)
        weight = has_label.reshape(-1).float()
    n = model.num_items
    target = y.clamp(min=1)  # padding rows (dense mode only) get a dummy target and zero weight

    output_layer = getattr(model, "output_layer", None)  # backbones whose scores are states @ rows.T + bias
    if cfg.name == "ce" and cfg.fused and output_layer is not None:
        states, rows, bias = output_layer(h)
        return linear_cross_entropy(states, rows, target - 1, bias, weight, dtype)
    if cfg.name == "ce":
        per_position = F.cross_entropy(model.score(h, u), target - 1, reduction="none")
    elif cfg.name == "sampled_ce":
        negatives = torch.randint(1, n + 1, (cfg.num_negatives,), device=h.device, generator=generator)
        pos = model.score(h, u, target[:, None])
        neg = model.score(h, u, negatives)  # 1-D: one (P x d) @ (d x K) product, no (P, K, d) tensor
        neg = neg.masked_fill(negatives[None, :] == target[:, None], float("-inf"))
        logits = torch.cat([pos, neg], dim=1)
        per_position = F.cross_entropy(
            logits, torch.zeros(len(h), dtype=torch.long, device=h.device), reduction="none"
        )
    else:
        negatives = torch.randint(1, n + 1, (len(h), cfg.num_negatives), device=h.device, generator=generator)
        valid = (negatives != target[:, None]).float()  # a negative that is the target teaches nothing
        pos = model.score(h, u, target[:, None])
        neg = model.score(h, u, negatives)
        if cfg.name == "bce":
            neg_loss = F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="none")
            per_position = F.softplus(-pos[:, 0]) + (neg_loss * valid).sum(1) / valid.sum(1).clamp(min=1)
        elif cfg.name == "gbce":  # -log sigmoid(s)^beta = beta softplus(-s): exact, no clamping needed
            beta = gbce_beta(cfg.num_negatives, n, cfg.gbce_t)
            per_position = (beta * F.softplus(-pos[:, 0]) + (F.softplus(neg) * valid).sum(1)) / (
                1 + cfg.num_negatives
            )
        else:  # bpr
            per_position = (F.softplus(neg - pos) * valid).sum(1) / valid.sum(1).clamp(min=1)

    if weight is None:
        return per_position.mean()
    return (per_position * weight).sum() / weight.sum().clamp(min=1)


def gbce_beta(num_negatives: int, num_items: int, t: float) -> float:
    """gSASRec's power on the positive probability: alpha (t (1 - 1/alpha) + 1/alpha), alpha = k / (N - 1)."""
    alpha = num_negatives / max(num_items - 1, 1)
    return alpha * (t * (1.0 - 1.0 / alpha) + 1.0 / alpha)
