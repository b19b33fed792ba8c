"""One adapter for every HF backbone: item ids in, hidden states out, tied item-embedding scores.

Each backbone declares (hf_plugins.spec) which ModSAR knobs it really has and where they go in its HF config.
A knob it does not have is refused with a clear message instead of being silently ignored (the original
LLaMA dropout grid was a no-op that cost 5x compute).

Padding: inputs are left-padded as everywhere in ModSAR; position ids count back from the most recent
item (P - T + c), so padding never moves a real token's position, and padding keys are masked in both
directions. Padding query rows attend to themselves only (no empty softmax rows).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hf_plugins.spec import Backbone, backbone_spec
from modsar.errors import ModsarError
from modsar.model.skips import SkipSite
from modsar.model.toolkit import TiedScores, attention_mask
from modsar.task import Task


def _transfo_xl_config(m, vocab: int, positions: int, task: Task):
    """Our own registered Transformer-XL (hf_plugins.transfo_xl). One user sequence per row, no segments:
    memory off, distances clamped at the window length."""
    from transformers import AutoConfig

    import hf_plugins.transfo_xl  # noqa: F401  (registers the Auto classes)

    d = m.hidden_size
    return AutoConfig.for_model(
        "modsar_transfo_xl",
        vocab_size=vocab,
        d_model=d,
        d_embed=d,
        n_head=m.num_heads,
        d_head=m.head_size,
        d_inner=m.ffn_width,
        n_layer=m.num_layers,
        pre_lnorm=m.norm == "pre",
        mem_len=0,
        clamp_len=positions,
        same_length=False,
        dropout=m.dropout,
        dropatt=m.attn_dropout,
        bidirectional=not Task(task).causal,
    )


def _sizes(m, vocab: int, positions: int) -> dict[str, Any]:
    """The standard config names (generic configs map them with attribute_map)."""
    return {
        "vocab_size": vocab,
        "hidden_size": m.hidden_size,
        "num_hidden_layers": m.num_layers,
        "num_attention_heads": m.num_heads,
        "pad_token_id": 0,
        "max_position_embeddings": positions,
    }


def _generic_config(spec: Backbone, m, vocab: int, positions: int):
    """hf:<any other model type>: the standard names, plus the fields found on its config class."""
    from transformers import AutoConfig

    common = _sizes(m, vocab, positions)
    ffn_field = dict(spec.extra)["ffn"]
    if ffn_field:
        common[ffn_field] = m.ffn_width
    if spec.activation_field:
        common[spec.activation_field] = m.activation
    common.update({f: m.dropout for f in spec.dropout} | {f: m.attn_dropout for f in spec.attn_dropout})
    config = AutoConfig.for_model(spec.model_type, **common)
    if hasattr(config, "embedding_size"):  # ELECTRA-style factorised embeddings: the score head needs d
        config.embedding_size = m.hidden_size
    config._attn_implementation = "sdpa"
    return config


def _gpt2_sizes(m, vocab: int, positions: int) -> dict[str, Any]:
    """GPT-2 spells its sizes differently; item ids have no text markers (its 50256 > vocab)."""
    return {
        "vocab_size": vocab,
        "n_embd": m.hidden_size,
        "n_layer": m.num_layers,
        "n_head": m.num_heads,
        "n_inner": m.ffn_width,
        "n_positions": positions,
        "pad_token_id": 0,
        "bos_token_id": None,
        "eos_token_id": None,
    }


def _hf_config(spec: Backbone, m, vocab: int, positions: int, task: Task):
    """The HF config of a declared backbone, its knobs placed where spec says they go."""
    from transformers import AutoConfig

    if spec.model_type == "modsar_transfo_xl":
        return _transfo_xl_config(m, vocab, positions, task)
    if spec.norm == "auto":
        return _generic_config(spec, m, vocab, positions)
    if spec.model_type == "gpt2":
        common = _gpt2_sizes(m, vocab, positions)
    else:
        common = _sizes(m, vocab, positions) | {"intermediate_size": m.ffn_width}
    common[spec.activation_field] = m.activation
    if spec.model_type == "albert":
        common["embedding_size"] = m.hidden_size  # tie the output head to the item embedding, no projection
    if spec.model_type == "llama":
        common["num_key_value_heads"] = m.num_heads
    common.update({f: m.dropout for f in spec.dropout} | {f: m.attn_dropout for f in spec.attn_dropout})
    common.update(dict(spec.extra))
    config = AutoConfig.for_model(spec.model_type, **common)
    config._attn_implementation = "sdpa"
    return config


def _linear(layer: Any) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor | None]]:
    """(W as x @ W, bias) of an nn.Linear or GPT-2's Conv1D (which stores W as (in, out) already)."""
    transposed = isinstance(layer, nn.Linear)

    def weight() -> torch.Tensor:
        return layer.weight.T if transposed else layer.weight

    def bias() -> torch.Tensor | None:
        return layer.bias

    return weight, bias


def _llama_sites(model: Any) -> list[SkipSite] | None:
    if model.config.num_key_value_heads != model.config.num_attention_heads:
        return None  # grouped-query values would need repeating per head
    sites = []
    for layer in model.layers:

        def values(x: torch.Tensor, layer=layer) -> torch.Tensor:
            return layer.self_attn.v_proj(layer.input_layernorm(x))

        sites.append(SkipSite(layer, layer.self_attn.o_proj, values, *_linear(layer.self_attn.o_proj), None))
    return sites


def _gpt2_sites(model: Any) -> list[SkipSite]:
    sites = []
    for block in model.h:

        def values(x: torch.Tensor, block=block, d=block.attn.c_proj.weight.shape[0]) -> torch.Tensor:
            return block.attn.c_attn(block.ln_1(x))[..., 2 * d :]

        sites.append(SkipSite(block, block.attn.c_proj, values, *_linear(block.attn.c_proj), None))
    return sites


