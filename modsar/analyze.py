"""`modsar analyze`: the seed papers' diagnostics on a trained modular checkpoint, over test users.

Conventions (stated in every output row):
- Attention: post-softmax probabilities, averaged over heads, per layer; the last W = 20 positions, padded
  rows and columns zero (N = W^2); S and k per (user, layer), then the mean (ModSAR Tables 2-3).
- HRLI@k / HRL2I@k: the last / second-to-last history item among the top k of the final-position scores,
  unfiltered; sequences with one history item are left out of HRL2I (n reported).
- Shuffle: inference-time permutation of the history (partial: all but the last item; full: all), AE keeps
  its trailing mask; NDCG@10 under the checkpoint's own evaluation settings.
- Residual scaling: z = alpha * x + Attn(...) on the attention sub-layer's skip in every layer, at inference.
  Pre-norm: x <- alpha * x + Attn(LN(x)); post-norm: x <- LN(alpha * x + Attn(x)).
- Mixing ratio (Kobayashi): contributions c_ij = sum_h a^h_ij f^h(x_j) with f^h(x) = (x W_V^h + b_V^h) W_O^h
  (b_O excluded); +Res adds alpha * x_i to c_ii; +LN (post-norm only, where a LayerNorm follows the sum)
  centres and scales by the real pre-LN vector's std. Pooled over real positions of all users and layers.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from modsar.data.batches import eval_inputs
from modsar.data.split import LeaveOneOut
from modsar.data.store import load_dataset
from modsar.diagnostics import attention_window, hard_threshold_rank, last_item_hit, recovery_rate, sparsity
from modsar.errors import ModsarError
from modsar.evaluate import evaluate, model_scorer, target_ranks, trim_left_padding
from modsar.model.modular import ModularSAR
from modsar.train import load_checkpoint

DIAGNOSTICS = ("sparsity", "rank", "hrli", "shuffle", "mixing", "residual-scaling", "nonfinal", "recovery")
ALPHAS = tuple(round(a / 10, 1) for a in range(11))


@contextlib.contextmanager
def residual_scale(model: ModularSAR, alpha: float):
    previous = [b.residual_alpha for b in model.blocks]
    for block in model.blocks:
        block.residual_alpha = alpha
    try:
        yield
    finally:
        for block, value in zip(model.blocks, previous, strict=True):
            block.residual_alpha = value


class Probe:
    """A checkpoint and its test users, ready for diagnostics (inputs as the evaluation builds them)."""

    def __init__(self, checkpoint: str | Path, data_dir: str | None = None, attention_users: int = 2000) -> None:
        self.model, self.cfg, payload = load_checkpoint(checkpoint)
        if not isinstance(self.model, ModularSAR):
            raise ModsarError(f"{checkpoint}: diagnostics need the modular backbone (got {self.cfg.model.backbone})")
        self.max_len = payload["max_len"]
        data = load_dataset(self.cfg.dataset, data_dir)
        self.split = LeaveOneOut.from_log(data.user, data.item, data.num_users, data.num_items)
        self.users, self.end, self.targets = self.split.targets("test")  # every test user, in evaluation order
        self.attention_rows = np.sort(np.random.default_rng(0).permutation(len(self.users))[:attention_users])
        self.inputs = eval_inputs(self.split, self.users, self.end, self.cfg.task, self.max_len)
        self.user_ids = torch.from_numpy(self.users + 1)
        self.history = self.inputs[:, :-1] if self.cfg.task == "ae" else self.inputs  # without the AE mask
        self.lengths = (self.history > 0).sum(1).numpy()

    def batches(self, size: int = 256):
        for lo in range(0, len(self.users), size):
            yield slice(lo, lo + size)

    @torch.no_grad()
    def final_scores(self, inputs: torch.Tensor, sl: slice) -> torch.Tensor:
        x = trim_left_padding(inputs[sl])
        return model_scorer(self.model)(x, self.user_ids[sl])

    def metrics(self, inputs: torch.Tensor | None = None) -> dict[str, float]:
        """HR/NDCG etc. on test, exactly as `evaluate` computes them, optionally on perturbed inputs."""
        if inputs is None:
            return evaluate(model_scorer(self.model), self.split, "test", self.cfg.eval, self.cfg.task, self.max_len,
                            256, torch.device("cpu"))
        return evaluate(_FixedInputs(self, inputs), self.split, "test", self.cfg.eval, self.cfg.task,
                        self.max_len, 256, torch.device("cpu"))


class _FixedInputs:
    """A scorer that replaces the evaluator's inputs by perturbed ones; `evaluate` walks the test users in
    the same order as the probe, batch after batch."""

    def __init__(self, probe: Probe, inputs: torch.Tensor) -> None:
        self.probe, self.inputs, self.offset = probe, inputs, 0

    def __call__(self, _inputs: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        rows = slice(self.offset, self.offset + len(users))
        self.offset += len(users)
        assert torch.equal(users, self.probe.user_ids[rows]), "evaluation order changed"
        return model_scorer(self.probe.model)(trim_left_padding(self.inputs[rows]), users)


def attention_stats(probe: Probe, window: int = 20, sigma: float = 0.0, rule: str = "modsar_eq8") -> pd.DataFrame:
    rows = []
    inputs, user_ids = probe.inputs[probe.attention_rows], probe.user_ids[probe.attention_rows]
    with torch.no_grad():
        for lo in range(0, len(inputs), 256):
            batch = inputs[lo:lo + 256]
            _, maps = probe.model(batch, user_ids[lo:lo + 256], need_weights=True)
            real = (batch > 0).sum(1).numpy()
            for layer, probs in enumerate(maps):
                mean = probs.mean(1).numpy()  # head average
                for b in range(mean.shape[0]):
                    w = attention_window(mean[b], int(real[b]), window)
                    k, tau, s = hard_threshold_rank(w, sigma, rule)
                    rows.append({"layer": layer, "sparsity": sparsity(w), "rank": k, "tau": tau,
                                 "top_singular_value": float(s[0])})
    return pd.DataFrame(rows)


def hrli(probe: Probe, ks=(1, 10)) -> dict[str, float]:
    last = probe.history[:, -1].numpy()
    second = np.where(probe.lengths >= 2, probe.history[:, -2].numpy(), -1)
    out = {}
    for sl in probe.batches():
        top = (probe.final_scores(probe.inputs, sl).topk(max(ks), dim=1).indices + 1).numpy()
        for k in ks:
            out.setdefault(f"hrli@{k}", []).append(last_item_hit(top, last[sl], k))
            out.setdefault(f"hrl2i@{k}", []).append(last_item_hit(top, second[sl], k))
    result = {key: float(np.nanmean(np.concatenate(v))) for key, v in out.items()}
    result["hrl2i_n"] = int((second >= 0).sum())
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
    if probe.cfg.task == "ae":
        out = torch.cat([out, probe.inputs[:, -1:]], dim=1)
    return out


def mixing_ratios(probe: Probe, alpha: float = 1.0) -> dict[str, float]:
    """Mean Attn / +Res / +LN mixing ratio over real positions of all users and layers."""
    model = probe.model
    kinds = ["attn", "res"] + ([] if model.blocks[0].pre_norm else ["ln"])
    totals = {k: [] for k in kinds}
    captured: list = []
    hooks = [b.register_forward_hook(lambda mod, args, out: captured.append((args[0], args[1], out[1])))
             for b in model.blocks]
    try:
        with torch.no_grad(), residual_scale(model, alpha):
            for sl in probe.batches(64):
                captured.clear()
                inputs = trim_left_padding(probe.inputs[sl])
                model(inputs, probe.user_ids[sl], need_weights=True)
                real = inputs > 0
                for block, (x, _mask, probs) in zip(model.blocks, captured, strict=True):
                    for kind, c in contributions(block, x, probs, alpha).items():
                        totals[kind].append(ratio_per_position(c)[real])
    finally:
        for h in hooks:
            h.remove()
    return {f"mixing_{k}": float(torch.cat(v).mean()) for k, v in totals.items()}


def contributions(block, x: torch.Tensor, probs: torch.Tensor, alpha: float) -> dict[str, torch.Tensor]:
    """c_ij (B, T, T, d) for Attn, +Res and (post-norm) +LN."""
    B, T, d = x.shape
    H = block.attn.heads
    inp = block.norm1(x) if block.pre_norm else x
    w_qkv, b_qkv = block.attn.qkv.weight, block.attn.qkv.bias
    v = inp @ w_qkv[2 * d:].T + b_qkv[2 * d:]  # (B, T, d), heads laid out as in SelfAttention
    v = v.view(B, T, H, d // H)
    w_o = block.attn.proj.weight.T.view(H, d // H, d)  # head h: rows of W_O for its slice
    f = torch.einsum("bjhk,hkd->bhjd", v, w_o)  # f^h(x_j), without b_O
    attn = torch.einsum("bhij,bhjd->bijd", probs, f)
    res = attn.clone()
    idx = torch.arange(T)
    res[:, idx, idx] += alpha * x
    out = {"attn": attn, "res": res}
    if not block.pre_norm:  # +LN: z_i = alpha x_i + Attn(x)_i (with b_O), then LN
        z = res.sum(2) + block.attn.proj.bias
        s = torch.sqrt(z.var(-1, unbiased=False) + block.norm1.eps)
        out["ln"] = block.norm1.weight * (res - res.mean(-1, keepdim=True)) / s[:, :, None, None]
    return out


def ratio_per_position(c: torch.Tensor) -> torch.Tensor:
    """r_i = ||sum_{j!=i} c_ij|| / (||sum_{j!=i} c_ij|| + ||c_ii|| + 1e-12), for every (b, i)."""
    T = c.shape[1]
    own = c[:, torch.arange(T), torch.arange(T)]
    others = c.sum(2) - own
    n_others, n_own = others.norm(dim=-1), own.norm(dim=-1)
    return n_others / (n_others + n_own + 1e-12)


def hits_at(probe: Probe, which: str, alpha: float = 1.0, offset: int = 0, k: int = 10) -> np.ndarray:
    """hit@k per evaluable user of `which`, ranking with the hidden state `offset` positions before the final
    one (same target, same seen-item policy as HR); users with too short a history count as misses."""
    users, end, _ = probe.split.targets(which)
    window = np.minimum(end - probe.split.starts[users], probe.max_len)
    with residual_scale(probe.model, alpha):
        ranks = target_ranks(model_scorer(probe.model, offset), probe.split, which, probe.cfg.eval, probe.cfg.task,
                             probe.max_len, 256, torch.device("cpu")).numpy()
    return (ranks < k) & (window > offset)


def recovery_curve(probe: Probe, which: str, alphas) -> tuple[dict[float, float], dict[float, float]]:
    """(Rec(alpha), HR@10(alpha)) with R fixed at alpha = 1 (diagnostics.md §2.7)."""
    miss = ~hits_at(probe, which, 1.0)
    earlier = hits_at(probe, which, 1.0, 1) | hits_at(probe, which, 1.0, 2) | hits_at(probe, which, 1.0, 3)
    rec, hr = {}, {}
    for alpha in alphas:
        final = hits_at(probe, which, alpha)
        rec[alpha], hr[alpha] = recovery_rate(miss, earlier, final), float(final.mean())
    return rec, hr


def select_alpha(rec: dict[float, float], hr: dict[float, float], epsilon: float = 0.01) -> float:
    """The alpha with the best recovery among those keeping HR@10 >= (1 - epsilon) * HR@10(alpha = 1);
    ties go to the smallest alpha; nothing feasible -> 1.0 (diagnostics.md §2.8)."""
    feasible = [a for a in sorted(rec) if hr[a] >= (1 - epsilon) * hr[1.0]]
    if not feasible:
        return 1.0
    best = max(rec[a] for a in feasible)
    return next(a for a in feasible if rec[a] == best)


def run(checkpoint: str | Path, diagnostics: list[str], data_dir: str | None = None, attention_users: int = 2000,
        alphas=ALPHAS) -> pd.DataFrame:
    """One long table: (diagnostic, quantity, layer, alpha, value, n) rows plus the conventions used."""
    unknown = sorted(set(diagnostics) - set(DIAGNOSTICS))
    if unknown:
        raise ModsarError(f"unknown diagnostic '{unknown[0]}'; choose from {', '.join(DIAGNOSTICS)}")
    probe = Probe(checkpoint, data_dir, attention_users)
    rows: list[dict] = []

    def add(diagnostic: str, quantity: str, value: float, layer: str = "all", alpha: float = 1.0,
            n: int | None = None) -> None:
        rows.append({"diagnostic": diagnostic, "quantity": quantity, "layer": layer, "alpha": alpha,
                     "value": value, "n": len(probe.users) if n is None else n})

    if {"sparsity", "rank"} & set(diagnostics):
        stats = attention_stats(probe)
        names = {"sparsity": "S (W=20, zero-padded, head mean)", "rank": "k (modsar_eq8, sigma=0)"}
        for column in [c for c in ("sparsity", "rank") if c in diagnostics]:
            for layer, group in stats.groupby("layer"):
                add(column, names[column], float(group[column].mean()), str(layer), n=len(group))
            add(column, names[column], float(stats[column].mean()), "all", n=len(stats))
    if "hrli" in diagnostics:
        result = hrli(probe)
        for key, value in result.items():
            if key != "hrl2i_n":
                add("hrli", key, value, n=result["hrl2i_n"] if key.startswith("hrl2i") else len(probe.users))
    if "shuffle" in diagnostics:
        base = probe.metrics()["ndcg@10"]
        add("shuffle", "ndcg@10 original", base)
        for name, partial in (("partial", True), ("full", False)):
            add("shuffle", f"ndcg@10 {name}", probe.metrics(shuffled(probe, partial))["ndcg@10"])
    if "mixing" in diagnostics:
        for key, value in mixing_ratios(probe).items():
            add("mixing", key, value)
    if "residual-scaling" in diagnostics:
        for alpha in alphas:
            with residual_scale(probe.model, alpha):
                m = probe.metrics()
                add("residual-scaling", "hr@10", m["recall@10"], alpha=alpha)
                add("residual-scaling", "ndcg@10", m["ndcg@10"], alpha=alpha)
                add("residual-scaling", "hrli@1", hrli(probe, ks=(1,))["hrli@1"], alpha=alpha)
            for key, value in mixing_ratios(probe, alpha).items():
                add("residual-scaling", key, value, alpha=alpha)
    if "nonfinal" in diagnostics:
        final = hits_at(probe, "test")
        add("nonfinal", "hr@10 at L", float(final.mean()))
        for offset in (1, 2, 3):  # a joint proportion over all test users, not a conditional
            add("nonfinal", f"miss at L, hit at L-{offset}", float((~final & hits_at(probe, "test", 1.0, offset)).mean()))
    if "recovery" in diagnostics:
        rec_val, hr_val = recovery_curve(probe, "valid", alphas)
        rec_test, hr_test = recovery_curve(probe, "test", alphas)
        for alpha in alphas:
            add("recovery", "recovery rate (test)", rec_test[alpha], alpha=alpha)
            add("recovery", "hr@10 (test)", hr_test[alpha], alpha=alpha)
        chosen = select_alpha(rec_val, hr_val) if 1.0 in hr_val else 1.0
        oracle = select_alpha(rec_test, hr_test) if 1.0 in hr_test else 1.0
        add("recovery", "alpha* (validation, epsilon=0.01)", chosen, alpha=chosen)
        add("recovery", "delta hr@10 at alpha* (test)", hr_test[chosen] - hr_test.get(1.0, math.nan), alpha=chosen)
        add("recovery", "recovery at alpha* (test)", rec_test[chosen], alpha=chosen)
        add("recovery", "alpha* oracle (test)", oracle, alpha=oracle)
    table = pd.DataFrame(rows)
    table["task"], table["norm"] = probe.cfg.task, "pre" if probe.model.blocks[0].pre_norm else "post"
    table["checkpoint"], table["dataset"] = str(checkpoint), probe.cfg.dataset
    return table


def plot(table: pd.DataFrame, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    sweep = table[table["diagnostic"] == "residual-scaling"]
    if len(sweep):
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for quantity, group in sweep.groupby("quantity"):
            ax.plot(group["alpha"], group["value"], marker="o", label=quantity)
        ax.set_xlabel("alpha (attention skip scale)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / "residual_scaling.png"
        tmp = path.with_name(".residual_scaling.tmp.png")
        fig.savefig(tmp, dpi=120)
        plt.close(fig)
        tmp.replace(path)
        written.append(path)
    return written

