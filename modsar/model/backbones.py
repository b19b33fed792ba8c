"""The core's backbones, declared: every fact the rest of ModSAR reads about them (tasks, diagnostics, the
settings each reads and owns, paper names, training partners, time bias) and the config checks each runs.
Torch-free, as any plugin's declarations must be: config checks import no model code; a backbone's module
(`modular.py`, `duorec.py`, `bsarec.py`, `gru4rec.py`) is imported only when a model is built.
`modsar/__init__.py` imports this module, so every use of modsar has these entries; the HuggingFace backbones
are declared the same way in `hf_plugins/backbones.py`."""

from __future__ import annotations

from modsar.config import Config, ModelConfig
from modsar.model.registry import BackboneEntry, Bad, PaperName, reads_all_but, register
from modsar.task import Task

AE, AR = Task.AE, Task.AR


def _check_modular(cfg: Config, bad: Bad) -> None:
    m: ModelConfig = cfg.model
    if m.positional in ("rope", "relative"):
        bad(
            f"'model.positional={m.positional}' exists only in HF backbones; the modular backbone has "
            "learned, sinusoidal, none or target_aligned"
        )
    absolute = m.absolute_positions
    if not absolute and m.pos_fusion != "add":
        bad(
            f"'model.pos_fusion={m.pos_fusion}' places an absolute position vector, and model.positional="
            f"{m.positional} has none; leave pos_fusion at add"
        )
    if not absolute and m.positions_from != "end":
        bad(
            f"'model.positions_from' counts absolute positions, and model.positional={m.positional} has "
            "none; "
            "leave it at end"
        )
    head = m.head_size
    if m.positional == "target_aligned" and m.pos_dim > head:
        bad(
            f"'model.pos_dim' ({m.pos_dim}) is each head's query channel that meets the distance codes under "
            f"target_aligned: at most the head size hidden_size / num_heads = {head}"
        )
    if m.positional == "none" and m.pos_dim:
        bad(
            "'model.pos_dim' is the width of a position channel, and model.positional=none has none; leave "
            "it at 0"
        )
    if absolute and m.pos_fusion == "add" and m.pos_dim not in (0, m.hidden_size):
        bad(
            f"'model.pos_dim={m.pos_dim}' needs a position channel of its own: set model.pos_fusion=concat "
            "(beside the item vector) or project ([item; position] projected to the hidden size)"
        )
    if absolute and m.pos_fusion != "add":
        room = m.hidden_size - m.user_width
        if not 0 < m.pos_dim < (room if m.pos_fusion == "concat" else m.hidden_size + 1):
            limit = (
                f"below {room} (the item vector needs the rest)"
                if m.pos_fusion == "concat"
                else f"at most the hidden size {m.hidden_size}"
            )
            bad(f"'model.pos_dim' with pos_fusion={m.pos_fusion} must be >= 1 and {limit}; got {m.pos_dim}")


def _check_bsarec(cfg: Config, bad: Bad) -> None:
    m: ModelConfig = cfg.model
    if m.norm not in ("auto", "post"):
        bad(f"bsarec's layers are post-LN (as its code); 'model.norm={m.norm}' is not offered for it")
    if m.positional not in ("auto", "learned"):
        bad(
            f"bsarec has learned positions (as its code); 'model.positional={m.positional}' is not offered "
            "for it"
        )


# accepted by the backbones that do not read them, as before these declarations (spaces and records set them
# whatever the backbone)
NO_EFFECT = "local_window session_gap"


def _duorec_partners(cfg: Config) -> bool:
    """DuoRec's supervised views need a same-target training prefix for every sequence of a batch."""
    return cfg.loss.cl_weight > 0 and cfg.loss.cl_views != "un"


register(  # SASRec (AR) / BERT4Rec (AE), and every design of the ModSAR paper
    BackboneEntry(
        "modular",
        "modsar.model.modular:ModularSAR",
        _check_modular,
        paper_names=(PaperName(AR, "SASRec", 0), PaperName(AE, "BERT4Rec", 3)),
        named_by_design=True,
        time_bias=True,
    )
)
register(
    BackboneEntry(
        "duorec",
        "modsar.model.duorec:DuoRec",
        _check_modular,
        tasks=(AR,),
        settings=("loss.cl_weight", "loss.cl_temperature", "loss.cl_views", "loss.cl_similarity"),
        paper_names=(PaperName(AR, "DuoRec", 1),),
        needs_partners=_duorec_partners,
        cost_settings=("loss.cl_weight", "loss.cl_views"),  # partners double a batch's forward passes
    )
)
register(
    BackboneEntry(
        "bsarec",
        "modsar.model.bsarec:BSARec",
        _check_bsarec,
        settings=("model.bsa_cutoff", "model.bsa_alpha"),
        **reads_all_but(
            "head init attn_output_dropout ffn_inner_dropout scale_embedding norm_eps local_heads pos_dim "
            "pos_fusion user_fusion user_size time_bias",
            no_effect=f"{NO_EFFECT} embedding_norm",  # its embedding LayerNorm is always on
        ),
        unread_why="its layers, init and dot-product output are fixed, as its code, and it has no position "
        "channel or user embedding",
        paper_names=(PaperName(AR, "BSARec", 2), PaperName(AE, "BSARec-AE", 5)),
    )
)
register(
    BackboneEntry(
        "gru4rec",
        "modsar.model.gru4rec:GRU4Rec",
        None,  # every refusal it makes is a key it does not read
        tasks=(AR,),
        attention_maps=False,
        residual_sites=False,
        recurrent=True,
        settings=("model.gru_size",),
        **reads_all_but(
            "norm positional positions_from pos_dim pos_fusion local_heads head init embedding_norm norm_eps "
            "attn_output_dropout ffn_inner_dropout ffn_size activation user_fusion user_size time_bias",
            # residual_models sets attn_dropout for every model it compares
            no_effect=f"num_heads attn_dropout scale_embedding {NO_EFFECT}",
        ),
        unread_why="a recurrent model: no attention, positions, norms, feed-forward layers or user embedding",
        paper_names=(PaperName(AR, "GRU4Rec", 4),),
    )
)
# albert, llama, transfo_xl and hf:<model type> come from hf_plugins, through the modsar.backbones entry point