def _bert_sites(model: Any) -> list[SkipSite]:
    sites = []
    for layer in model.encoder.layer:
        out = layer.attention.output
        sites.append(
            SkipSite(
                layer.attention, out.dense, layer.attention.self.value, *_linear(out.dense), out.LayerNorm
            )
        )
    return sites


def _albert_sites(model: Any) -> list[SkipSite]:
    """Shared layers: one site, called once per layer."""
    sites = []
    for group in model.encoder.albert_layer_groups:
        for layer in group.albert_layers:
            attn = layer.attention
            sites.append(SkipSite(attn, attn.dense, attn.value, *_linear(attn.dense), attn.LayerNorm))
    return sites


def _transfo_xl_sites(model: Any) -> list[SkipSite]:
    sites = []
    for layer in model.layers:
        attn = layer.dec_attn
        d = attn.o_net.in_features

        def values(x, attn=attn, d=d):
            return attn.qkv_net(attn.layer_norm(x) if attn.pre_lnorm else x)[..., 2 * d :]

        norm = None if attn.pre_lnorm else attn.layer_norm
        sites.append(SkipSite(attn, attn.o_net, values, *_linear(attn.o_net), norm, seq_first=True))
    return sites


# the architectures whose attention sub-layers ModSAR knows, by backbone name (spec.SKIP_SITE_TYPES lists
# the same names, torch-free, for the registry); the key is the HF model_type but for our own Transformer-XL
SKIP_FINDERS: dict[str, Callable[[Any], list[SkipSite] | None]] = {
    "llama": _llama_sites,
    "gpt2": _gpt2_sites,
    "bert": _bert_sites,
    "roberta": _bert_sites,
    "albert": _albert_sites,
    "transfo_xl": _transfo_xl_sites,
}


def attention_skips(model: Any) -> list[SkipSite] | None:
    """The attention sub-layers (modsar.model.skips.SkipSite) of the architectures whose layers ModSAR knows,
    None for any other. Every such layer computes [LN](x + drop(proj(...))) [then LN], so adding
    -(1 - alpha) x to proj's output gives alpha x + Attn(x) exactly in eval mode, whatever the norm
    placement."""
    kind = model.config.model_type.removeprefix("modsar_")  # modsar_transfo_xl: our registered Transformer-XL
    finder = SKIP_FINDERS.get(kind)
    return finder(model) if finder is not None else None


class HFBackbone(TiedScores, nn.Module):
    """The `Recommender` interface (modsar.model.interface) over any stock HF model."""

    def __init__(self, cfg, num_items: int, num_users: int, max_len: int, task: Task) -> None:
        super().__init__()
        from transformers import AutoModel

        spec = backbone_spec(cfg.backbone)
        if spec is None:  # config validation refuses unknown names before a model is built
            raise ModsarError(f"'model.backbone' {cfg.backbone!r} is not an HF backbone ModSAR knows")
        self.spec = spec
        self.num_items, self.causal, self.positions = num_items, Task(task).causal, max_len + 1
        self.model = AutoModel.from_config(_hf_config(self.spec, cfg, num_items + 2, self.positions, task))
        self.item_emb = self.model.get_input_embeddings()  # rows: 0 pad, 1..N items, N+1 mask
        self.accepts = set(inspect.signature(self.model.forward).parameters)

    @contextlib.contextmanager
    def _attention(self, implementation: str):
        config = self.model.config
        previous = config._attn_implementation
        config._attn_implementation = implementation
        try:
            yield
        finally:
            config._attn_implementation = previous

    def skip_sites(self) -> list[SkipSite] | None:
        """The attention skips the residual analyses need, None for a model type whose layers are unknown."""
        return attention_skips(self.model)

    def describe(self) -> str:
        """The model type, as messages name it ("model type 'electra'")."""
        return f"model type '{self.model.config.model_type}'"

    def forward(self, inputs: torch.Tensor, users: torch.Tensor | None = None, need_weights: bool = False):
        """inputs (B, T) left-padded ids -> the stock model's last hidden states (B, T, d) [, per-layer
        attention]: the padding and the AE/AR direction go in as the model's own attention mask
        (Transformer-XL: a padding mask and its direction flag)."""
        B, T = inputs.shape
        if self.spec.model_type == "modsar_transfo_xl":  # relative positions; padding mask + direction flag
            out = self.model(
                input_ids=inputs, attention_mask=(inputs > 0).long(), output_attentions=need_weights
            )
            return (out.last_hidden_state, list(out.attentions)) if need_weights else out.last_hidden_state
        allowed = attention_mask(inputs, self.causal, 1, 0, 0)  # (B, 1, T, T), True = may attend
        position_ids = torch.arange(self.positions - T, self.positions, device=inputs.device).expand(B, T)
        kwargs: dict[str, Any] = {"input_ids": inputs}
        for name, value in (
            ("position_ids", position_ids),
            ("use_cache", False),
            ("token_type_ids", torch.zeros_like(inputs)),
        ):
            if name in self.accepts:
                kwargs[name] = value
        if not need_weights:
            with self._attention("sdpa"):
                return self.model(attention_mask=allowed, **kwargs).last_hidden_state
        additive = torch.zeros(allowed.shape, dtype=self.item_emb.weight.dtype, device=inputs.device)
        additive = additive.masked_fill(~allowed, torch.finfo(additive.dtype).min)
        with self._attention("eager"):
            out = self.model(attention_mask=additive, output_attentions=True, **kwargs)
        return out.last_hidden_state, list(out.attentions)
