"""The parts every backbone shares, so that no backbone imports another: the attention mask of a direction
(and LOCKER's local heads), multi-head self-attention, absolute position ids and the sinusoidal table, and
the tied output layer (item scores, the fused CE's output form, BERT4Rec's head, and the score/output_layer
pair of a backbone whose scores are its item table's dot products).

Inputs are left-padded everywhere: row ids 0 pad, 1..N items, N + 1 the AE mask token.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def attention_mask(
    inputs: torch.Tensor, causal: bool, num_heads: int, local_heads: int, window: int, prefix: int = 0
) -> torch.Tensor:
    """Boolean (B, H, T, T) mask, True = may attend. Real queries never see padding keys; the first `prefix`
    columns (user tokens) are seen by every query, local heads included, and see as a global query would.

    Padding queries see themselves only, so no row is empty (no NaN) and they influence nothing.
    """
    B, T = inputs.shape
    i = torch.arange(T, device=inputs.device)
    offset = i[:, None] - i[None, :]  # query index - key index
    allowed = (inputs > 0)[:, None, None, :].expand(B, 1, T, T)
    if causal:
        allowed = allowed & (offset >= 0)
    if local_heads:
        near = offset <= window if causal else offset.abs() <= window
        heads = torch.arange(num_heads, device=inputs.device) >= num_heads - local_heads
        allowed = allowed & (near | ~heads[:, None, None])
    if prefix:  # user tokens are global: no window hides them, and (AE) they read every real item
        allowed = allowed.clone()
        allowed[..., :prefix] = True
        if not causal:
            allowed[..., :prefix, :] = (inputs > 0)[:, None, None, :]
    return allowed | torch.eye(T, dtype=torch.bool, device=inputs.device)


class SelfAttention(nn.Module):
    """Multi-head attention; with `codes` > 0, also Shaw-style relative keys: query q_i meets key j as
    q_i . k_j + q_i[:code_dim] . R[code_ij] (each head's first `code_dim` query dimensions carry position)."""

    def __init__(self, d: int, heads: int, attn_dropout: float, codes: int = 0, code_dim: int = 0) -> None:
        super().__init__()
        self.heads, self.attn_dropout = heads, attn_dropout
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.rel_keys = nn.Embedding(codes, code_dim) if codes else None

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = False,
        query: torch.Tensor | None = None,
        codes: torch.Tensor | None = None,
        query_bias: torch.Tensor | None = None,
        score_bias: torch.Tensor | None = None,
    ):
        """Self-attention over x; with `query`, queries come from it and keys/values from x (SASRec's block);
        `codes` (T, T) index the relative keys; `query_bias` (B, d) is added to every query (user bias);
        `score_bias` (B, H, T, T) to every score (time bias)."""
        B, T, d = x.shape
        dh = d // self.heads
        if query is None:
            q, k, v = self.qkv(x).view(B, T, 3, self.heads, dh).permute(2, 0, 3, 1, 4)
        else:
            w, b = self.qkv.weight, self.qkv.bias
            q = F.linear(query, w[:d], b[:d]).view(B, T, self.heads, dh).transpose(1, 2)
            k, v = F.linear(x, w[d:], b[d:]).view(B, T, 2, self.heads, dh).permute(2, 0, 3, 1, 4)
        if query_bias is not None:
            q = q + query_bias.view(B, self.heads, 1, dh)
        if self.rel_keys is not None and codes is not None:
            by_code = q[..., : self.rel_keys.embedding_dim] @ self.rel_keys.weight.T  # (B, H, T, codes)
            relative = by_code.gather(-1, codes.expand(B, self.heads, T, T)) / math.sqrt(dh)
            score_bias = relative if score_bias is None else relative + score_bias
        # boolean, or the added scores with -inf where the mask forbids
        bias: torch.Tensor = mask if score_bias is None else score_bias.masked_fill(~mask, float("-inf"))
        p = self.attn_dropout if self.training else 0.0
        if need_weights:  # explicit path so the probabilities can be returned for analysis
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
            scores = scores.masked_fill(~mask, float("-inf")) if bias.dtype == torch.bool else scores + bias
            probs = scores.softmax(-1)
            y = F.dropout(probs, p, self.training) @ v
        else:
            probs = None
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
        return self.proj(y.transpose(1, 2).reshape(B, T, d)), probs


