"""HuggingFace transformers (v5) models as item-ID sequential recommenders, with the same AE/AR switch.

`model.backbone`: ``albert`` | ``llama`` | ``transfo_xl`` (Transformer-XL, which transformers 5 removed, kept
here as a registered PreTrainedModel: hf_plugins/transfo_xl.py) | ``hf:<model_type>`` (any config that accepts
`input_ids`, `attention_mask` and `position_ids`; ``hf:bert``, ``hf:gpt2`` and ``hf:roberta`` are tested).
Stock models, no patches: AE/AR is an explicit 4-D attention mask handed to the model (transformers returns a
4-D mask as it is), boolean for SDPA and additive for eager attention (used when attention maps are
requested)."""

from __future__ import annotations

from hf_plugins.spec import BACKBONES, check_config

__all__ = ["BACKBONES", "check_config"]  # the model class: hf_plugins.adapter.HFBackbone (imports torch)
