"""A plugin backbone that declares every fact a backbone entry can hold, with no edit to the core:
settings it owns (DuoRec's contrastive knobs, shared with duorec), a paper name and its column, a need for
training partners, a time bias, and, under a prefix, the model types whose attention skips are known.

`declared` builds DuoRec's class (it reads partners when its config asks for supervised views); `declared:`
builds the modular backbone, which implements model.time_bias and has attention skips."""

from __future__ import annotations

from modsar.model.registry import BackboneEntry, PaperName, register
from modsar.task import Task


def _partners(cfg) -> bool:
    return cfg.loss.cl_weight > 0 and cfg.loss.cl_views != "un"


register(
    BackboneEntry(
        "declared",
        "modsar.model.duorec:DuoRec",
        tasks=(Task.AR,),
        settings=("loss.cl_weight", "loss.cl_views"),
        paper_names=(PaperName(Task.AR, "DeclaredRec", -1),),  # before every column of the paper
        needs_partners=_partners,
    )
)
register(
    BackboneEntry(
        "declared:",
        "modsar.model.modular:ModularSAR",
        time_bias=True,
        skip_site_types=("sites",),
    )
)
