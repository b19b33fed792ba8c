"""Full-softmax cross-entropy fused with the output layer, computed in chunks of positions.

A batch's logits (labelled positions x items: 760 x 23,715 floats, 72 MB on Video) are never held whole.
Each chunk of rows computes its logits and softmax and, in the same pass, its gradient (softmax - one-hot),
which it multiplies back at once into the gradients of the hidden states, the item table and the item
bias; backward only scales those by the incoming gradient (the scheme of Liger-Kernel's fused linear
cross-entropy). Memory is one chunk of logits; the FLOPs are the unfused loss's three matrix products.

The softmax overwrites the logits it reads, and the loss of a row is -log of its target's probability, read
from the softmax, so no pass over a chunk serves the loss alone and the probabilities need no buffer of
their own. On a CPU whose cache a chunk overflows every pass crosses the memory bus: there the passes (the
softmax's included) took a third of the loss's time, the two that served the loss alone a fourteenth. A row
whose target's probability underflows (a logit gap of ~87 and more) gets its exact loss from its logits,
made again after the loop; the gradients are the softmax's either way.

`dtype=torch.bfloat16` runs the three products in bfloat16 (the logits are rounded to bfloat16, as under
autocast); the softmax, the loss and the gradient sums stay float32, and so do the parameters.
"""

from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 22  # logits per chunk: 4M floats = 16 MiB, half of this machine's L3


def chunk_rows(num_items: int, budget: int = CHUNK_ELEMENTS) -> int:
    """Rows per chunk so one chunk of logits holds about `budget` elements (at least 16 rows)."""
    return max(16, budget // max(num_items, 1))


_BUFFERS: dict[tuple, tuple[torch.Tensor, torch.Tensor | None]] = {}
_TINY = torch.finfo(torch.float32).tiny  # a target probability below it may have lost precision: made again


def _buffers(rows: int, items: int, dtype: torch.dtype, device: torch.device):
    """(logits, then probabilities in place; low-precision copy) buffers of one chunk, kept for the process:
    every batch of a run reuses the same 1-2 tensors instead of allocating them again (the last one asked for
    is kept)."""
    key = (rows, items, dtype, device)
    if key not in _BUFFERS:
        _BUFFERS.clear()
        logits = torch.empty((rows, items), dtype=torch.float32, device=device)
        _BUFFERS[key] = (logits, None if dtype == torch.float32 else torch.empty_like(logits, dtype=dtype))
    return _BUFFERS[key]


def _row_losses(p_target, hidden, weight, bias, target, dtype: torch.dtype) -> torch.Tensor:
    """Each row's loss, -log of its target's probability (a NaN, diverged, stays NaN); where that probability
    underflowed (rare), logsumexp - the target's logit, from the row's logits made again. Reads one flag back
    per batch, not per chunk."""
    per_row = -p_target.log()
    low = p_target < _TINY
    if bool(low.any()):
        logits = (hidden[low].to(dtype) @ weight.T).float()
        logits = logits + bias if bias is not None else logits
        per_row[low] = torch.logsumexp(logits, -1) - logits.gather(1, target[low, None]).squeeze(1)
    return per_row


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,  # type: ignore[override]
        target: torch.Tensor,
        row_scale: torch.Tensor,
        rows: int,
        dtype: torch.dtype,
        grad: bool,
    ) -> torch.Tensor:
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        need_h, need_w = grad and hidden.requires_grad, grad and weight.requires_grad
        need_b = grad and bias is not None and bias.requires_grad
        hidden, weight = hidden.float(), weight.float()  # float32 sums whatever comes in (no-ops for float32)
        bias = None if bias is None else bias.float()
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight) if need_w else None
        grad_b = torch.zeros_like(bias) if need_b and bias is not None else None
        w = weight.to(dtype)
        p_target = torch.empty(hidden.size(0), dtype=torch.float32, device=hidden.device)
        # one chunk's buffers, reused by every chunk: fresh 16 MiB tensors per chunk cost page faults, and
        # glibc keeps the freed ones in its heap (a 1 GiB process instead of 0.6 on Video)
        logits_buf, low_buf = _buffers(rows, weight.size(0), dtype, hidden.device)
        for start in range(0, hidden.size(0), rows):
            h = hidden[start : start + rows].to(dtype)
            t = target[start : start + rows, None]
            m = h.size(0)
            probs = logits_buf[:m]  # the logits, then (in place) their softmax
            if low_buf is None:
                torch.mm(h, w.T, out=probs)
            else:
                probs.copy_(torch.mm(h, w.T, out=low_buf[:m]))
            if bias is not None:
                probs += bias
            torch.ops.aten._softmax.out(probs, -1, False, out=probs)
            torch.gather(probs, 1, t, out=p_target[start : start + m, None])
            if not (need_h or need_w or need_b):
                continue
            scale = row_scale[start : start + rows]
            probs.scatter_add_(1, t, probs.new_full(t.shape, -1.0))  # softmax - one-hot: d loss_r / d logits
            probs *= scale[:, None]
            if grad_b is not None:
                grad_b += probs.sum(0)
            g = probs if low_buf is None else low_buf[:m].copy_(probs)
            if grad_h is not None and low_buf is None:
                torch.mm(g, w, out=grad_h[start : start + m])
            elif grad_h is not None:
                grad_h[start : start + m] = g @ w
            if grad_w is not None:
                if low_buf is None:
                    grad_w.addmm_(g.T, h)
                else:  # bfloat16 products, float32 sums
                    grad_w += g.T @ h
        loss = (_row_losses(p_target, hidden, w, bias, target, dtype) * row_scale).sum()
        ctx.save_for_backward(*(x for x in (grad_h, grad_w, grad_b) if x is not None))
        ctx.has = (grad_h is not None, grad_w is not None, grad_b is not None)
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):  # type: ignore[override]
        saved = iter(ctx.saved_tensors)
        grads = [
            (next(saved) * grad_loss).to(dtype) if has else None
            for has, dtype in zip(ctx.has, ctx.dtypes, strict=True)
        ]
        return grads[0], grads[1], grads[2], None, None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    row_weight: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    rows: int | None = None,
) -> torch.Tensor:
    """Mean over rows of cross_entropy(hidden @ weight.T + bias, target), or with `row_weight` the weighted
    mean sum(w_r ce_r) / sum(w_r), without the (rows x items) logits: see the module docstring.

    hidden (P, d), weight (N, d), target (P,) in 0..N-1, bias (N,). Not twice differentiable.
    """
    if row_weight is None:
        row_scale = hidden.new_full((hidden.size(0),), 1.0 / max(hidden.size(0), 1), dtype=torch.float32)
    else:
        row_scale = row_weight.float() / row_weight.float().sum().clamp(min=1e-12)
    return _LinearCrossEntropy.apply(
        hidden,
        weight,
        bias,
        target,
        row_scale,
        rows or chunk_rows(weight.size(0)),
        dtype,
        torch.is_grad_enabled(),
    )  # under no_grad: the loss alone
