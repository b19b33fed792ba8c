"""The modular self-attentive recommender: SASRec (AR) and BERT4Rec (AE) are two settings of one model.

Feature: item embedding * sqrt(d) [+ concatenated SSE-PT user vector] + positions (learned | sinusoidal |
none) [-> LayerNorm, as BERT4Rec]. Modeling: `num_layers` transformer blocks, whose attention is bidirectional
(`ae`) or causal (`ar`): post-norm (default), pre-norm, or one of two blocks whose skip is the normed input
(`norm=normed_skip`, the ModSAR code's layernorm_first: LN(x) + Attn(LN(x)); `norm=sasrec`, the SASRec code:
queries from LN(x), keys and values from x); the last `local_heads` heads only see a LOCKER-style window
(past-only under AR).
Output: tied item embedding, scores only for real items 1..N; `head=bert4rec` puts BERT4Rec's transform
(Linear, GELU, LayerNorm) before the dot product and adds a learned item bias (the paper's Table 4 model).

Inputs are left-padded; column c of a width-T batch gets position index P - T + c, so positions count back
from the most recent item and padding never moves them (`positions_from=start`: counted from each row's first
item instead, as tail-padded code does).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from modsar.config import ModelConfig
from modsar.model.skips import SkipSite, modular_sites


def attention_mask(inputs: torch.Tensor, causal: bool, num_heads: int, local_heads: int,
                   window: int) -> torch.Tensor:
    """Boolean (B, H, T, T) mask, True = may attend. Real queries never see padding keys.

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
    return allowed | torch.eye(T, dtype=torch.bool, device=inputs.device)


