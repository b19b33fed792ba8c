"""Transformer-XL as a transformers `PreTrainedModel`, registered with AutoConfig / AutoModel.

transformers 5 removed Transformer-XL and its last 4.x copy no longer runs on current torch, so it lives
here. It follows the 4.x `TransfoXLModel` (attn_type 0, div_val 1, no adaptive softmax) with the same
parameter names, so a 4.x state dict loads as it is (with untie_r=False, 4.x repeats the shared biases
under every layer's name; a load hook drops those copies) and reproduces 4.x's hidden states and memories
(tests/fixtures/transfo_xl_4x.pt, made by tests/fixtures/make_transfo_xl_4x.py from transformers 4.57.6):

- relative positional attention with the two learned global biases `r_w_bias` (content) and `r_r_bias`
  (position) and the relative shift of the position scores;
- segment-level memory: each layer's input of the last `mem_len` steps is kept (gradient stopped) and
  prepended to the keys of the next segment; `clamp_len` caps relative distances; `same_length` gives
  every query the same attention length.

Differences from 4.x, all opt-in: `attention_mask` (B, T) marks padding (0) to be masked as keys, and
`bidirectional=True` lifts the causal mask (the AE direction), both without patching anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput


class TransfoXLConfig(PretrainedConfig):
    """Transformer-XL's configuration, as transformers 4.x had it (v5 removed the model): the fields and
    defaults of the original, registered with AutoConfig under its own model type."""

    model_type = "modsar_transfo_xl"

    def __init__(
        self,
        vocab_size: int = 267735,
        d_model: int = 1024,
        d_embed: int = 1024,
        n_head: int = 16,
        d_head: int = 64,
        d_inner: int = 4096,
        n_layer: int = 18,
        pre_lnorm: bool = False,
        mem_len: int = 1600,
        clamp_len: int = 1000,
        same_length: bool = True,
        dropout: float = 0.1,
        dropatt: float = 0.0,
        untie_r: bool = True,
        layer_norm_epsilon: float = 1e-5,
        init_std: float = 0.02,
        bidirectional: bool = False,
        **kwargs,
    ) -> None:
        self.vocab_size, self.d_model, self.d_embed, self.n_head, self.d_head = (
            vocab_size,
            d_model,
            d_embed,
            n_head,
            d_head,
        )
        self.d_inner, self.n_layer, self.pre_lnorm, self.mem_len = d_inner, n_layer, pre_lnorm, mem_len
        self.clamp_len, self.same_length, self.dropout, self.dropatt = (
            clamp_len,
            same_length,
            dropout,
            dropatt,
        )
        self.untie_r, self.layer_norm_epsilon, self.init_std = untie_r, layer_norm_epsilon, init_std
        self.bidirectional = bidirectional
        super().__init__(**kwargs)


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """(qlen, klen, ...) scores by relative distance klen-1..0 -> scores by key index (4.x `_rel_shift`)."""
    zero_pad = torch.zeros((x.size(0), 1, *x.size()[2:]), device=x.device, dtype=x.dtype)
    padded = torch.cat([zero_pad, x], dim=1).view(x.size(1) + 1, x.size(0), *x.size()[2:])
    return padded[1:].view_as(x)


class PositionalEmbedding(nn.Module):
    """The sinusoidal embedding of relative distances that Transformer-XL's attention reads (not added to the
    inputs)."""

    def __init__(self, demb: int) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1 / (10000 ** (torch.arange(0.0, demb, 2.0) / demb)))

    def forward(self, pos_seq: torch.Tensor) -> torch.Tensor:
        """Distances (R,) -> their sine/cosine embeddings (R, 1, d)."""
        angles = torch.outer(pos_seq, self.get_buffer("inv_freq"))
        return torch.cat([angles.sin(), angles.cos()], dim=-1)[:, None, :]


class PositionwiseFF(nn.Module):
    """The feed-forward sub-layer (ReLU, dropouts), pre- or post-LN as the config says."""

    def __init__(self, d_model: int, d_inner: int, dropout: float, pre_lnorm: bool, eps: float) -> None:
        super().__init__()
        self.CoreNet = nn.Sequential(
            nn.Linear(d_model, d_inner),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(d_inner, d_model),
            nn.Dropout(dropout),
        )
        self.layer_norm = nn.LayerNorm(d_model, eps=eps)
        self.pre_lnorm = pre_lnorm

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        """x (T, B, d) -> the sub-layer's output, with its residual."""
        if self.pre_lnorm:
            return self.CoreNet(self.layer_norm(inp)) + inp
        return self.layer_norm(inp + self.CoreNet(inp))


