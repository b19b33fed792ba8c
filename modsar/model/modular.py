"""The modular self-attentive recommender: SASRec (AR) and BERT4Rec (AE) are two settings of one model.

Feature: item embedding * sqrt(d) + positions [+ the user] [-> LayerNorm, as BERT4Rec]. Positions are absolute
(learned | sinusoidal: added, or a `pos_dim`-wide channel concatenated or projected in), none, or
`target_aligned`: no absolute code at all; each attention query scores every key by the key's distance to the
query's target (Shaw et al.'s relative keys, one learned table per layer), so under AR the item just before
the predicted one always carries the same code, whichever slot the query sits in. `time_bias` (timestamped
data) adds a learned per-head, per-layer bias to every attention score by how far apart in time query and key
are: `gap` buckets |t_q - t_k| by powers of two from a minute, `session` counts the pauses longer than
`session_gap` between them (TiSASRec's idea as a bias table). A query's time is its own item's: under AR the
position that predicts item t + 1 reads item t's time, never the target's; an AE mask reads the time of the
item before it. The user enters by `user_fusion`: concat (SSE-PT's vector beside every item), token (a first
token every position may attend to) or bias (a per-layer projection of the user added to every query: which
keys matter depends on the user). Modeling: `num_layers` transformer blocks, whose attention is bidirectional
(`ae`) or causal (`ar`): post-norm (default), pre-norm, or one of two blocks whose skip is the normed input
(`norm=normed_skip`, the ModSAR code's layernorm_first: LN(x) + Attn(LN(x)); `norm=sasrec`, the SASRec code:
queries from LN(x), keys and values from x); the last `local_heads` heads only see a LOCKER-style window
(past-only under AR). Output: tied item embedding, scores only for real items 1..N; `head=bert4rec` puts
BERT4Rec's transform (Linear, GELU, LayerNorm) before the dot product and adds a learned item bias (the
paper's Table 4 model).

Inputs are left-padded; column c of a width-T batch gets position index P - T + c, so positions count back
from the most recent item and padding never moves them (`positions_from=start`: counted from each row's first
item instead, as tail-padded code does).
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from modsar.config import ModelConfig
from modsar.model.skips import SkipSite, modular_sites
from modsar.model.toolkit import (  # re-exported: plugins written before the toolkit import them from here
    OutputHead,
    OutputLayer,
    SelfAttention,
    attention_mask,
    item_scores,
    position_ids,
    sinusoidal_table,
    tied_output,
)
from modsar.task import Task

__all__ = [
    "Block",
    "ModularSAR",
    "OutputHead",
    "OutputLayer",
    "SelfAttention",
    "attention_mask",
    "item_scores",
    "position_ids",
    "sinusoidal_table",
    "tied_output",
]


def code_count(causal: bool, positions: int) -> int:
    """Rows of a target-aligned code table: distances 1..P (AR) or -(P-1)..P-1 (AE), the user code, and 0."""
    return (positions if causal else 2 * positions - 1) + 2


def target_codes(width: int, prefix: int, causal: bool, positions: int, device: torch.device) -> torch.Tensor:
    """(width, width) code of every key for every query: the key's distance to the query's target.

    AR: query t predicts item t + 1, so key j is t + 1 - j back (1 = the item just before the target).
    AE: query m predicts the item masked at m, so key j is m - j away (0 = the mask token itself, negative =
    after it). Codes count distances from 1 up; 0 marks keys a causal query never sees, the last code the
    first `prefix` columns (user tokens, whichever side). Nothing depends on a slot, so padding and shifts
    inside the window change no code a real query reads.
    """
    i = torch.arange(width, device=device)
    distance = i[:, None] - i[None, :] + int(causal)
    lowest, highest = (1, positions) if causal else (1 - positions, positions - 1)
    codes = distance.clamp(lowest, highest) - lowest + 1
    if causal:
        codes = codes.masked_fill(distance < 1, 0)
    codes[:prefix, :] = codes[:, :prefix] = code_count(causal, positions) - 1
    return codes


GAP_BUCKETS = 24  # under a minute, then [1, 2), [2, 4), ... minutes; the last bucket holds ~8 years and more
SESSION_BUCKETS = 16  # 0..14 session boundaries apart, then 15 or more


def time_buckets(times: torch.Tensor, kind: str, session_gap: float, prefix: int) -> torch.Tensor:
    """(B, T) seconds -> (B, T', T') bucket of every key for every query, T' = T + prefix; the first `prefix`
    columns and rows (user tokens) get a bucket of their own, the last. Padding buckets are never read."""
    times = times.double()  # seconds apart over years: float32 would merge buckets
    if kind == "gap":
        apart = (times[:, :, None] - times[:, None, :]).abs()
        buckets = (torch.log2(apart.clamp(min=60.0) / 60.0).floor() + 1).masked_fill(apart < 60.0, 0)
        buckets, count = buckets.clamp(max=GAP_BUCKETS - 1).long(), GAP_BUCKETS
    else:  # session: how many pauses longer than session_gap lie between the two items
        pauses = F.pad((times.diff(dim=1) > session_gap).long().cumsum(1), (1, 0))
        buckets = (pauses[:, :, None] - pauses[:, None, :]).abs().clamp(max=SESSION_BUCKETS - 1)
        count = SESSION_BUCKETS
    if prefix:
        buckets = F.pad(buckets, (prefix, 0, prefix, 0), value=count)
    return buckets


def time_bucket_count(kind: str) -> int:
    """Rows of a time-bias table: the buckets of `kind` and the user-token bucket."""
    return (GAP_BUCKETS if kind == "gap" else SESSION_BUCKETS) + 1


class Block(nn.Module):
    """One transformer block of the modular backbone, in the norm style the config names (post-norm BERT,
    pre-norm, SASRec's, the ModSAR code's normed skip), with optional user and time biases on attention."""

    def __init__(self, cfg: ModelConfig, codes: int = 0, code_dim: int = 0, user_dim: int = 0) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.style = cfg.norm_style
        self.pre_norm = self.style == "pre"
        self.norm1, self.norm2 = nn.LayerNorm(d, eps=cfg.norm_eps), nn.LayerNorm(d, eps=cfg.norm_eps)
        self.attn = SelfAttention(d, cfg.num_heads, cfg.attn_dropout, codes, code_dim)
        self.user_query = nn.Linear(user_dim, d, bias=False) if user_dim else None  # user_fusion=bias
        act = nn.GELU() if cfg.activation == "gelu" else nn.ReLU()
        inner = nn.Dropout(cfg.dropout) if cfg.ffn_inner_dropout else nn.Identity()
        self.ffn = nn.Sequential(nn.Linear(d, cfg.ffn_width), act, inner, nn.Linear(cfg.ffn_width, d))
        self.drop = nn.Dropout(cfg.dropout)
        self.attn_drop = nn.Dropout(cfg.dropout) if cfg.attn_output_dropout else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = False,
        codes: torch.Tensor | None = None,
        user: torch.Tensor | None = None,
        time_bias: torch.Tensor | None = None,
    ):
        """x (B, T, d) -> (the block's output, attention probabilities or None); `codes`, `user` and
        `time_bias` feed the attention where the config asks for them."""
        bias = self.user_query(user) if self.user_query is not None and user is not None else None
        attend = partial(
            self.attn,
            mask=mask,
            need_weights=need_weights,
            codes=codes,
            query_bias=bias,
            score_bias=time_bias,
        )
        if self.style == "pre":
            a, probs = attend(self.norm1(x))
            x = x + self.attn_drop(a)
            x = x + self.drop(self.ffn(self.norm2(x)))
        elif self.style in ("sasrec", "normed_skip"):  # the normed input is the skip, in both sub-layers
            q = self.norm1(x)  # SASRec: only the queries read it, keys and values read x
            a, probs = attend(x, query=q) if self.style == "sasrec" else attend(q)
            x = self.norm2(q + self.attn_drop(a))
            x = x + self.drop(self.ffn(x))
        else:
            a, probs = attend(x)
            x = self.norm1(x + self.attn_drop(a))
            x = self.norm2(x + self.drop(self.ffn(x)))
        return x, probs


class ModularSAR(nn.Module):
    """The modular backbone: one transformer whose Feature / Modeling / Loss / Task choices (positions, user
    fusion, local heads, time biases, norm style, head) span the ModSAR paper's design space; `task` makes it
    AE or AR."""

    def __init__(self, cfg: ModelConfig, num_items: int, num_users: int, max_len: int, task: Task) -> None:
        super().__init__()
        self.cfg, self.num_items, self.causal = cfg, num_items, Task(task).causal
        d = self.hidden_size = cfg.hidden_size
        self.fusion = cfg.user_fusion
        self.user_dim = cfg.user_width  # SSE-PT's share of d
        self.positions = max_len + 1  # AE reads max_len history items + the mask token
        self.positional = cfg.position_code
        self.absolute = cfg.absolute_positions
        pos_width = cfg.pos_dim if self.absolute and cfg.pos_fusion != "add" else d
        self.item_dim = cfg.item_width
        self.item_emb = nn.Embedding(num_items + 2, self.item_dim, padding_idx=0)  # 0 pad, N+1 mask
        self.user_emb = nn.Embedding(num_users + 1, self.user_dim or d) if self.fusion != "none" else None
        self.prefix_tokens = int(self.fusion == "token")  # columns before the items in every attention map
        # token and bias users are scaled as item vectors are: a bias W u from two N(0, 0.02) factors would
        # start ~1e-3 small, and its gradients (each a product with the other factor) would keep it there
        self.user_scale = math.sqrt(self.item_dim) if cfg.scale_embedding else 1.0
        if self.positional == "learned":
            self.pos_emb = nn.Embedding(self.positions, pos_width)
        elif self.positional == "sinusoidal":
            self.register_buffer("pos_table", sinusoidal_table(self.positions, pos_width), persistent=False)
        self.pos_project = (
            nn.Linear(self.item_dim + pos_width, self.item_dim, bias=False)
            if self.absolute and cfg.pos_fusion == "project"
            else None
        )
        codes = code_count(self.causal, self.positions) if self.positional == "target_aligned" else 0
        code_dim = cfg.pos_dim or cfg.head_size
        self.embed_norm = nn.LayerNorm(d, eps=1e-12) if cfg.embedding_norm else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)
        user_query = d if self.fusion == "bias" else 0
        blocks = [Block(cfg, codes, code_dim, user_query) for _ in range(cfg.num_layers)]
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = (
            nn.LayerNorm(d, eps=cfg.norm_eps) if blocks and blocks[0].style != "post" else nn.Identity()
        )
        self.head = OutputHead(self.item_dim, num_items) if cfg.head == "bert4rec" else None
        self.timed = cfg.timed  # forward needs the inputs' times
        tables = (
            [nn.Embedding(time_bucket_count(cfg.time_bias), cfg.num_heads) for _ in blocks]
            if self.timed
            else []
        )
        self.time_tables = nn.ModuleList(tables) if self.timed else None
        # a zero-initialised bias moves about lr per Adam step, so ~250 steps (ML-100K's whole run) left it
        # within 0.4 logits; scaled as item vectors are, it can reach a few logits in the same steps
        self.time_scale = math.sqrt(d)
        self._initialise(cfg, blocks, tables)

    def _initialise(self, cfg: ModelConfig, blocks: list[Block], tables: list[nn.Embedding]) -> None:
        """The weights' start, by model.init (each scheme as the code it comes from)."""
        self.apply(partial(self._init, truncated=cfg.init == "truncated_normal"))
        # init normal: N(0, 0.02) everywhere (GPT-2); truncated_normal: the same cut at 2 std (BERT's code).
        # xavier: xavier_normal on every matrix, embeddings
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
        if (
            cfg.init in ("normal", "truncated_normal", "xavier_attention")
            and self.positional == "learned"
            and cfg.scale_embedding
        ):
            # as the ModSAR code: beside sqrt(d)-scaled items, AE needs a strong position signal to find
            # neighbours; unscaled (BERT4Rec) items keep positions at their own normal(0.02), as BERT4Rec does
            nn.init.xavier_uniform_(self.pos_emb.weight)
        for table in tables:  # zero, after every init above: training starts from the plain model
            nn.init.zeros_(table.weight)

    @staticmethod
    def _init(module: nn.Module, truncated: bool = False) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            if truncated:  # LayerNorms keep gain 1 and bias 0, as the BERT code's resampling init leaves them
                nn.init.trunc_normal_(module.weight, std=0.02, a=-0.04, b=0.04)
            else:
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()

    def embed(self, inputs: torch.Tensor, users: torch.Tensor | None) -> torch.Tensor:
        """(B, T) ids -> (B, T, d): item vectors [; a concatenated or projected position channel] [; SSE-PT's
        user vector] [+ positions over all d, as SASRec and SSE-PT add them]."""
        B, T = inputs.shape
        x = self.item_emb(inputs) * (math.sqrt(self.item_dim) if self.cfg.scale_embedding else 1.0)
        p = self.absolute_positions(inputs) if self.absolute else None
        if p is not None and self.cfg.pos_fusion != "add":
            x = torch.cat([x, p.expand(B, T, -1)], dim=-1)
            x = self.pos_project(x) if self.pos_project is not None else x
        if self.fusion == "concat":
            x = torch.cat([x, self.users(users)[:, None, :].expand(B, T, self.user_dim)], dim=-1)
        return x + p if p is not None and self.cfg.pos_fusion == "add" else x

    def absolute_positions(self, inputs: torch.Tensor) -> torch.Tensor:
        """Position vectors (T, w) counted back from the most recent item, or (B, T, w) from each row's
        first."""
        pos = position_ids(inputs, self.positions, self.cfg.positions_from == "start")
        return self.pos_emb(pos) if self.positional == "learned" else self.get_buffer("pos_table")[pos]

    def users(self, ids: torch.Tensor | None) -> torch.Tensor:
        """The user vectors of a batch (a model with a user_fusion is always called with its users)."""
        assert self.user_emb is not None and ids is not None, "user_fusion needs the batch's user ids"
        return self.user_emb(ids)

    def forward(
        self,
        inputs: torch.Tensor,
        users: torch.Tensor | None = None,
        need_weights: bool = False,
        times: torch.Tensor | None = None,
    ):
        """inputs (B, T) left-padded item ids [and their times (B, T), seconds] -> hidden states (B, T, d)
        [, per-layer attention (B, H, T', T'), T' = T + `prefix_tokens`: a user token is column 0 of every
        map]."""
        x, keys = self.embed(inputs, users), inputs
        if self.prefix_tokens:  # the user as a first token, scaled as item vectors are
            token = self.users(users) * self.user_scale
            x = torch.cat([token[:, None, :], x], dim=1)
            keys = F.pad(inputs, (1, 0), value=1)
        x = self.drop(self.embed_norm(x))
        mask = attention_mask(
            keys,
            self.causal,
            self.cfg.num_heads,
            self.cfg.local_heads,
            self.cfg.local_window,
            self.prefix_tokens,
        )
        codes = (
            target_codes(keys.size(1), self.prefix_tokens, self.causal, self.positions, inputs.device)
            if self.positional == "target_aligned"
            else None
        )
        user = self.users(users) * self.user_scale if self.fusion == "bias" else None
        buckets = None
        if self.time_tables is not None:
            if times is None:
                raise ValueError(
                    "model.time_bias needs the inputs' times: call model(inputs, users, times=...)"
                )
            buckets = time_buckets(times, self.cfg.time_bias, self.cfg.session_gap, self.prefix_tokens)
        attentions = []
        for i, block in enumerate(self.blocks):
            time_bias = (
                self.time_tables[i](buckets).permute(0, 3, 1, 2) * self.time_scale
                if self.time_tables is not None
                else None
            )
            x, probs = block(x, mask, need_weights, codes, user, time_bias)
            attentions.append(probs)
        x = self.final_norm(x)[:, self.prefix_tokens :]
        return (x, attentions) if need_weights else x

    def output_layer(self, hidden: torch.Tensor) -> OutputLayer:
        """(states, item rows, item bias) with score(hidden) = states @ rows.T + bias, up to SSE-PT's per-row
        user offset, which no softmax sees: the linear form the fused full-softmax CE runs on."""
        h = hidden[..., : self.item_dim]
        if self.head is None:
            return tied_output(h, self.item_emb, self.num_items)
        return (
            self.head.transform(h),
            self.item_emb.weight[1 : self.num_items + 1],
            self.head.item_bias[1 : self.num_items + 1],
        )

    def skip_sites(self) -> list[SkipSite]:
        """Each block's attention skip, for the residual analyses (modsar.model.skips.modular_sites)."""
        return modular_sites(self)

    def describe(self) -> str:
        """A few words naming the model in messages, with its block style."""
        return f"the modular backbone ({self.cfg.norm_style}-norm blocks)"

    def score(
        self, hidden: torch.Tensor, users: torch.Tensor | None = None, items: torch.Tensor | None = None
    ) -> torch.Tensor:
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
        if self.fusion == "concat" and users is not None:
            offset = (hidden[..., self.hidden_size - self.user_dim :] * self.users(users)).sum(
                -1, keepdim=True
            )
            scores = scores + offset
        return scores
