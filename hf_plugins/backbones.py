"""The HuggingFace backbones' registration, made as any outside plugin makes it: ModSAR finds this module
through the `modsar.backbones` entry point of its own package (pyproject.toml) and imports it when a
configuration is first checked or an unknown backbone is looked up. The core never imports hf_plugins; this
module imports no model code (the adapter loads with the first model built)."""

from __future__ import annotations

from hf_plugins.spec import NAMED, SKIP_SITE_TYPES, check_config
from modsar.model.registry import BackboneEntry, reads_all_but, register

# the modular backbone's design knobs, which a HuggingFace model's own config has no place for
READS = reads_all_but(
    "local_heads user_fusion user_size pos_dim pos_fusion norm_eps init time_bias item_sse_prob "
    "user_sse_prob",
    # accepted with no effect, as before these declarations
    no_effect="attn_output_dropout ffn_inner_dropout head embedding_norm scale_embedding positions_from "
    "local_window session_gap sse_style",
)
WHY = "a design knob of the modular backbone; the HuggingFace model keeps its own"

for _name in NAMED:
    register(
        BackboneEntry(
            _name,
            "hf_plugins.adapter:HFBackbone",
            check_config,
            residual_sites=_name in SKIP_SITE_TYPES,
            **READS,
            unread_why=WHY,
        )
    )
register(  # hf:<any model type taking input_ids and a 4-D mask>
    BackboneEntry(
        "hf:",
        "hf_plugins.adapter:HFBackbone",
        check_config,
        skip_site_types=SKIP_SITE_TYPES,
        **READS,
        unread_why=WHY,
    )
)
