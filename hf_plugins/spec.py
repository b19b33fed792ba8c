"""What ModSAR knows about each HF backbone: its knobs and where they go, and the config check.

Torch-free (transformers' config table only, for `hf:<model_type>`), so `modsar.config` can check a config
through the backbone registry without importing any model code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn


@dataclass(frozen=True)
class Backbone:
    """What ModSAR must know of one stock architecture to drive it as an item-ID model: its norm placement,
    positions, and which of its config fields take model.dropout and model.attn_dropout."""

    model_type: str
    norm: str  # the architecture's own norm placement
    positional: str  # learned | rope
    dropout: tuple[str, ...]  # HF config fields fed by model.dropout ( () = the model has none )
    attn_dropout: tuple[str, ...]  # HF config fields fed by model.attn_dropout
    activation_field: str
    extra: tuple = ()  # fixed HF config values, as (name, value) pairs


BACKBONES: dict[str, Backbone] = {
    "albert": Backbone(
        "albert",
        "post",
        "learned",
        ("hidden_dropout_prob",),
        ("attention_probs_dropout_prob",),
        "hidden_act",
        (("type_vocab_size", 1),),
    ),
    "llama": Backbone("llama", "pre", "rope", (), ("attention_dropout",), "hidden_act"),
    "bert": Backbone(
        "bert",
        "post",
        "learned",
        ("hidden_dropout_prob",),
        ("attention_probs_dropout_prob",),
        "hidden_act",
        (("type_vocab_size", 1),),
    ),
    "gpt2": Backbone(
        "gpt2", "pre", "learned", ("resid_pdrop", "embd_pdrop"), ("attn_pdrop",), "activation_function"
    ),
    "transfo_xl": Backbone("modsar_transfo_xl", "post", "relative", ("dropout",), ("dropatt",), ""),
}


NAMED = ("albert", "llama", "transfo_xl")  # backbones named without the hf: prefix
# model types whose attention sub-layers the adapter knows (hf_plugins.adapter.SKIP_FINDERS), by backbone name
SKIP_SITE_TYPES = ("llama", "gpt2", "bert", "roberta", "albert", "transfo_xl")


def backbone_spec(name: str) -> Backbone | None:
    """The declared backbone, or for hf:<any other model type> a generic one that ModSAR knows only by the
    standard config names (sizes, layers, heads); its dropout and activation fields are unknown."""
    key = name[3:] if name.startswith("hf:") else name
    if key in NAMED or (name.startswith("hf:") and key in BACKBONES):
        return BACKBONES[key]
    if name.startswith("hf:") and key:
        from transformers import CONFIG_MAPPING

        if key in CONFIG_MAPPING:
            defaults = CONFIG_MAPPING[key]()
            present = [f for f in _GENERIC_FIELDS if hasattr(defaults, f)]
            return Backbone(
                key,
                "auto",
                "auto",
                tuple(f for f in present if f in _HIDDEN_DROPOUT),
                tuple(f for f in present if f in _ATTN_DROPOUT),
                next((f for f in present if f in ("hidden_act", "activation_function")), ""),
                (("ffn", next((f for f in present if f in ("intermediate_size", "n_inner")), "")),),
            )
    return None


# Config fields a generic HF model may have, by the names transformers uses across architectures.
_HIDDEN_DROPOUT = ("hidden_dropout_prob", "hidden_dropout", "resid_pdrop", "embd_pdrop")
_ATTN_DROPOUT = ("attention_probs_dropout_prob", "attention_dropout", "attn_pdrop")
_GENERIC_FIELDS = (
    *_HIDDEN_DROPOUT,
    *_ATTN_DROPOUT,
    "hidden_act",
    "activation_function",
    "intermediate_size",
    "n_inner",
)


def check_config(cfg, bad: Callable[[str], NoReturn]) -> None:
    """Refuse config values a backbone cannot honour (called from modsar.config.validate)."""
    m = cfg.model
    name = m.backbone
    spec = backbone_spec(name)
    if spec is None:
        from modsar.model.registry import names  # torch-free

        known = ", ".join([*(n for n in names() if not n.endswith(">")), *(f"hf:{k}" for k in BACKBONES)])
        bad(f"'model.backbone' {name!r} is unknown; choose one of {known}")
    generic = spec.norm == "auto"
    if generic and not spec.activation_field and m.activation != "gelu":
        bad(f"{name} has no activation field ModSAR knows; leave model.activation at gelu")
    if not spec.attn_dropout and m.attn_dropout:
        bad(
            f"{name} has no attention dropout ModSAR knows, so 'model.attn_dropout={m.attn_dropout}' would "
            "do nothing; set it to 0"
        )
    if m.norm not in ("auto", spec.norm) and not (
        name == "transfo_xl" and m.norm == "pre"
    ):  # pre_lnorm exists
        bad(f"{name} is {spec.norm}-norm by design; leave 'model.norm' at auto (or set {spec.norm})")
    if m.activation != "relu" and name == "transfo_xl":
        bad("transfo_xl's feed-forward is ReLU by design; set model.activation=relu")
    if m.positional not in ("auto", spec.positional):
        bad(
            f"{name} uses {spec.positional} positions; leave 'model.positional' at auto (or set "
            f"{spec.positional})"
        )
    if not spec.dropout and m.dropout:
        bad(
            f"{name} has no hidden/embedding dropout, so 'model.dropout={m.dropout}' would do nothing; set "
            "model.dropout=0" + (" and use model.attn_dropout" if spec.attn_dropout else "")
        )
    if spec.positional == "rope" and m.head_size % 2:
        bad(
            f"{name} rotates pairs of dimensions (RoPE): the head size hidden_size / num_heads = "
            f"{m.head_size} must be even"
        )
