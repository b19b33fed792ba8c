"""HuggingFace transformers (v5) models as item-ID sequential recommenders, with the same AE/AR switch.

`model.backbone`: ``albert`` | ``llama`` | ``hf:<model_type>`` (any config that accepts `input_ids`,
`attention_mask` and `position_ids`; ``hf:bert`` and ``hf:gpt2`` are tested). Stock models, no patches:
AE/AR is an explicit 4-D attention mask handed to the model (transformers returns a 4-D mask as it is),
boolean for SDPA and additive for eager attention (used when attention maps are requested).
"""

from __future__ import annotations

from hf_plugins.spec import BACKBONES, check_config

__all__ = ["BACKBONES", "check_config"]  # the model class: hf_plugins.adapter.HFBackbone (imports torch)
