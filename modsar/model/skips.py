"""Attention sub-layers as the residual-dominance analyses see them, for any backbone.

Every layer the analyses support computes  y = [LN]( s(x) + drop(W_O . Attn(values(x))) + b_O )  with the skip
s(x) entering unscaled: s(x) = x, or LN(x) in the SASRec code's block (its normed query is the skip). A
SkipSite names where x comes in (the module whose first input it is), the output projection, how to get the
value vectors and the skip from x, and the LayerNorm that follows the sum in post-norm layers. That is all the
Kobayashi decomposition (c_ij) and inference-time residual scaling (alpha s(x)) need."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from modsar.errors import ModsarError


@dataclass
class SkipSite:
    """Where an attention sub-layer's skip and output can be read: what the residual analyses (last-item
    reliance, mixing ratios, residual scaling) need of any backbone's layer."""

    container: nn.Module  # its first input is the skip x (the layer input, or the normed input's source)
    # W_O (and b_O): its output is the attention sub-layer's contribution before the sum
    projection: nn.Module
    values: Callable[[torch.Tensor], torch.Tensor]  # x (B, T, d) -> value vectors (B, T, d), b_V included
    w_o: Callable[[], torch.Tensor]  # (d_in, d) so that out = ctx @ w_o + b_o; rows grouped by head
    b_o: Callable[[], torch.Tensor | None]
    post_norm: nn.LayerNorm | None  # the LayerNorm after alpha x + Attn(x) (post-norm layers), else None
    seq_first: bool = False  # x arrives as (T, B, d) (Transformer-XL)
    skip: Callable[[torch.Tensor], torch.Tensor] | None = None  # x -> the vector the sum adds; None = x


def skip_vector(site: SkipSite, x: torch.Tensor) -> torch.Tensor:
    """What the layer adds to its attention output: x itself, or (SASRec's block) its normed query."""
    return x if site.skip is None else site.skip(x)


def modular_sites(model) -> list[SkipSite]:
    """The ModularSAR blocks: qkv rows [2d:3d] are W_V; pre-norm layers read LN(x), post-norm ones LN the sum;
    normed-skip blocks add LN1(x) and LN2 the sum, taking values from LN1(x) (normed_skip) or x (sasrec)."""
    sites = []
    for block in model.blocks:
        d = block.attn.proj.in_features

        def values(x, block=block, d=d):
            inp = block.norm1(x) if block.style in ("pre", "normed_skip") else x
            return inp @ block.attn.qkv.weight[2 * d :].T + block.attn.qkv.bias[2 * d :]

        def w_o(block=block) -> torch.Tensor:
            return block.attn.proj.weight.T

        def b_o(block=block) -> torch.Tensor | None:
            return block.attn.proj.bias

        normed_skip = block.style in ("sasrec", "normed_skip")
        sites.append(
            SkipSite(
                block,
                block.attn.proj,
                values,
                w_o,
                b_o,
                None if block.pre_norm else block.norm2 if normed_skip else block.norm1,
                skip=block.norm1 if normed_skip else None,
            )
        )
    return sites


def skip_input(args: tuple, kwargs: dict) -> torch.Tensor:
    """The skip x from a container's call (positional, or the HF keyword `hidden_states`)."""
    return args[0] if args else kwargs["hidden_states"]


@contextlib.contextmanager
def scaled_skips(sites: list[SkipSite], alpha: float):
    """Inference-time z = alpha s(x) + Attn(x) in every site: each projection's output gets -(1 - alpha) s(x)
    of its container's input x, which the layer then adds to s(x) (exact in eval mode, where dropout is the
    identity)."""
    skips: dict[int, torch.Tensor] = {}

    def keep(module, args, kwargs):
        skips[id(module)] = skip_input(args, kwargs)

    def scale(site):
        return lambda module, args, out: out - (1.0 - alpha) * skip_vector(site, skips[id(site.container)])

    hooks = []
    for site in sites:
        hooks.append(site.container.register_forward_pre_hook(keep, with_kwargs=True))
        hooks.append(site.projection.register_forward_hook(scale(site)))
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


@contextlib.contextmanager
def residual_scale(model, alpha: float):
    """alpha on the attention sub-layer's skip of every layer of any `Recommender`, while the context lasts
    (ModsarError for a backbone whose layers ModSAR does not know)."""
    sites = model.skip_sites()
    if sites is None:
        from modsar.model.registry import skip_site_backbones

        raise ModsarError(
            f"residual scaling is not defined for {model.describe()}: its attention layers are not "
            f"ones ModSAR knows ({', '.join(skip_site_backbones())})"
        )
    with scaled_skips(sites, alpha):
        yield
