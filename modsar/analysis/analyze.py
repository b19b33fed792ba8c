"""`modsar analyze`: the seed papers' diagnostics on a trained checkpoint, over its test users.

Conventions (each output row names the ones it depends on; definitions in docs/diagnostics.md):
- Attention: post-softmax probabilities averaged over heads, per layer; the last W = 20 input positions
  (AE: including the trailing [MASK]), padded rows and columns zero (N = W^2). S and k per (user, layer),
  then the mean over users (per layer) and over users and layers ("all"), as ModSAR Tables 2-3. k uses
  sigma = 0 unless --sigma is given; numerically-zero singular values (below the matrix_rank tolerance)
  never count. Spectra and heatmaps show one user (the same for every model of a dataset: the first user of
  a seeded permutation with >= W history items) plus the mean sorted spectrum over users.
- HRLI@k / HRL2I@k: the last / second-to-last history item among the top k of the final-position scores,
  unfiltered; "filtered": the user's seen items are removed except the probed one (docs/diagnostics.md#hrli).
  Sequences with one history item are left out of HRL2I (n reported).
- Shuffle: inference-time permutation of the history (partial: all but the last item; full: all), AE keeps
  its trailing mask; NDCG@10 under the checkpoint's own evaluation settings.
- Residual scaling: z = alpha * x + Attn(...) on the attention sub-layer's skip in every layer, at inference.
  Pre-norm: x <- alpha * x + Attn(LN(x)); post-norm: x <- LN(alpha * x + Attn(x)). One mechanism for every
  backbone whose attention skips are known (registry.skip_site_backbones()): hooks on the attention output
  projection, from the same layer description the mixing decomposition uses (modsar/model/skips.py).
- Mixing ratio (Kobayashi): c_ij = sum_h a^h_ij f^h(x_j), f^h(x) = (x' W_V^h + b_V^h) W_O^h with x' the
  attention's input (pre-norm: the normed x), b_O excluded; +Res adds alpha * x_i to c_ii; +LN (post-norm
  only, where a LayerNorm follows the sum) centres and scales by the real pre-LN vector's std (its bias and
  b_O stay out of c_ij, so +LN sums to LN(z) minus those terms). Pooled over real positions of all users and
  layers (also without each sequence's first position), and per layer at positions L, L-1, L-2, where L is the
  position the prediction is read from (AR: the last item; AE: the [MASK]); a sequence counts at L-o only
  if it has more than o real positions.
- A user token (model.user_fusion=token) is column 0 of every map: attention windows read the item-to-item
  block (rows then sum to 1 minus the token's share), mixing counts the token as one of the "others" j != i
  but never as a position i; `user` reports the token's share itself.
- HF backbones: everything; mixing, residual scaling and recovery need the layers' skip and value/output
  weights, known for the backbones registry.skip_site_backbones() lists (any other skips them with a note).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from tqdm import tqdm

from modsar.analysis.diagnostics import (
    attention_window,
    effective_rank,
    hard_threshold_rank,
    last_item_hit,
    recovery_rate,
    sparsity,
)
from modsar.data.batches import eval_inputs
from modsar.data.split import history_index
from modsar.devices import resolve as resolve_device
from modsar.errors import ModsarError
from modsar.evaluation.ranking import Evaluator, model_scorer, target_ranks
from modsar.model import registry
from modsar.model.interface import trim_left_padding
from modsar.model.skips import SkipSite, residual_scale, skip_input, skip_vector
from modsar.task import Task
from modsar.training.checkpoints import checkpoint_split, load_checkpoint

DIAGNOSTICS = (
    "sparsity",
    "rank",
    "hrli",
    "shuffle",
    "mixing",
    "residual-scaling",
    "nonfinal",
    "recovery",
    "user",
)
ALPHAS = tuple(round(a / 10, 1) for a in range(11))
EPSILONS = (0.0, 0.005, 0.01, 0.02, 0.05)
CONVENTIONS = {  # stored beside every figure, so a table read without this module still says what it is
    "sparsity": "S=(L1/N)/L2 of the head-averaged last-W window, padding zero, N=W^2; mean over users (per "
    "layer, all)",
    "rank": "k=#{s_i > tau} of the head-averaged last-W window; tau by the named rule; mean over users",
    "hrli": "probe (last / second-to-last history item) in the top k of final-position scores; mean over "
    "test users (HRL2I: users with 2+ items); filtered = seen items removed except the probe",
    "shuffle": "NDCG@10 on test with the history permuted at inference (partial keeps the last item); "
    "drop = (original - shuffled) / original",
    "mixing": "Kobayashi r_i = |sum_{j!=i} c_ij| / (|sum_{j!=i} c_ij| + |c_ii|); mean over real positions of "
    "all test users (pooled: and layers); at L-o: sequences with more than o positions",
    "residual-scaling": "alpha scales the attention sub-layer skip in every layer at inference; test metrics",
    "nonfinal": "joint proportion over test users: miss@10 at L and hit@10 from the state o positions "
    "earlier",
    "recovery": "Rec(alpha) over R = {miss@10 at L, hit@10 at L-1..3, alpha=1}; alpha* = best Rec with "
    "HR@10 >= (1-epsilon) HR@10(1), smallest on ties",
    "user": "NDCG@10 on test with each user's id replaced by another test user's (a seeded cycle: nobody "
    "keeps their own); drop = (own - swapped) / own. user_fusion=token: the attention probability on the "
    "user token, mean over heads and real item positions of all test users",
}


def model_label(cfg) -> str:
    """'Vanilla-AE', 'Local-AE', 'Vanilla-AR' as in the ModSAR paper; HF backbones carry their name; the
    residual-dominance paper's models their own ("GRU4Rec", "DuoRec", "BSARec", "BSARec-AE")."""
    if registry.named_by_paper(cfg.model.backbone):
        return registry.paper_name(cfg.model.backbone, cfg.task)
    kind = "Local" if cfg.model.local_heads else "Vanilla"
    name = f"{kind}-{cfg.task.label}"
    return name if registry.lookup(cfg.model.backbone).named_by_design else f"{cfg.model.backbone} {name}"