def position_ids(inputs: torch.Tensor, positions: int, from_start: bool) -> torch.Tensor:
    """Absolute position indices of left-padded rows: (T,) counted back from the window's last slot (position
    `positions` - 1 is the most recent item), or (B, T) from each row's first real item (padding gets 0)."""
    T = inputs.size(1)
    if from_start:
        return (torch.arange(T, device=inputs.device) - (inputs == 0).sum(1, keepdim=True)).clamp(min=0)
    return torch.arange(positions - T, positions, device=inputs.device)


def sinusoidal_table(positions: int, d: int) -> torch.Tensor:
    """The fixed sine/cosine position table (positions, d) of "Attention is all you need", for
    model.positional=sinusoidal."""
    pos = torch.arange(positions, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(positions, d)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : d // 2]
    return table


def item_scores(
    hidden: torch.Tensor, table: nn.Embedding, num_items: int, items: torch.Tensor | None = None
) -> torch.Tensor:
    """Dot products of hidden states (..., d) with rows of the tied item table.

    items None: all items 1..N -> (..., N). items (K,): the same K candidates for every row -> (..., K), one
    matrix product against the K gathered rows (sampled softmax with shared negatives). items (..., K) with
    the leading shape of `hidden`: per-row candidates -> (..., K); this gathers a (..., K, d) tensor, so it is
    meant for small K (the target, BCE/BPR negatives).
    """
    if items is None:
        rows = table.weight[1 : num_items + 1]
        if hidden.dim() == 2 and hidden.device.type == "cpu" and not torch.is_grad_enabled():
            # evaluation on CPU: MKL runs the item-major product (N, d) @ (d, B) ~1.8x faster than (B, d) @
            # (d, N) at d = 64, with the same sums (benchmarks/eval_speed.py); the (B, N) scores are its
            # transposed view
            return (rows @ hidden.T).T
        return hidden @ rows.T
    if items.dim() == 1:
        return hidden @ table(items).T
    return (hidden.unsqueeze(-2) * table(items)).sum(-1)


OutputLayer = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]


def tied_output(hidden: torch.Tensor, table: nn.Embedding, num_items: int) -> OutputLayer:
    """`item_scores` as (states, item rows 1..N, no bias): the form the fused CE takes."""
    return hidden, table.weight[1 : num_items + 1], None


class OutputHead(nn.Module):
    """BERT4Rec's output layer: h -> LN(GELU(W h + b)), scored against the tied item table plus an item
    bias."""

    def __init__(self, d: int, num_items: int) -> None:
        super().__init__()
        self.dense, self.norm = nn.Linear(d, d), nn.LayerNorm(d, eps=1e-12)
        self.item_bias = nn.Parameter(torch.zeros(num_items + 2))  # rows as the item table: 0 pad, N+1 mask
        self.num_items = num_items

    def transform(self, hidden: torch.Tensor) -> torch.Tensor:
        """h -> LN(GELU(W h + b)): the states BERT4Rec scores, shared by `forward` and the fused CE's output
        layer."""
        return self.norm(F.gelu(self.dense(hidden)))

    def forward(self, hidden: torch.Tensor, table: nn.Embedding, items: torch.Tensor | None) -> torch.Tensor:
        """Scores as `item_scores` (all items, shared or per-row candidates), of the transformed states."""
        scores = item_scores(self.transform(hidden), table, self.num_items, items)
        return scores + (self.item_bias[1 : self.num_items + 1] if items is None else self.item_bias[items])


class TiedScores:
    """score() and output_layer() of a backbone whose item scores are dot products of its states with its own
    item table (`item_emb`, `num_items`): BSARec, GRU4Rec and the HuggingFace adapter."""

    item_emb: nn.Embedding
    num_items: int

    def score(
        self, hidden: torch.Tensor, users: torch.Tensor | None = None, items: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Scores against the tied item table (see `item_scores`); the user plays no part."""
        return item_scores(hidden, self.item_emb, self.num_items, items)

    def output_layer(self, hidden: torch.Tensor) -> OutputLayer:
        """The tied scores as (states, item rows, no bias), for the fused full-softmax CE."""
        return tied_output(hidden, self.item_emb, self.num_items)