class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int, attn_dropout: float) -> None:
        super().__init__()
        self.heads, self.attn_dropout = heads, attn_dropout
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, need_weights: bool = False,
                query: torch.Tensor | None = None):
        """Self-attention over x; with `query`, queries come from it and keys/values from x (SASRec's block)."""
        B, T, d = x.shape
        if query is None:
            q, k, v = self.qkv(x).view(B, T, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        else:
            w, b = self.qkv.weight, self.qkv.bias
            q = F.linear(query, w[:d], b[:d]).view(B, T, self.heads, d // self.heads).transpose(1, 2)
            k, v = F.linear(x, w[d:], b[d:]).view(B, T, 2, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        p = self.attn_dropout if self.training else 0.0
        if need_weights:  # explicit path so the probabilities can be returned for analysis
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
            y = F.dropout(probs, p, self.training) @ v
        else:
            probs = None
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.proj(y.transpose(1, 2).reshape(B, T, d)), probs


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.style = cfg.norm if cfg.norm in ("pre", "sasrec", "normed_skip") else "post"
        self.pre_norm = self.style == "pre"
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, cfg.num_heads, cfg.attn_dropout)
        act = nn.GELU() if cfg.activation == "gelu" else nn.ReLU()
        inner = nn.Dropout(cfg.dropout) if cfg.ffn_inner_dropout else nn.Identity()
        self.ffn = nn.Sequential(nn.Linear(d, cfg.ffn_size or 4 * d), act, inner, nn.Linear(cfg.ffn_size or 4 * d, d))
        self.drop = nn.Dropout(cfg.dropout)
        self.attn_drop = nn.Dropout(cfg.dropout) if cfg.attn_output_dropout else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor, need_weights: bool = False):
        if self.style == "pre":
            a, probs = self.attn(self.norm1(x), mask, need_weights)
            x = x + self.attn_drop(a)
            x = x + self.drop(self.ffn(self.norm2(x)))
        elif self.style in ("sasrec", "normed_skip"):  # the normed input is the skip, in both sub-layers
            q = self.norm1(x)  # SASRec: only the queries read it, keys and values read x
            if self.style == "sasrec":
                a, probs = self.attn(x, mask, need_weights, query=q)
            else:
                a, probs = self.attn(q, mask, need_weights)
            x = self.norm2(q + self.attn_drop(a))
            x = x + self.drop(self.ffn(x))
        else:
            a, probs = self.attn(x, mask, need_weights)
            x = self.norm1(x + self.attn_drop(a))
            x = self.norm2(x + self.drop(self.ffn(x)))
        return x, probs


def sinusoidal_table(positions: int, d: int) -> torch.Tensor:
    pos = torch.arange(positions, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(positions, d)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : d // 2]
    return table


def item_scores(hidden: torch.Tensor, table: nn.Embedding, num_items: int,
                items: torch.Tensor | None = None) -> torch.Tensor:
    """Dot products of hidden states (..., d) with rows of the tied item table.

    items None: all items 1..N -> (..., N). items (K,): the same K candidates for every row -> (..., K), one
    matrix product against the K gathered rows (sampled softmax with shared negatives). items (..., K) with
    the leading shape of `hidden`: per-row candidates -> (..., K); this gathers a (..., K, d) tensor, so it is
    meant for small K (the target, BCE/BPR negatives).
    """
    if items is None:
        return hidden @ table.weight[1 : num_items + 1].T
    if items.dim() == 1:
        return hidden @ table(items).T
    return (hidden.unsqueeze(-2) * table(items)).sum(-1)


OutputLayer = tuple[torch.Tensor, torch.Tensor, "torch.Tensor | None"]


def tied_output(hidden: torch.Tensor, table: nn.Embedding, num_items: int) -> OutputLayer:
    """`item_scores` as (states, item rows 1..N, no bias): the form the fused CE takes."""
    return hidden, table.weight[1 : num_items + 1], None


class OutputHead(nn.Module):
    """BERT4Rec's output layer: h -> LN(GELU(W h + b)), scored against the tied item table plus an item bias."""

    def __init__(self, d: int, num_items: int) -> None:
        super().__init__()
        self.dense, self.norm = nn.Linear(d, d), nn.LayerNorm(d, eps=1e-12)
        self.item_bias = nn.Parameter(torch.zeros(num_items + 2))  # rows as the item table: 0 pad, N+1 mask
        self.num_items = num_items

    def transform(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(hidden)))

    def forward(self, hidden: torch.Tensor, table: nn.Embedding, items: torch.Tensor | None) -> torch.Tensor:
        """Scores as `item_scores` (all items, shared or per-row candidates), of the transformed states."""
        scores = item_scores(self.transform(hidden), table, self.num_items, items)
        return scores + (self.item_bias[1 : self.num_items + 1] if items is None else self.item_bias[items])


class ModularSAR(nn.Module):
    def __init__(self, cfg: ModelConfig, num_items: int, num_users: int, max_len: int, task: str) -> None:
        super().__init__()
        self.cfg, self.num_items, self.causal = cfg, num_items, task == "ar"
        d = cfg.hidden_size
        self.user_dim = (cfg.user_size or d // 2) if cfg.user_embedding else 0
        self.item_dim = d - self.user_dim
        self.positions = max_len + 1  # AE reads max_len history items + the mask token
        self.item_emb = nn.Embedding(num_items + 2, self.item_dim, padding_idx=0)  # 0 pad, N+1 mask
        self.user_emb = nn.Embedding(num_users + 1, self.user_dim) if self.user_dim else None
        self.positional = "learned" if cfg.positional == "auto" else cfg.positional
        if self.positional == "learned":
            self.pos_emb = nn.Embedding(self.positions, d)
        elif self.positional == "sinusoidal":
            self.register_buffer("pos_table", sinusoidal_table(self.positions, d), persistent=False)
        self.embed_norm = nn.LayerNorm(d, eps=1e-12) if cfg.embedding_norm else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)
        blocks = [Block(cfg) for _ in range(cfg.num_layers)]
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = nn.LayerNorm(d) if blocks and blocks[0].style != "post" else nn.Identity()
        self.head = OutputHead(self.item_dim, num_items) if cfg.head == "bert4rec" else None
        self.apply(self._init)
        # init normal: N(0, 0.02) everywhere (BERT, GPT-2). xavier: xavier_normal on every matrix, embeddings
        # included (SASRec's PyTorch code); xavier_uniform: the same, uniform (the ModSAR code).
        # xavier_attention: q, k, v projections xavier_uniform over the stacked (3d, d) matrix and the rest
        # normal, as torch's MultiheadAttention keeps its own init: attention logits start ~20x larger than
        # under N(0, 0.02), so attention is not uniform from step 1. sasrec_plus: that, with positions at
        # N(0, 0.02) too (SASRec+'s init exactly; the others give positions xavier_uniform).
        if cfg.init in ("xavier", "xavier_uniform"):
            xavier = nn.init.xavier_normal_ if cfg.init == "xavier" else nn.init.xavier_uniform_
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    xavier(module.weight)
            self.item_emb.weight.data[0].zero_()
        elif cfg.init in ("xavier_attention", "sasrec_plus"):
            for block in blocks:
                nn.init.xavier_uniform_(block.attn.qkv.weight)
        if cfg.init in ("normal", "xavier_attention") and self.positional == "learned" and cfg.scale_embedding:
            # as the ModSAR code: beside sqrt(d)-scaled items, AE needs a strong position signal to find neighbours;
            # unscaled (BERT4Rec) items keep positions at their own normal(0.02), as BERT4Rec does
            nn.init.xavier_uniform_(self.pos_emb.weight)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()

    def forward(self, inputs: torch.Tensor, users: torch.Tensor | None = None, need_weights: bool = False):
        """inputs (B, T) left-padded item ids -> hidden states (B, T, d) [, per-layer attention (B, H, T, T)]."""
        B, T = inputs.shape
        x = self.item_emb(inputs) * (math.sqrt(self.item_dim) if self.cfg.scale_embedding else 1.0)
        if self.user_emb is not None:
            x = torch.cat([x, self.user_emb(users)[:, None, :].expand(B, T, self.user_dim)], dim=-1)
        if self.cfg.positions_from == "start":  # count from each row's first real item (left padding gets 0)
            pos = (torch.arange(T, device=inputs.device) - (inputs == 0).sum(1, keepdim=True)).clamp(min=0)
        else:
            pos = torch.arange(self.positions - T, self.positions, device=inputs.device)
        if self.positional == "learned":
            x = x + self.pos_emb(pos)
        elif self.positional == "sinusoidal":
            x = x + self.get_buffer("pos_table")[pos]
        x = self.drop(self.embed_norm(x))
        mask = attention_mask(inputs, self.causal, self.cfg.num_heads, self.cfg.local_heads, self.cfg.local_window)
        attentions = []
        for block in self.blocks:
            x, probs = block(x, mask, need_weights)
            attentions.append(probs)
        x = self.final_norm(x)
        return (x, attentions) if need_weights else x

    def output_layer(self, hidden: torch.Tensor) -> OutputLayer:
        """(states, item rows, item bias) with score(hidden) = states @ rows.T + bias, up to SSE-PT's per-row
        user offset, which no softmax sees: the linear form the fused full-softmax CE runs on."""
        h = hidden[..., : self.item_dim]
        if self.head is None:
            return tied_output(h, self.item_emb, self.num_items)
        return self.head.transform(h), self.item_emb.weight[1 : self.num_items + 1], \
            self.head.item_bias[1 : self.num_items + 1]

    def skip_sites(self) -> list[SkipSite]:
        return modular_sites(self)

    def describe(self) -> str:
        return f"the modular backbone ({self.cfg.norm} blocks)"

    def score(self, hidden: torch.Tensor, users: torch.Tensor | None = None,
              items: torch.Tensor | None = None) -> torch.Tensor:
        """Scores of items 1..N, of shared candidates `items` (K,), or of per-row `items` (..., K) for hidden
        states (..., d); see `item_scores`.

        With SSE-PT the user half of the state meets the user's own vector: a per-user offset, the same for
        every item, that never changes a ranking but matters for BCE, as in SSE-PT.
        """
        h = hidden[..., : self.item_dim]
        if self.head is None:
            scores = item_scores(h, self.item_emb, self.num_items, items)
        else:
            scores = self.head(h, self.item_emb, items)
        if self.user_emb is not None and users is not None:
            offset = (hidden[..., self.item_dim:] * self.user_emb(users)).sum(-1, keepdim=True)
            scores = scores + offset
        return scores