class Probe:
    """A checkpoint and its test users, ready for diagnostics (inputs as the evaluation builds them)."""

    def __init__(
        self,
        checkpoint: str | Path,
        data_dir: str | None = None,
        attention_users: int = 2000,
        device: str = "cpu",
    ) -> None:
        self.device = resolve_device(device, "device")  # the argument of analyze.run, not train.device
        self.model, self.cfg, payload = load_checkpoint(checkpoint, str(self.device))
        self.max_len = payload["max_len"]
        self.split = checkpoint_split(self.cfg, data_dir)
        # every test user, in evaluation order
        self.users, self.end, self.targets = self.split.targets("test")
        if not len(self.users):
            raise ModsarError(f"{checkpoint}: dataset '{self.cfg.dataset}' has no test users to analyse")
        self.attention_rows = np.sort(np.random.default_rng(0).permutation(len(self.users))[:attention_users])
        self.inputs = eval_inputs(self.split, self.users, self.end, self.cfg.task, self.max_len)
        self.user_ids = torch.from_numpy(self.users + 1)
        self.history = self.inputs[:, :-1] if self.cfg.task.masked else self.inputs  # without [MASK]
        self.lengths = (self.history > 0).sum(1).numpy()

    def batches(self, size: int = 256):
        for lo in range(0, len(self.users), size):
            yield slice(lo, lo + size)

    def batch(self, inputs: torch.Tensor, rows) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of `inputs` without all-padding columns, and their user ids, on the probe's device."""
        return trim_left_padding(inputs[rows]).to(self.device), self.user_ids[rows].to(self.device)

    @torch.no_grad()
    def final_scores(self, inputs: torch.Tensor, sl: slice) -> torch.Tensor:
        """Scores for top-k reads; NaN becomes -inf, as in the evaluator (topk would put NaN first)."""
        return model_scorer(self.model)(*self.batch(inputs, sl)).float().nan_to_num(nan=float("-inf"))

    def evaluate(self, scorer, which: str = "test", in_order: bool = False) -> dict[str, float]:
        """Test metrics at the checkpoint's cut-offs and at 10, which the diagnostics report (the papers' @10)
        whatever eval.ks the model was trained with."""
        cfg = copy.deepcopy(self.cfg)
        cfg.eval.ks = sorted({*cfg.eval.ks, 10})
        return Evaluator.of(self.split, cfg, self.max_len, self.device, 256, in_order)(scorer, which)

    def metrics(self, inputs: torch.Tensor | None = None) -> dict[str, float]:
        """HR/NDCG etc. on test, exactly as `evaluate` computes them, optionally on perturbed inputs."""
        if inputs is None:
            return self.evaluate(model_scorer(self.model))
        return self.evaluate(_FixedInputs(self, inputs), in_order=True)

    def heatmap_row(self, window: int) -> int:
        """The displayed user: first of a seeded permutation with >= `window` history items (else the
        longest); models trained on one dataset get the same user."""
        order = np.random.default_rng(0).permutation(len(self.users))
        long_enough = order[self.lengths[order] >= window]
        return int(long_enough[0]) if len(long_enough) else int(np.argmax(self.lengths))


