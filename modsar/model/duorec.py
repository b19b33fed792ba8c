"""DuoRec (Qiu et al., WSDM 2022): the SASRec encoder plus a contrastive regulariser against representation
degeneration.

The encoder is the modular backbone under `task=ar`; the loss is ModSAR's next-item loss plus `loss.cl_weight`
times an InfoNCE between two views of each training row's representation (its state at the last position,
whose target is the row's last label). DuoRec's own code trains as `data.samples=prefixes` does: every
training prefix is a row with its own views, and an epoch takes as many optimizer steps as RecBole's. Under
`data.samples=sequences` a row is a user's whole window (next-item loss at every position) and only its last
prefix is contrasted, once per epoch (issue 14 compared the two; the git history of benchmarks/RESULTS.md has
the figures). The views:
  un    the sequence vs the same sequence encoded again (another dropout mask: unsupervised augmentation)
  su    the sequence vs another training prefix with the same next item (supervised augmentation; drawn
        from the whole training set, the sample itself excluded; a target no other prefix has falls back to
        the sequence itself)
  us    both terms, summed
  us_x  the dropout view vs the same-target view (DuoRec's and RecBole's default); the plain encoding gets
        the next-item loss only
InfoNCE over the batch's 2B views: each view's positive is its partner, its negatives the other views
except those with the same target (a same-target "negative" is a false one).
Partners are drawn at random, so a batch of them is as wide as its longest; they are encoded in groups of
similar length (`final_states`), which spends nothing on padding and gives the same states.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from modsar.config import LossConfig
from modsar.data.batches import Batch
from modsar.model.interface import trim_left_padding
from modsar.model.modular import ModularSAR


def info_nce(
    first: torch.Tensor,
    second: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    similarity: str = "dot",
) -> torch.Tensor:
    """Mean InfoNCE of (B, d) view pairs: row i of `first` and row i of `second` are positives; views whose
    `targets` are equal never serve as each other's negatives."""
    B = len(first)
    z = torch.cat([first, second])
    if similarity == "cos":
        z = F.normalize(z, dim=-1)
    logits = z @ z.T / temperature
    both = torch.cat([targets, targets])
    partner = torch.cat([torch.arange(B, 2 * B), torch.arange(B)]).to(z.device)
    same = both[:, None] == both[None, :]  # includes each view itself and its partner
    same[torch.arange(2 * B, device=z.device), partner] = False
    return F.cross_entropy(logits.masked_fill(same, float("-inf")), partner)


PARTNER_GROUP = 64  # rows per length-sorted group of partner prefixes


def final_states(
    model: ModularSAR, inputs: torch.Tensor, users: torch.Tensor | None, group: int = PARTNER_GROUP
) -> torch.Tensor:
    """(B, d) states at the last position of left-padded rows of any lengths, encoded `group` rows at a time
    in order of length, each group only as wide as its longest row (a row's state does not depend on the
    padding beside it), then put back in row order."""
    order = (inputs > 0).sum(1).argsort()
    parts = []
    for rows in order.split(group):
        parts.append(model(trim_left_padding(inputs[rows]), None if users is None else users[rows])[:, -1])
    return torch.cat(parts)[order.argsort()]


class DuoRec(ModularSAR):
    """The modular encoder (SASRec's settings come from the config) with DuoRec's contrastive term."""

    def regularizer(self, batch: Batch, hidden: torch.Tensor, cfg: LossConfig) -> torch.Tensor | None:
        """`cl_weight` x the InfoNCE of the configured views, for a training batch and its encoded states."""
        if cfg.cl_weight == 0:
            return None
        targets = batch.labels[:, -1]  # left padding: the last column is every row's last training item
        plain = hidden[:, -1]
        views = cfg.cl_views
        unsupervised = self(batch.inputs, batch.users)[:, -1] if views in ("un", "us", "us_x") else None
        supervised = None
        if views in ("su", "us", "us_x"):
            assert batch.partners is not None, "TrainBatches(partners=True) builds the same-target prefixes"
            supervised = final_states(self, batch.partners, batch.partner_users)
        nce = lambda a, b: info_nce(a, b, targets, cfg.cl_temperature, cfg.cl_similarity)  # noqa: E731
        if views == "un":
            loss = nce(plain, unsupervised)
        elif views == "su":
            loss = nce(plain, supervised)
        elif views == "us":
            loss = nce(plain, unsupervised) + nce(plain, supervised)
        else:
            loss = nce(unsupervised, supervised)
        return cfg.cl_weight * loss

    def describe(self) -> str:
        """A few words naming the model in messages."""
        return f"DuoRec (the modular encoder, {self.cfg.norm_style}-norm blocks, + contrastive views)"
