"""BSARec (Shin et al., AAAI 2024, "An Attentive Inductive Bias for Sequential Recommendation beyond the
Self-Attention"), after the official code (yehjin-shin/BSARec), written for ModSAR's left-padded batches.

Each layer mixes two post-LN branches of the same input x, then a post-LN feed-forward:
    frequency  F(x) = LN(x + Dropout(low(x) + beta^2 * (x - low(x))))   low: keep the lowest c // 2 + 1 rFFT
                                                                         bins of the sequence, beta per
                                                                         channel
    attention  A(x) = LN(x + Dropout(W_O Attn(x)))
    layer      y = alpha F(x) + (1 - alpha) A(x);  out = LN(y + Dropout(FFN(y)))
with alpha = `model.bsa_alpha`, c = `model.bsa_cutoff`. Embedding: item + learned position -> LN -> dropout.
Positions count back from the window's last slot, as the official left-padded code
(`model.positions_from=end`),
or from each row's first item (`start`). Under AR only `start` makes a position's state a function of its own
prefix alone: with `end` the same prefix gets other position vectors when more items follow it (the official
code's train/inference offset, shared with SASRec's public code); the output never reads a later item either
way.

The filter works on a fixed window of N = max_len positions (max_len + 1 under AE, which adds the mask token),
as the official code's left-padded sequences. One deliberate difference: padding enters the FFT as zeros,
where the official code feeds it position embedding + LayerNorm (so its short sequences are filtered together
with the padding's vectors); here no output depends on how much padding a batch has. It is linear along the
sequence, so it is one (N, N) matrix built once with torch.fft (`low_pass_matrix`):
  ae  low(x) over the whole window: every position sees every real item (bidirectional, as attention).
  ar  position t gets the filter's value at the LAST position of its own prefix x_0..x_t left-padded to N
      (with zeros), i.e. what the official filter gives a sequence that ends at t. That is a causal
      convolution (a lower-triangular Toeplitz matrix): a position never reads a later item, which is what
      lets every position be trained at once (the official code trains the last position of each prefix).
Residual analyses (mixing, residual scaling) act on the attention branch's own skip: its alpha scales x in
A(x) only; the frequency branch keeps its skip and `bsa_alpha` still weighs the two branches.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from modsar.config import ModelConfig
from modsar.model.skips import SkipSite
from modsar.model.toolkit import SelfAttention, TiedScores, attention_mask, position_ids
from modsar.task import Task

EPS = 1e-12  # the official code's LayerNorm epsilon


def low_pass_matrix(window: int, keep: int, causal: bool) -> torch.Tensor:
    """(N, N) matrix M with M @ x = the low-pass of a window of N positions (x zero where there is padding).

    Non-causal: irfft(rfft(x) with bins >= keep zeroed), both with norm="ortho". Causal: row t holds the
    non-causal filter's last row shifted so that it reads x_t as the window's last item: M[t, s] =
    L[N-1, N-1-(t-s)] for s <= t, else 0."""
    spectrum = torch.fft.rfft(torch.eye(window, dtype=torch.float64), dim=0, norm="ortho")
    spectrum[keep:] = 0
    full = torch.fft.irfft(spectrum, n=window, dim=0, norm="ortho")  # column j: the filter of the unit at j
    if not causal:
        return full.float()
    lag = torch.arange(window)[:, None] - torch.arange(window)[None, :]  # t - s
    kernel = full[window - 1].flip(0)  # kernel[m] = L[N-1, N-1-m]: the weight of the item m steps back
    return torch.where(lag >= 0, kernel[lag.clamp(min=0)], 0.0).float()


class FrequencyBranch(nn.Module):
    """BSARec's frequency branch: a fixed low-pass filter over the window (causal under AR) plus a learnt
    per-channel boost of the high frequencies, beta^2 (x - low), in a post-LN residual."""

    def __init__(self, d: int, cutoff: int, window: int, dropout: float, causal: bool) -> None:
        super().__init__()
        # the official init: standard normal, squared in use
        self.sqrt_beta = nn.Parameter(torch.randn(1, 1, d))
        self.register_buffer("low_pass", low_pass_matrix(window, cutoff // 2 + 1, causal), persistent=False)
        self.drop, self.norm = nn.Dropout(dropout), nn.LayerNorm(d, eps=EPS)

    def forward(self, x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """x (B, T, d), real (B, T) non-padding flags -> LN(x + dropout(low + beta^2 (x - low))), padding
        zeroed first."""
        T = x.size(1)
        signal = x * real[..., None]  # padding is zero, as in the official left-padded window
        # the window's last T positions: the rest is padding
        low = self.get_buffer("low_pass")[-T:, -T:] @ signal
        return self.norm(x + self.drop(low + self.sqrt_beta**2 * (signal - low)))


class AttentionBranch(nn.Module):
    """BSARec's attention branch: the modular SelfAttention in a post-LN residual, kept a module of its own so
    the residual analyses find its skip (attention_site)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn = SelfAttention(cfg.hidden_size, cfg.num_heads, cfg.attn_dropout)
        self.drop, self.norm = nn.Dropout(cfg.dropout), nn.LayerNorm(cfg.hidden_size, eps=EPS)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, need_weights: bool = False):
        """x (B, T, d), mask -> (LN(x + dropout(Attn(x))), attention probabilities or None)."""
        a, probs = self.attn(x, mask, need_weights)
        return self.norm(x + self.drop(a)), probs