class _FixedInputs:
    """A scorer that replaces the evaluator's inputs by perturbed ones; `evaluate` walks the test users in
    the same order as the probe, batch after batch."""

    def __init__(self, probe: Probe, inputs: torch.Tensor) -> None:
        self.probe, self.inputs, self.offset = probe, inputs, 0

    def __call__(self, _inputs: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        rows = slice(self.offset, self.offset + len(users))
        self.offset += len(users)
        assert torch.equal(users.cpu(), self.probe.user_ids[rows]), "evaluation order changed"
        return model_scorer(self.probe.model)(*self.probe.batch(self.inputs, rows))


@torch.no_grad()
def attention_windows(probe: Probe, rows: np.ndarray, window: int = 20):
    """Yield (row, layer, W x W head-averaged window) for the given test-user rows."""
    for lo in range(0, len(rows), 256):
        chunk = rows[lo : lo + 256]
        inputs, users = probe.batch(probe.inputs, chunk)
        _, maps = probe.model(inputs, users, need_weights=True)
        real = (inputs > 0).sum(1).cpu().numpy()
        # a user token: the item-to-item block is the window
        prefix = getattr(probe.model, "prefix_tokens", 0)
        for layer, probs in enumerate(maps):
            mean = probs[..., prefix:, prefix:].float().mean(1).cpu().numpy()  # head average
            for b, row in enumerate(chunk):
                yield int(row), layer, attention_window(mean[b], int(real[b]), window)


def attention_stats(probe: Probe, window: int = 20, sigma: float = 0.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (user, layer): S, k under each rank rule, effective rank; and the mean sorted spectrum per
    layer."""
    rules = ["modsar_eq8", "gd_unknown_sigma"] + (["gd_known_sigma"] if sigma > 0 else [])
    rows, spectra = [], dict[int, list[np.ndarray]]()
    for row, layer, w in attention_windows(probe, probe.attention_rows, window):
        entry = {"row": row, "layer": layer, "sparsity": sparsity(w)}
        for rule in rules:
            entry[f"rank {rule}"] = hard_threshold_rank(w, sigma, rule, seed=row)[0]
        s = np.linalg.svd(w, compute_uv=False)  # the spectrum of A itself, without the sigma noise
        entry["effective_rank"] = effective_rank(s) if s[0] > 0 else math.nan
        rows.append(entry)
        spectra.setdefault(layer, []).append(s)
    mean_spectra = pd.DataFrame(
        [
            {"layer": layer, "index": i, "mean singular value": v}
            for layer, ss in spectra.items()
            for i, v in enumerate(np.mean(ss, axis=0))
        ]
    )
    return pd.DataFrame(rows), mean_spectra


def heatmap(probe: Probe, window: int = 20, sigma: float = 0.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The displayed user's windows (layer, query, key, value) and spectra (layer, index, s, tau)."""
    row = probe.heatmap_row(window)
    cells, spectrum = [], []
    for _, layer, w in attention_windows(probe, np.array([row]), window):
        q, k = np.indices(w.shape)
        cells.append(pd.DataFrame({"layer": layer, "query": q.ravel(), "key": k.ravel(), "value": w.ravel()}))
        rank, tau, _ = hard_threshold_rank(w, sigma, "modsar_eq8", seed=row)
        s = np.linalg.svd(w, compute_uv=False)
        spectrum.append(
            pd.DataFrame(
                {
                    "layer": layer,
                    "index": np.arange(len(s)),
                    "singular value": s,
                    "tau": tau,
                    "rank": rank,
                    "sparsity": sparsity(w),
                }
            )
        )
    user = int(probe.users[row] + 1)
    maps, spectra = pd.concat(cells, ignore_index=True), pd.concat(spectrum, ignore_index=True)
    maps["user"] = spectra["user"] = user
    return maps, spectra


def hrli(probe: Probe, ks=(1, 10), filtered: bool = True) -> dict[str, float]:
    """HRLI@k and HRL2I@k, unfiltered and (optionally) with seen items removed except the probed one."""
    probes = {
        "hrli": probe.history[:, -1].numpy(),
        "hrl2i": np.where(probe.lengths >= 2, probe.history[:, -2].numpy(), -1),
    }
    out: dict[str, list] = {}

    for sl in probe.batches():
        scores = probe.final_scores(probe.inputs, sl)
        # a catalogue under k items: the whole ranking (every item is a hit)
        depth = min(max(ks), scores.shape[1])
        top = (scores.topk(depth, dim=1).indices + 1).cpu().numpy()
        for name, items in probes.items():
            for k in ks:
                out.setdefault(f"{name}@{k}", []).append(last_item_hit(top, items[sl], k))
        if not filtered:
            continue
        hist_rows, hist_items = history_index(probe.split, probe.users[sl], probe.end[sl])
        seen = torch.zeros_like(scores, dtype=torch.bool)
        seen[
            torch.from_numpy(hist_rows).to(seen.device), torch.from_numpy(hist_items - 1).to(seen.device)
        ] = True
        for name, items in probes.items():
            keep = torch.from_numpy(np.maximum(items[sl], 1) - 1).to(scores.device)
            exempt = seen.scatter(1, keep[:, None], False)  # the probed item stays rankable
            top = (scores.masked_fill(exempt, float("-inf")).topk(depth, dim=1).indices + 1).cpu().numpy()
            for k in ks:
                out.setdefault(f"{name}@{k} filtered", []).append(last_item_hit(top, items[sl], k))
    result = {key: float(np.nanmean(np.concatenate(v))) for key, v in out.items()}
    result["hrl2i_n"] = int((probes["hrl2i"] >= 0).sum())
    return result


def shuffled(probe: Probe, partial: bool, seed: int = 0) -> torch.Tensor:
    """Permute each row's real history items (vectorised); partial keeps the last history item in place."""
    hist = probe.history.clone()
    keys = torch.from_numpy(np.random.default_rng(seed).random(hist.shape))
    keys[hist == 0] = -1.0  # padding stays on the left
    if partial:
        keys[:, -1] = 2.0  # the most recent item stays last
    order = keys.argsort(dim=1)
    out = hist.gather(1, order)
    too_short = torch.from_numpy(probe.lengths < (3 if partial else 2))
    out[too_short] = hist[too_short]
    if probe.cfg.task.masked:  # the appended [MASK] stays last
        out = torch.cat([out, probe.inputs[:, -1:]], dim=1)
    return out


POSITIONS = {"L": 0, "L-1": 1, "L-2": 2}


def mixing_ratios(probe: Probe, alpha: float = 1.0, detail: bool = False) -> dict[str, float]:
    """Mean Attn / +Res / +LN mixing ratio over real positions of all users and layers; with `detail`, also
    without each sequence's first position, and per layer at positions L, L-1, L-2 (module docstring)."""
    model, sites = probe.model, probe.model.skip_sites()
    if sites is None:
        raise ModsarError(
            f"mixing ratios are not defined for {model.describe()}: its attention skips are unknown"
        )
    kinds = ["attn", "res"] + (["ln"] if all(site.post_norm is not None for site in sites) else [])
    pooled: dict[str, list] = {k: [] for k in kinds}
    no_first: dict[str, list] = {k: [] for k in kinds}
    at: dict[tuple, list] = {}
    captured: list = []  # (site, skip input x) in call order: one per layer
    prefix = getattr(model, "prefix_tokens", 0)

    def keep(site):
        return lambda module, args, kwargs: captured.append((site, skip_input(args, kwargs)))

    hooks = [site.container.register_forward_pre_hook(keep(site), with_kwargs=True) for site in sites]
    try:
        with torch.no_grad(), residual_scale(model, alpha):
            for sl in probe.batches(64):
                captured.clear()
                inputs, users = probe.batch(probe.inputs, sl)
                _, maps = model(inputs, users, need_weights=True)
                real = F.pad(inputs > 0, (prefix, 0))  # a user token is a key, never a position measured
                first = real & ~torch.cat([real[:, :1] & False, real[:, :-1]], dim=1)  # each row's first item
                count = real.sum(1)
                for layer, ((site, x), probs) in enumerate(zip(captured, maps, strict=True)):
                    x = x.transpose(0, 1) if site.seq_first else x
                    for kind, c in contributions(site, x, probs, alpha).items():
                        r = ratio_per_position(c)
                        pooled[kind].append(r[real])
                        no_first[kind].append(r[real & ~first])
                        for name, o in POSITIONS.items():
                            at.setdefault((kind, layer, name), []).append(r[:, -1 - o][count > o])
    finally:
        for h in hooks:
            h.remove()
    out = {f"mixing_{k}": float(torch.cat(v).mean()) for k, v in pooled.items()}
    if detail:
        out |= {f"mixing_{k} without position 1": float(torch.cat(v).mean()) for k, v in no_first.items()}
        out |= {
            f"mixing_{k} layer {layer} at {name}": float(torch.cat(v).mean())
            for (k, layer, name), v in at.items()
        }
    return out


def contributions(
    site: SkipSite, x: torch.Tensor, probs: torch.Tensor, alpha: float
) -> dict[str, torch.Tensor]:
    """c_ij (B, T, T, d) for Attn, +Res and (post-norm) +LN, from the skip input x (B, T, d) and the layer's
    attention probabilities (B, H, T, T)."""
    B, T, d = x.shape
    H = probs.shape[1]
    v = site.values(x).view(B, T, H, d // H)  # heads laid out as every supported layer splits them
    w_o = site.w_o().reshape(H, d // H, d)  # head h: its rows of W_O
    f = torch.einsum("bjhk,hkd->bhjd", v, w_o)  # f^h(x_j), without b_O
    attn = torch.einsum("bhij,bhjd->bijd", probs.to(f.dtype), f)
    res = attn.clone()
    idx = torch.arange(T, device=x.device)
    res[:, idx, idx] += alpha * skip_vector(site, x)
    out = {"attn": attn, "res": res}
    if site.post_norm is not None:  # +LN: z_i = alpha x_i + Attn(x)_i (with b_O), then LN
        b_o = site.b_o()
        z = res.sum(2) + (b_o if b_o is not None else 0.0)
        s = torch.sqrt(z.var(-1, unbiased=False) + site.post_norm.eps)
        out["ln"] = site.post_norm.weight * (res - res.mean(-1, keepdim=True)) / s[:, :, None, None]
    return out


def ratio_per_position(c: torch.Tensor) -> torch.Tensor:
    """r_i = ||sum_{j!=i} c_ij|| / (||sum_{j!=i} c_ij|| + ||c_ii|| + 1e-12), for every (b, i)."""
    T = c.shape[1]
    idx = torch.arange(T, device=c.device)
    own = c[:, idx, idx]
    others = c.sum(2) - own
    n_others, n_own = others.norm(dim=-1), own.norm(dim=-1)
    return n_others / (n_others + n_own + 1e-12)


def hits_at(probe: Probe, which: str, alpha: float = 1.0, offset: int = 0, k: int = 10) -> np.ndarray:
    """hit@k per evaluable user of `which`, ranking with the hidden state `offset` positions before the final
    one (same target, same seen-item policy as HR); users with too short a history count as misses."""
    users, end, _ = probe.split.targets(which)
    window = np.minimum(end - probe.split.starts[users], probe.max_len)
    with residual_scale(probe.model, alpha) if alpha != 1.0 else contextlib.nullcontext():
        ranks = target_ranks(
            model_scorer(probe.model, offset),
            probe.split,
            which,
            probe.cfg.eval,
            probe.cfg.task,
            probe.max_len,
            256,
            probe.device,
        ).numpy()
    return (ranks < k) & (window > offset)


def recoverable_set(probe: Probe, which: str) -> tuple[np.ndarray, np.ndarray]:
    """(miss@10 at L, hit@10 at L-1, L-2 or L-3) per user at alpha = 1: R is where both hold
    (docs/diagnostics.md#recovery)."""
    miss = ~hits_at(probe, which, 1.0)
    return miss, hits_at(probe, which, 1.0, 1) | hits_at(probe, which, 1.0, 2) | hits_at(probe, which, 1.0, 3)


def recovery_curve(
    probe: Probe, which: str, alphas, sets: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[dict[float, float], dict[float, float]]:
    """(Rec(alpha), HR@10(alpha)) with R fixed at alpha = 1 (docs/diagnostics.md#recovery)."""
    miss, earlier = sets if sets is not None else recoverable_set(probe, which)
    rec, hr = {}, {}
    for alpha in alphas:
        final = hits_at(probe, which, alpha)
        rec[alpha], hr[alpha] = recovery_rate(miss, earlier, final), float(final.mean())
    return rec, hr


def select_alpha(rec: dict[float, float], hr: dict[float, float], epsilon: float = 0.01) -> float:
    """The alpha with the best recovery among those keeping HR@10 >= (1 - epsilon) * HR@10(alpha = 1);
    ties go to the smallest alpha; nothing feasible -> 1.0 (docs/diagnostics.md#recovery)."""
    feasible = [a for a in sorted(rec) if hr[a] >= (1 - epsilon) * hr[1.0]]
    if not feasible:
        return 1.0
    best = max(rec[a] for a in feasible)
    return next(a for a in feasible if rec[a] == best)


@dataclass
class Analysis:
    """Everything `modsar analyze` found for one checkpoint."""

    label: str  # unique among the analyses shown together ("SASRec (toys)")
    dataset: str
    task: Task
    table: pd.DataFrame  # (diagnostic, quantity, layer, alpha, value, n) + model facts
    # displayed user's windows: layer, query, key, value
    maps: pd.DataFrame = field(default_factory=pd.DataFrame)
    spectra: pd.DataFrame = field(default_factory=pd.DataFrame)  # displayed user's + mean singular values
    notes: list[str] = field(default_factory=list)


@dataclass
class _Run:
    """What the diagnostics of one `run` share: the probe, the settings, and the rows they add."""

    probe: Probe
    wanted: set[str]
    alphas: tuple[float, ...]
    window: int
    sigma: float
    scalable: bool = True  # the layers have an attention skip that alpha can scale (recovery needs it)
    rows: list[dict[str, Any]] = field(default_factory=list)
    maps: pd.DataFrame = field(default_factory=pd.DataFrame)
    spectra: pd.DataFrame = field(default_factory=pd.DataFrame)

    def add(
        self,
        diagnostic: str,
        quantity: str,
        value: float,
        layer: str = "all",
        alpha: float = 1.0,
        n: int | None = None,
    ) -> None:
        self.rows.append(
            {
                "diagnostic": diagnostic,
                "quantity": quantity,
                "layer": layer,
                "alpha": alpha,
                "value": float(value),
                "n": len(self.probe.users) if n is None else int(n),
            }
        )


def _sparsity_and_rank(run: _Run) -> None:
    stats, mean_spectra = attention_stats(run.probe, run.window, run.sigma)
    where = f"W={run.window}, zero-padded, head mean, {stats['row'].nunique()} test users"
    columns = {
        "sparsity": {"sparsity": f"S ({where})"},
        "rank": {c: f"k {c[5:]} (sigma={run.sigma:g}; {where})" for c in stats if c.startswith("rank ")}
        | {"effective_rank": f"effective rank ({where})"},
    }
    for diagnostic in [d for d in ("sparsity", "rank") if d in run.wanted]:
        for column, quantity in columns[diagnostic].items():
            for layer, group in stats.groupby("layer"):
                run.add(diagnostic, quantity, group[column].mean(), str(layer), n=group[column].notna().sum())
            run.add(diagnostic, quantity, stats[column].mean(), "all", n=stats[column].notna().sum())
    run.maps, spectra = heatmap(run.probe, run.window, run.sigma)
    run.spectra = spectra.merge(mean_spectra, on=["layer", "index"], how="left")


def _hrli(run: _Run) -> None:
    result = hrli(run.probe)
    for key, value in result.items():
        if key != "hrl2i_n":
            run.add(
                "hrli",
                key,
                value,
                n=int(result["hrl2i_n"]) if key.startswith("hrl2i") else len(run.probe.users),
            )


def _shuffle(run: _Run) -> None:
    base = run.probe.metrics()["ndcg@10"]
    run.add("shuffle", "ndcg@10 original", base)
    for name, partial in (("partial", True), ("full", False)):
        value = run.probe.metrics(shuffled(run.probe, partial))["ndcg@10"]
        run.add("shuffle", f"ndcg@10 {name}", value)
        run.add("shuffle", f"ndcg@10 drop {name}", (base - value) / base if base else math.nan)


def _mixing(run: _Run) -> None:
    for key, value in mixing_ratios(run.probe, detail=True).items():
        layer = key.split(" layer ")[1].split(" ")[0] if " layer " in key else "all"
        run.add("mixing", key.replace(f" layer {layer}", "") if layer != "all" else key, value, layer)


def _residual_scaling(run: _Run) -> None:
    for alpha in run.alphas:
        with residual_scale(run.probe.model, alpha):
            m = run.probe.metrics()
            run.add("residual-scaling", "hr@10", m["recall@10"], alpha=alpha)
            run.add("residual-scaling", "ndcg@10", m["ndcg@10"], alpha=alpha)
            run.add(
                "residual-scaling", "hrli@1", hrli(run.probe, ks=(1,), filtered=False)["hrli@1"], alpha=alpha
            )
        for key, value in mixing_ratios(run.probe, alpha).items():
            run.add("residual-scaling", key, value, alpha=alpha)


class SwappedUsers:
    """A scorer that hands the model another test user's id for every user (a seeded cycle over test
    users)."""

    def __init__(self, probe: Probe, seed: int = 0) -> None:
        ids = probe.user_ids.unique()
        order = ids[torch.from_numpy(np.random.default_rng(seed).permutation(len(ids)))]
        self.other = torch.arange(int(probe.user_ids.max()) + 1)
        self.other[order] = order.roll(-1)
        self.scorer = model_scorer(probe.model)

    def __call__(self, inputs: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        return self.scorer(inputs, self.other.to(users.device)[users])


@torch.no_grad()
def user_token_mass(probe: Probe) -> dict[str, float]:
    """Mean attention probability on the user token (column 0) per layer and pooled, over heads and the real
    item positions of every test user."""
    sums: dict[int, list[torch.Tensor]] = {}
    for sl in probe.batches():
        inputs, users = probe.batch(probe.inputs, sl)
        _, maps = probe.model(inputs, users, need_weights=True)
        real = inputs > 0
        for layer, probs in enumerate(maps):
            sums.setdefault(layer, []).append(probs[:, :, 1:, 0].float().mean(1)[real])
    out = {str(layer): float(torch.cat(v).mean()) for layer, v in sums.items()}
    return out | {"all": float(torch.cat([x for v in sums.values() for x in v]).mean())}


def _user(run: _Run) -> None:
    own = run.probe.metrics()["ndcg@10"]
    swapped = run.probe.evaluate(SwappedUsers(run.probe))["ndcg@10"]
    run.add("user", "ndcg@10 own user", own)
    run.add("user", "ndcg@10 swapped users", swapped)
    run.add("user", "ndcg@10 drop swapped", (own - swapped) / own if own else math.nan)
    if getattr(run.probe.model, "prefix_tokens", 0):
        for layer, value in user_token_mass(run.probe).items():
            run.add("user", "attention mass on the user token", value, layer)


def _nonfinal(run: _Run) -> None:
    final = hits_at(run.probe, "test")
    run.add("nonfinal", "hr@10 at L", float(final.mean()))
    for offset in (1, 2, 3):  # a joint proportion over all test users, not a conditional
        run.add(
            "nonfinal",
            f"miss at L, hit at L-{offset}",
            float((~final & hits_at(run.probe, "test", 1.0, offset)).mean()),
        )


def _recovery(run: _Run) -> None:
    sets = recoverable_set(run.probe, "test")
    run.add(
        "recovery", "share of test users in R (miss at L, hit at L-1..3)", float((sets[0] & sets[1]).mean())
    )
    if not run.scalable:  # R exists for any model; Rec(alpha) needs a skip to scale
        return
    rec_val, hr_val = recovery_curve(run.probe, "valid", run.alphas)
    rec_test, hr_test = recovery_curve(run.probe, "test", run.alphas, sets)
    for alpha in run.alphas:
        run.add("recovery", "recovery rate (test)", rec_test[alpha], alpha=alpha)
        run.add("recovery", "hr@10 (test)", hr_test[alpha], alpha=alpha)
    chosen = select_alpha(rec_val, hr_val) if 1.0 in hr_val else 1.0
    oracle = select_alpha(rec_test, hr_test) if 1.0 in hr_test else 1.0
    # the selection's summary rows sit at alpha = 1 (the baseline); alpha* itself is their value
    run.add("recovery", "alpha* (validation, epsilon=0.01)", chosen)
    run.add("recovery", "delta hr@10 at alpha* (test)", hr_test[chosen] - hr_test.get(1.0, math.nan))
    run.add("recovery", "recovery at alpha* (test)", rec_test[chosen])
    run.add("recovery", "alpha* oracle (test)", oracle)
    for epsilon in (
        EPSILONS if 1.0 in run.alphas else ()
    ):  # validation choice vs test oracle as tolerance grows
        run.add("recovery", f"epsilon={epsilon:g}: alpha* validation", select_alpha(rec_val, hr_val, epsilon))
        run.add("recovery", f"epsilon={epsilon:g}: alpha* oracle", select_alpha(rec_test, hr_test, epsilon))


# Each step computes the diagnostics it names (sparsity and rank share one pass over the attention maps).
STEPS: tuple[tuple[tuple[str, ...], Callable[[_Run], None]], ...] = (
    (("sparsity", "rank"), _sparsity_and_rank),
    (("hrli",), _hrli),
    (("shuffle",), _shuffle),
    (("mixing",), _mixing),
    (("residual-scaling",), _residual_scaling),
    (("nonfinal",), _nonfinal),
    (("recovery",), _recovery),
    (("user",), _user),
)


ATTENTION_ONLY = ("sparsity", "rank", "mixing", "residual-scaling")  # maps, or the attention skip


def paper_labels(analyses: list[Analysis]) -> None:
    """Beside a residual-dominance model, the modular Vanilla-AR and -AE are SASRec and BERT4Rec (in
    place)."""
    if not any(registry.named_by_paper(a.table["backbone"].iloc[0]) for a in analyses if len(a.table)):
        return
    for a in analyses:
        if a.label in ("Vanilla-AR", "Vanilla-AE"):
            a.label = registry.paper_name(a.table["backbone"].iloc[0], a.task)
            for frame in (a.table, a.maps, a.spectra):
                if len(frame):
                    frame["model"] = a.label


def _scalable(probe: Probe) -> bool:
    """Whether the model's layers have an attention skip the residual analyses can decompose and scale."""
    entry = registry.lookup(probe.cfg.model.backbone)
    return entry.has_skip_sites(probe.cfg.model.backbone) and probe.model.skip_sites() is not None


def _supported(
    probe: Probe, label: str, diagnostics: list[str], scalable: bool
) -> tuple[list[str], list[str]]:
    """The diagnostics this backbone defines, and a note for each group it does not."""
    entry, notes = registry.lookup(probe.cfg.model.backbone), []
    if "user" in diagnostics and probe.cfg.model.user_fusion == "none":
        notes.append(f"{label}: user not defined: the model has no user (model.user_fusion=none)")
        diagnostics = [d for d in diagnostics if d != "user"]
    skipped = [d for d in diagnostics if d in ATTENTION_ONLY]
    if skipped and entry.recurrent:
        notes.append(
            f"{label}: {', '.join(skipped)} not defined for recurrent models ({probe.cfg.model.backbone} "
            "has no attention); last-item reliance, shuffles and non-final predictions are"
        )
        diagnostics = [d for d in diagnostics if d not in skipped]
    skipped = [d for d in diagnostics if d in ("sparsity", "rank", "mixing")]
    if skipped and not entry.attention_maps:
        notes.append(
            f"{label}: skipped {', '.join(skipped)}: {probe.cfg.model.backbone} has no attention maps"
        )
        diagnostics = [d for d in diagnostics if d not in skipped]
    skipped = [d for d in diagnostics if d in ("mixing", "residual-scaling")]
    if skipped and not scalable:
        notes.append(
            f"{label}: skipped {', '.join(skipped)}: they need the layers' attention skip, known for the "
            f"backbones {', '.join(registry.skip_site_backbones())}; not for {probe.cfg.model.backbone}"
        )
        diagnostics = [d for d in diagnostics if d not in skipped]
    if "recovery" in diagnostics and not scalable:
        has = "no attention skip" if entry.recurrent else "no attention skip ModSAR knows"
        notes.append(
            f"{label}: recovery gives only its set R (misses at L that hit at L-1..3): Rec(alpha) scales "
            f"the layers' attention skip, and {probe.cfg.model.backbone} has {has}"
        )
    return diagnostics, notes


def refuse_timed(checkpoint: str | Path, time_bias: str) -> None:
    """The probes move, drop and shuffle items, and their times would have to follow: not built yet."""
    if time_bias != "none":
        raise ModsarError(
            f"{checkpoint}: modsar analyze does not yet carry timestamps through its perturbed inputs, "
            f"so it refuses a model.time_bias={time_bias} checkpoint; its accuracy is in the run's rows "
            "(modsar results), its rollouts in modsar generate"
        )


def stored_time_bias(checkpoint: str | Path) -> str:
    """A checkpoint's model.time_bias, read from its stored config without building the model."""
    from modsar.config import Config
    from modsar.training.checkpoints import load_checkpoint_payload

    return Config.from_stored(
        load_checkpoint_payload(checkpoint)["config"], where=str(checkpoint)
    ).model.time_bias


def run(
    checkpoint: str | Path,
    diagnostics: list[str],
    data_dir: str | None = None,
    attention_users: int = 2000,
    alphas=ALPHAS,
    window: int = 20,
    sigma: float = 0.0,
    device: str = "cpu",
    progress: bool = False,
) -> Analysis:
    """Run the chosen diagnostics on one checkpoint; quantities a backbone does not define are noted."""
    unknown = sorted(set(diagnostics) - set(DIAGNOSTICS))
    if unknown:
        raise ModsarError(f"unknown diagnostic '{unknown[0]}'; choose from {', '.join(DIAGNOSTICS)}")
    probe = Probe(checkpoint, data_dir, attention_users, device)
    refuse_timed(checkpoint, probe.cfg.model.time_bias)
    if window > probe.max_len and set(diagnostics) & {"sparsity", "rank"}:  # W x W matrices per user
        raise ModsarError(
            f"--window {window} is longer than {checkpoint}'s attention maps ({probe.max_len} "
            f"positions: its max_len); use --window {probe.max_len} or less"
        )
    label = model_label(probe.cfg)
    scalable = _scalable(probe)
    diagnostics, notes = _supported(probe, label, diagnostics, scalable)
    state = _Run(probe, set(diagnostics), tuple(alphas), window, sigma, scalable)
    steps = [(names, step) for names, step in STEPS if state.wanted & set(names)]
    with tqdm(
        total=len(state.wanted),
        desc=f"analyze {label}",
        unit="diagnostic",
        disable=not progress,
        dynamic_ncols=True,
    ) as bar:
        for names, step in steps:
            bar.set_postfix_str(", ".join(n for n in names if n in state.wanted))
            step(state)
            bar.update(len(state.wanted & set(names)))
    table = pd.DataFrame(state.rows, columns=["diagnostic", "quantity", "layer", "alpha", "value", "n"])
    table["convention"] = table["diagnostic"].map(CONVENTIONS)
    sites = probe.model.skip_sites()
    norm = ("post" if sites[0].post_norm is not None else "pre") if sites else probe.cfg.model.norm
    norm = probe.cfg.model.norm if sites and sites[0].skip is not None else norm  # sasrec | normed_skip
    table["model"], table["task"], table["backbone"], table["norm"] = (
        label,
        probe.cfg.task,
        probe.cfg.model.backbone,
        norm,
    )
    table["checkpoint"], table["dataset"] = str(checkpoint), probe.cfg.dataset
    for frame in (state.maps, state.spectra):
        if len(frame):
            frame["model"] = label
    return Analysis(label, probe.cfg.dataset, probe.cfg.task, table, state.maps, state.spectra, notes)
