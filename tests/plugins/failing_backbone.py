"""A plugin backbone that passes every check before a search (it builds, on the meta device too) but raises
in its first forward pass: every trial that uses it errors, deterministically and at once."""

from __future__ import annotations

import torch
from torch import nn

from modsar.model.registry import BackboneEntry, register
from modsar.model.toolkit import item_scores

MESSAGE = "the failing test backbone refuses every forward pass"


class Failing(nn.Module):
    def __init__(self, cfg, num_items: int, num_users: int, max_len: int, task: str) -> None:
        super().__init__()
        self.num_items = num_items
        self.item_emb = nn.Embedding(num_items + 2, cfg.hidden_size, padding_idx=0)

    def forward(self, inputs: torch.Tensor, users: torch.Tensor | None = None, need_weights: bool = False):
        raise RuntimeError(MESSAGE)

    def score(self, hidden, users=None, items=None):
        return item_scores(hidden, self.item_emb, self.num_items, items)

    def skip_sites(self):
        return None

    def describe(self) -> str:
        return "a backbone whose forward pass always raises"


register(
    BackboneEntry("failing", f"{__name__}:Failing", tasks=("ar",), attention_maps=False, residual_sites=False)
)
