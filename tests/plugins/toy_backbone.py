"""A toy plugin backbone, loaded by path through MODSAR_PLUGINS: the whole cost of adding a backbone.

Causal bag of items: the state at t is a linear map of the mean item vector up to t, mixed with the item at t
by a setting of its own (model.toy.recency, declared in its section as the core declares its keys). AR only,
no attention, so it has neither attention maps nor residual sites (its registry entry says so).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from modsar.config import bounded
from modsar.model.registry import BackboneEntry, reads_only, register
from modsar.model.toolkit import item_scores


@dataclass
class ToySettings:
    # the weight of the item at t against the mean of the items up to t (0 = the mean alone)
    recency: float = bounded(0.0, low=0, high=1)


class CausalBag(nn.Module):
    def __init__(self, cfg, num_items: int, num_users: int, max_len: int, task: str) -> None:
        super().__init__()
        self.num_items = num_items
        self.item_emb = nn.Embedding(num_items + 2, cfg.hidden_size, padding_idx=0)
        self.mix = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.recency = cfg.toy.recency

    def forward(self, inputs: torch.Tensor, users: torch.Tensor | None = None, need_weights: bool = False):
        counts = (inputs > 0).cumsum(1).clamp(min=1)[..., None]
        items = self.item_emb(inputs)
        return self.mix((1 - self.recency) * items.cumsum(1) / counts + self.recency * items)

    def score(self, hidden, users=None, items=None):
        return item_scores(hidden, self.item_emb, self.num_items, items)

    def skip_sites(self):
        return None

    def describe(self) -> str:
        return "the toy causal bag"


register(
    BackboneEntry(
        "toy",
        f"{__name__}:CausalBag",
        tasks=("ar",),
        attention_maps=False,
        residual_sites=False,
        section=ToySettings,
        # what its code reads (the training batches read the SSE keys): any other model key is refused
        **reads_only("hidden_size item_sse_prob user_sse_prob sse_style"),
        unread_why="the toy bag has one layer of hidden_size; nothing else of the model is settable",
    )
)
