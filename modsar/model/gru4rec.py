"""GRU4Rec (Hidasi et al., ICLR 2016), in the full-softmax form most benchmarks run (as RecBole's GRU4Rec):
item embedding -> dropout -> GRU layers -> linear projection back to the embedding size -> tied item scores.

Recurrent, so causal by construction: the state at position t has read items 0..t only; `task=ae` is refused
(registry). ModSAR's rows are left-padded. The GRU has no biases (as RecBole's) and padding enters as exact
zero vectors, so the zero state stays exactly zero through the padding (every gate acts on zeros: h = (1 - z)
* tanh(0) + z * 0): each row starts from a zero state at its first real item whatever its batch's width,
without packing. No attention: the attention diagnostics (maps, mixing, residual scaling) are not defined for
it; last-item reliance, shuffles and non-final predictions are."""

from __future__ import annotations

import torch
from torch import nn

from modsar.config import ModelConfig
from modsar.model.skips import SkipSite
from modsar.model.toolkit import TiedScores
from modsar.task import Task


class GRU4Rec(TiedScores, nn.Module):
    """GRU4Rec as RecBole builds it (a GRU without bias, a projection back to d, RecBole's init), for the
    residual paper's comparison; item rows and scoring as every backbone's."""

    def __init__(self, cfg: ModelConfig, num_items: int, num_users: int, max_len: int, task: Task) -> None:
        super().__init__()
        d, hidden = cfg.hidden_size, cfg.gru_size or cfg.hidden_size
        self.cfg, self.num_items = cfg, num_items
        # rows as every backbone: 0 pad, N+1 mask
        self.item_emb = nn.Embedding(num_items + 2, d, padding_idx=0)
        self.drop = nn.Dropout(cfg.dropout)
        # RecBole: no bias
        self.gru = nn.GRU(d, hidden, num_layers=cfg.num_layers, bias=False, batch_first=True)
        self.proj = nn.Linear(hidden, d)
        # RecBole's GRU4Rec init: xavier_normal on the embedding, xavier_uniform on the first layer's input
        # and recurrent matrices; deeper layers and the projection keep torch's own init
        nn.init.xavier_normal_(self.item_emb.weight)
        self.item_emb.weight.data[0].zero_()
        for name, param in self.gru.named_parameters():
            if name in ("weight_ih_l0", "weight_hh_l0"):
                nn.init.xavier_uniform_(param)

    def forward(self, inputs: torch.Tensor, users: torch.Tensor | None = None, need_weights: bool = False):
        """inputs (B, T) left-padded item ids -> states (B, T, d); padding columns get the projected zero
        state."""
        # padding: exact zeros, whatever the table
        x = self.drop(self.item_emb(inputs)) * (inputs > 0)[..., None]
        h = self.proj(self.gru(x)[0])
        return (h, []) if need_weights else h

    def skip_sites(self) -> list[SkipSite] | None:
        """None: a recurrent model has no attention sub-layer, so the residual analyses have no skip to
        read."""
        return None  # no attention sub-layer, so no attention skip

    def describe(self) -> str:
        """A few words naming the model in messages."""
        return "GRU4Rec (a recurrent model)"
