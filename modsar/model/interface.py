"""The interface every backbone gives training, losses, evaluation and the analyses.

A structural `Protocol`, as nanoGPT's model is just a module with a known forward: a backbone need not
inherit anything, only have these members (ModularSAR and hf_plugins.adapter.HFBackbone do). Optional:
`output_layer(hidden) -> (states, item rows, item bias or None)` when its all-item scores are
states @ rows.T + bias (up to a per-row constant); the full-softmax CE then runs fused and chunked
(model/fused_ce.py), and without it on the plain (positions x items) logits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from modsar.model.skips import SkipSite


@runtime_checkable
class Recommender(Protocol):
    """What the trainer, the evaluator and the analyses ask of a backbone (every registered one, plugins
    included): encode left-padded ids, score items against the tied table, name itself, and the few
    nn.Module members they use. A Protocol, so a plugin need not inherit from ModSAR."""

    num_items: int  # items are ids 1..num_items; 0 pads, num_items + 1 is the AE mask token
    item_emb: nn.Embedding  # rows 0..num_items + 1, tied to the output scores

    def __call__(
        self,
        inputs: torch.Tensor,
        users: torch.Tensor | None = None,
        need_weights: bool = False,
        **context: torch.Tensor,
    ):
        """Left-padded ids (B, T) -> hidden states (B, T, d); with need_weights, also per-layer attention
        probabilities [(B, H, T, T)] (backbones whose entry says attention_maps=True). `context` carries what
        only some models read (`times=` for the modular backbone's time_bias); callers pass it only to
        those."""
        ...

    def score(
        self, hidden: torch.Tensor, users: torch.Tensor | None = None, items: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Scores of all items 1..N (..., N), of shared candidates items (K,) -> (..., K), or of per-row
        candidates items (..., K) -> (..., K)."""
        ...

    def skip_sites(self) -> list[SkipSite] | None:
        """Each layer's attention skip for the residual analyses (modsar.model.skips), None if unknown."""
        ...

    def describe(self) -> str:
        """A few words naming the model in messages ("model type 'electra'")."""
        ...

    # nn.Module members the trainer uses
    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        """nn.Module's: the optimizer's parameters, and the weight checks."""
        ...

    def modules(self) -> Iterator[nn.Module]:
        """nn.Module's: walked by initialisers and the FLOP count."""
        ...

    def train(self, mode: bool = True) -> Recommender:
        """nn.Module's: dropout on, for training epochs."""
        ...

    def eval(self) -> Recommender:
        """nn.Module's: dropout off, for validation, test and the analyses."""
        ...

    def to(self, *args, **kwargs) -> Recommender:
        """nn.Module's: onto the run's device."""
        ...

    def state_dict(self, *args, **kwargs) -> dict[str, Any]:
        """nn.Module's: what a checkpoint saves."""
        ...

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False) -> Any:
        """nn.Module's: what a checkpoint, or the best epoch's weights, restore."""
        ...


def encode(
    model: Recommender, inputs: torch.Tensor, users: torch.Tensor | None, times: torch.Tensor | None = None
) -> torch.Tensor:
    """Hidden states; `times` go only to a model that reads them (model.time_bias): other backbones take
    none."""
    return model(inputs, users) if times is None else model(inputs, users, times=times)


def trim_left_padding(inputs: torch.Tensor) -> torch.Tensor:
    """Drop leading columns that are padding in every row (no compute spent on them)."""
    real_columns = (inputs > 0).any(0).nonzero()
    return inputs[:, int(real_columns[0]) :] if len(real_columns) else inputs