class RelPartialLearnableMultiHeadAttn(nn.Module):
    """Transformer-XL's attention: content and relative-position scores with the learnt global biases u and v
    (r_w_bias, r_r_bias), over the memory and the current segment."""

    def __init__(self, config: TransfoXLConfig) -> None:
        super().__init__()
        c = config
        self.n_head, self.d_head, self.scale, self.pre_lnorm = (
            c.n_head,
            c.d_head,
            1 / c.d_head**0.5,
            c.pre_lnorm,
        )
        self.qkv_net = nn.Linear(c.d_model, 3 * c.n_head * c.d_head, bias=False)
        self.r_net = nn.Linear(c.d_model, c.n_head * c.d_head, bias=False)
        self.o_net = nn.Linear(c.n_head * c.d_head, c.d_model, bias=False)
        self.drop, self.dropatt = nn.Dropout(c.dropout), nn.Dropout(c.dropatt)
        self.layer_norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_epsilon)
        if c.untie_r:  # else the model hands every layer its shared pair
            self.r_r_bias = nn.Parameter(torch.zeros(c.n_head, c.d_head))
            self.r_w_bias = nn.Parameter(torch.zeros(c.n_head, c.d_head))

    def forward(self, w, r, attn_mask, mems, r_w_bias=None, r_r_bias=None, output_attentions: bool = False):
        """w (qlen, B, d); r (klen, 1, d) relative position embeddings; attn_mask (qlen, klen, B) True =
        masked. The global biases come from the model when untie_r is False, else from this layer."""
        r_w_bias = self.r_w_bias if r_w_bias is None else r_w_bias
        r_r_bias = self.r_r_bias if r_r_bias is None else r_r_bias
        qlen, bsz = w.size(0), w.size(1)
        cat = w if mems is None else torch.cat([mems, w], 0)
        heads = self.qkv_net(self.layer_norm(cat) if self.pre_lnorm else cat)
        q, k, v = torch.chunk(heads, 3, dim=-1)
        q = q[-qlen:].view(qlen, bsz, self.n_head, self.d_head)
        klen = k.size(0)
        k, v = (t.view(klen, bsz, self.n_head, self.d_head) for t in (k, v))
        r_k = self.r_net(r).view(r.size(0), self.n_head, self.d_head)

        # (a) + (c): content and global content bias
        content = torch.einsum("ibnd,jbnd->ijbn", q + r_w_bias, k)
        by_distance = torch.einsum("ibnd,jnd->ijbn", q + r_r_bias, r_k)  # (b) + (d), per relative distance
        if r.size(0) == klen:  # causal (4.x): distances klen-1..0, aligned to keys by the relative shift
            position = rel_shift(by_distance)
        else:  # bidirectional: distances klen-1..-(qlen-1); key j of query i sits at distance mlen + i - j
            mlen = klen - qlen
            index = (
                (klen - 1 - mlen)
                - torch.arange(qlen, device=w.device)[:, None]
                + torch.arange(klen, device=w.device)
            )
            position = by_distance.gather(1, index[:, :, None, None].expand(qlen, klen, bsz, self.n_head))
        score = (content + position) * self.scale
        score = score.float().masked_fill(attn_mask[:, :, :, None], torch.finfo(torch.float32).min)
        prob = self.dropatt(F.softmax(score, dim=1).type_as(q))
        out = torch.einsum("ijbn,jbnd->ibnd", prob, v).reshape(qlen, bsz, self.n_head * self.d_head)
        out = self.drop(self.o_net(out))
        out = w + out if self.pre_lnorm else self.layer_norm(w + out)
        return out, (prob.permute(2, 3, 0, 1) if output_attentions else None)