class BSALayer(nn.Module):
    """One BSARec layer: alpha x frequency branch + (1 - alpha) x attention branch, then a post-LN
    feed-forward sub-layer, as the official code mixes them."""

    def __init__(self, cfg: ModelConfig, window: int, causal: bool) -> None:
        super().__init__()
        d, inner = cfg.hidden_size, cfg.ffn_width
        self.alpha = cfg.bsa_alpha
        self.frequency = FrequencyBranch(d, cfg.bsa_cutoff, window, cfg.dropout, causal)
        self.attention = AttentionBranch(cfg)
        act = nn.GELU() if cfg.activation == "gelu" else nn.ReLU()
        self.ffn = nn.Sequential(nn.Linear(d, inner), act, nn.Linear(inner, d))
        self.drop, self.norm = nn.Dropout(cfg.dropout), nn.LayerNorm(d, eps=EPS)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, real: torch.Tensor, need_weights: bool = False):
        """x (B, T, d) -> (the layer's output, the attention branch's probabilities or None)."""
        a, probs = self.attention(x, mask, need_weights)
        y = self.alpha * self.frequency(x, real) + (1 - self.alpha) * a
        return self.norm(y + self.drop(self.ffn(y))), probs


class BSARec(TiedScores, nn.Module):
    """BSARec (the residual paper's model zoo): learned positions, N(0, 0.02) init and layers that mix a
    low-pass frequency branch with attention; AE or AR by its mask."""

    def __init__(self, cfg: ModelConfig, num_items: int, num_users: int, max_len: int, task: Task) -> None:
        super().__init__()
        self.cfg, self.num_items, self.causal = cfg, num_items, Task(task).causal
        d, self.positions = cfg.hidden_size, max_len + Task(task).masked  # AE reads max_len items + [MASK]
        self.item_emb = nn.Embedding(num_items + 2, d, padding_idx=0)  # 0 pad, N+1 mask
        self.pos_emb = nn.Embedding(self.positions, d)
        self.embed_norm, self.drop = nn.LayerNorm(d, eps=EPS), nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(BSALayer(cfg, self.positions, self.causal) for _ in range(cfg.num_layers))
        for module in self.modules():  # the official init: N(0, 0.02) weights, zero biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        self.item_emb.weight.data[0].zero_()

    def forward(self, inputs: torch.Tensor, users: torch.Tensor | None = None, need_weights: bool = False):
        """inputs (B, T) left-padded item ids -> hidden states (B, T, d) [, per-layer attention (B, H, T,
        T)]."""
        # official: from the end
        pos = position_ids(inputs, self.positions, self.cfg.positions_from == "start")
        x = self.drop(self.embed_norm(self.item_emb(inputs) + self.pos_emb(pos)))
        real = inputs > 0
        mask = attention_mask(
            inputs, self.causal, self.cfg.num_heads, 0, 0
        )  # no local heads: global attention
        attentions = []
        for layer in self.layers:
            x, probs = layer(x, mask, real, need_weights)
            attentions.append(probs)
        return (x, attentions) if need_weights else x

    def skip_sites(self) -> list[SkipSite]:
        """Each layer's attention branch, a post-LN sub-layer LN(x + W_O Attn(x W_V) + b_O)."""
        return [attention_site(layer.attention) for layer in self.layers if isinstance(layer, BSALayer)]

    def describe(self) -> str:
        """A few words naming the model in messages, with its two own settings."""
        return f"BSARec (alpha {self.cfg.bsa_alpha}, cutoff {self.cfg.bsa_cutoff})"


def attention_site(branch: AttentionBranch) -> SkipSite:
    """The attention branch as the residual analyses see it: its input is the skip, LN follows the sum."""
    attn = branch.attn
    d = attn.proj.in_features

    def values(x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, attn.qkv.weight[2 * d :], attn.qkv.bias[2 * d :])

    def w_o() -> torch.Tensor:
        return attn.proj.weight.T

    def b_o() -> torch.Tensor | None:
        return attn.proj.bias

    return SkipSite(branch, attn.proj, values, w_o, b_o, branch.norm)
