"""The HuggingFace backbones' registration, made as any outside plugin makes it: ModSAR finds this module through
the `modsar.backbones` entry point of its own package (pyproject.toml) and imports it when a configuration is
first checked or an unknown backbone is looked up. The core never imports hf_plugins; this module imports no
model code (the adapter loads with the first model built)."""

from __future__ import annotations

from hf_plugins.spec import check_config
from modsar.model.registry import BackboneEntry, register

for _name in ("albert", "llama", "transfo_xl", "hf:"):  # hf:<any model type taking input_ids and a 4-D mask>
    register(BackboneEntry(_name, "hf_plugins.adapter:HFBackbone", check_config))