class RelPartialLearnableDecoderLayer(nn.Module):
    """One Transformer-XL layer: relative attention, then the feed-forward sub-layer."""

    def __init__(self, config: TransfoXLConfig) -> None:
        super().__init__()
        self.dec_attn = RelPartialLearnableMultiHeadAttn(config)
        self.pos_ff = PositionwiseFF(
            config.d_model, config.d_inner, config.dropout, config.pre_lnorm, config.layer_norm_epsilon
        )

    def forward(self, x, r, attn_mask, mems, r_w_bias=None, r_r_bias=None, output_attentions=False):
        """x (T, B, d), relative embeddings r, mask, memory -> (the layer's output, attention probabilities or
        None)."""
        out, probs = self.dec_attn(x, r, attn_mask, mems, r_w_bias, r_r_bias, output_attentions)
        return self.pos_ff(out), probs


class AdaptiveEmbedding(nn.Module):
    """4.x's AdaptiveEmbedding for div_val=1 and no cutoffs: one table, scaled by sqrt(d_model)."""

    def __init__(self, n_token: int, d_embed: int, d_proj: int) -> None:
        super().__init__()
        self.emb_layers = nn.ModuleList([nn.Embedding(n_token, d_embed)])
        self.emb_projs = nn.ParameterList(
            [nn.Parameter(torch.zeros(d_proj, d_embed))] if d_proj != d_embed else []
        )
        self.emb_scale = d_proj**0.5

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (T, B) -> embeddings scaled by sqrt(d_model), projected where d_embed differs."""
        embed = self.emb_layers[0](ids)
        if len(self.emb_projs):
            embed = F.linear(embed, self.emb_projs[0])
        return embed * self.emb_scale


@dataclass
class TransfoXLOutput(ModelOutput):
    """What TransfoXLModel returns, as transformers' ModelOutput: the last hidden states, the memory, and
    attention maps when asked."""

    last_hidden_state: torch.Tensor | None = None
    mems: list[torch.Tensor] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class TransfoXLPreTrainedModel(PreTrainedModel):
    """The PreTrainedModel base: the config class and 4.x's weight initialisation (normal weights, unit
    LayerNorms, the global biases)."""

    config_class = TransfoXLConfig
    base_model_prefix = "transformer"

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.init_std
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, AdaptiveEmbedding):
            for proj in module.emb_projs:
                nn.init.normal_(proj, 0.0, std)
        elif isinstance(module, (RelPartialLearnableMultiHeadAttn, TransfoXLModel)):
            for name in ("r_w_bias", "r_r_bias"):
                if getattr(module, name, None) is not None:
                    nn.init.normal_(getattr(module, name), 0.0, std)


class TransfoXLModel(TransfoXLPreTrainedModel):
    """Transformer-XL's encoder, as transformers 4.x had it, ported to v5's API: time-major inside,
    batch-major at its boundary, a padding mask from ModSAR and a causal mask unless the config says
    `bidirectional`."""

    def __init__(self, config: TransfoXLConfig) -> None:
        super().__init__(config)
        c = config
        self.mem_len, self.clamp_len, self.same_length = c.mem_len, c.clamp_len, c.same_length
        self.word_emb = AdaptiveEmbedding(c.vocab_size, c.d_embed, c.d_model)
        self.drop = nn.Dropout(c.dropout)
        self.layers = nn.ModuleList(RelPartialLearnableDecoderLayer(c) for _ in range(c.n_layer))
        self.pos_emb = PositionalEmbedding(c.d_model)
        if not c.untie_r:  # one pair of global biases for all layers
            self.r_w_bias = nn.Parameter(torch.zeros(c.n_head, c.d_head))
            self.r_r_bias = nn.Parameter(torch.zeros(c.n_head, c.d_head))
            self.register_load_state_dict_pre_hook(_drop_4x_bias_copies)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        """The item table transformers ties and resizes."""
        return self.word_emb.emb_layers[0]

    def set_input_embeddings(self, value: nn.Module) -> None:
        """Replace the item table (transformers' resize and tie)."""
        self.word_emb.emb_layers[0] = value

    def init_mems(self, bsz: int) -> list[torch.Tensor] | None:
        """Zero memories for a batch of `bsz`, one per layer (None with mem_len 0, as ModSAR runs it: one
        segment a sequence)."""
        if self.mem_len <= 0:
            return None
        param = next(self.parameters())
        return [
            torch.zeros(self.mem_len, bsz, self.config.d_model, dtype=param.dtype, device=param.device)
            for _ in range(self.config.n_layer)
        ]

    def update_mems(self, hids: list[torch.Tensor], mems: list[torch.Tensor] | None, mlen: int, qlen: int):
        """Keep the last `mem_len` steps of every layer's input; no gradient flows into memory."""
        if mems is None:
            return None
        end = mlen + max(0, qlen)
        beg = max(0, end - self.mem_len)
        with torch.no_grad():
            return [torch.cat([m, h], dim=0)[beg:end].detach() for m, h in zip(mems, hids, strict=True)]

    def forward(
        self,
        input_ids: torch.Tensor,
        mems: list[torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        **kwargs,
    ):
        """input_ids (B, T) -> TransfoXLOutput: relative positions over the memory and the segment;
        attention_mask (B, T) marks real items; attention is causal unless the config says `bidirectional`."""
        ids = input_ids.transpose(0, 1).contiguous()  # 4.x works time-major: (qlen, B)
        qlen, bsz = ids.shape
        mems = self.init_mems(bsz) if mems is None else mems
        word_emb = self.word_emb(ids)
        mlen = mems[0].size(0) if mems is not None else 0
        klen = mlen + qlen
        ones = word_emb.new_ones((qlen, klen), dtype=torch.bool)
        if self.config.bidirectional:
            mask = torch.zeros_like(ones)
        elif self.same_length:
            mask_len = klen - self.mem_len
            shift = qlen - mask_len if mask_len > 0 else qlen
            mask = torch.triu(ones, 1 + mlen) | torch.tril(ones, -shift)
        else:
            mask = torch.triu(ones, diagonal=1 + mlen)
        mask = mask[:, :, None].expand(qlen, klen, bsz)
        if attention_mask is not None:  # padding keys are masked (memory slots stay visible)
            pad = torch.cat(
                [torch.zeros(bsz, mlen, dtype=torch.bool, device=ids.device), attention_mask == 0], 1
            )
            own = torch.zeros(qlen, klen, dtype=torch.bool, device=ids.device)
            own[torch.arange(qlen), mlen + torch.arange(qlen)] = True  # a padding query still sees itself
            mask = (mask | pad.T[None, :, :]) & ~own[:, :, None]
        lowest = -qlen if self.config.bidirectional else -1  # AE also needs distances to later keys
        pos_seq = torch.arange(klen - 1, lowest, -1.0, device=ids.device, dtype=word_emb.dtype)
        if self.clamp_len > 0:
            pos_seq = pos_seq.clamp(min=-self.clamp_len, max=self.clamp_len)
        pos_emb = self.drop(self.pos_emb(pos_seq))
        core = self.drop(word_emb)
        hids, attentions = [], []
        for i, layer in enumerate(self.layers):
            hids.append(core)
            biases = (None, None) if self.config.untie_r else (self.r_w_bias, self.r_r_bias)
            core, probs = layer(
                core, pos_emb, mask, None if mems is None else mems[i], *biases, output_attentions
            )
            attentions.append(probs)
        core = self.drop(core)
        new_mems = self.update_mems(hids, mems, mlen, qlen)
        return TransfoXLOutput(
            last_hidden_state=core.transpose(0, 1).contiguous(),
            mems=new_mems,
            attentions=tuple(attentions) if output_attentions else None,
        )


def _drop_4x_bias_copies(module, state_dict, prefix, *args) -> None:
    """4.x shares the tied r_w_bias/r_r_bias with every layer, so its state dict repeats them per layer
    (`layers.N.dec_attn.r_w_bias`); they are the same tensors as the model-level pair and are dropped."""
    for key in [
        k for k in state_dict if re.fullmatch(re.escape(prefix) + r"layers\.\d+\.dec_attn\.r_[wr]_bias", k)
    ]:
        del state_dict[key]


AutoConfig.register(TransfoXLConfig.model_type, TransfoXLConfig, exist_ok=True)
AutoModel.register(TransfoXLConfig, TransfoXLModel, exist_ok=True)
