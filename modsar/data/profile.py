"""`modsar data profile`: the entropy structure of a log, measured before any model (the data-first paper,
§1).

A corpus is the chronological item sequences of a prepared dataset (one per user, or any integer-id corpus
imported as sessions: one document per line). Every measure is vectorised over the whole corpus and seeded:
- rank-frequency: the Zipf exponent s of c_r ~ r^-s by OLS of log c_r on log r over the head (ranks 1 to 10%
  of the distinct items, at least 10), and by the discrete power-law MLE on the item counts (Clauset, Shalizi
  and Newman 2009: exact likelihood with the Hurwitz zeta, x_min by the smallest KS distance), whose exponent
  alpha of P(c) ~ c^-alpha gives s = 1 / (alpha - 1); the top-1% mass (share of interactions of the most
  frequent 1% of items);
- permutation entropy (Bandt and Pompe 2002) of the popularity-rank series, orders m = 3..6, delay 1, ties by
  order of occurrence, normalised by ln m!, pooled (pattern counts of all users summed) and the mean over
  users with at least m items;
- compressibility: lzma and zlib bits per item of the sequences as fixed-width integers (uint16, or uint32 for
  catalogs of 65,535+ items) with a 0 between users, beside the unigram entropy of the item distribution;
- mutual-information decay: I(x_t; x_t+g) in bits over the pairs g steps apart inside a user, g = 1..G. On
  item catalogs the plug-in estimate is mostly bias (most pairs are seen once), which the Miller-Madow
  correction (each entropy + (K - 1) / 2n) removes only in part. `mi_decay` subtracts the plug-in of the same
  pairs with their second items permuted among them (same marginals and n, pairing broken: pure estimation
  bias, seeded), so independent positions give ~0 whatever the catalog; the plug-in and Miller-Madow values
  come beside it.
Each measure has a shuffled baseline: every user's items permuted (same items, order destroyed), seeded. Its
MI keeps what a user's items share regardless of order; the real curve's excess over it is what order carries.
"""

from __future__ import annotations

import lzma
import math
import time
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

ORDERS = (3, 4, 5, 6)
MAX_GAP = 20


@dataclass
class Corpus:
    """Sequences as one array: sequence u owns items[offsets[u]:offsets[u + 1]] (ids 1..num_items)."""

    name: str
    items: np.ndarray  # int64
    offsets: np.ndarray  # int64, (U + 1,)
    num_items: int

    @classmethod
    def of_dataset(cls, dataset) -> Corpus:
        counts = np.bincount(dataset.user, minlength=dataset.num_users + 1)[1:]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(dataset.name, dataset.item.astype(np.int64), offsets, dataset.num_items)

    @property
    def owner(self) -> np.ndarray:
        """The sequence index of every position."""
        return np.repeat(np.arange(len(self.offsets) - 1), np.diff(self.offsets))

    def truncated(self, budget: int) -> Corpus:
        """The first `budget` symbols (whole sequences, the last one cut), for a matched-budget comparison."""
        budget = min(budget, len(self.items))
        kept = self.offsets[
            : int(np.searchsorted(self.offsets, budget, side="left"))
        ]  # sequence starts < budget
        return Corpus(
            self.name, self.items[:budget], np.append(kept, budget).astype(np.int64), self.num_items
        )

    def shuffled(self, seed: int) -> Corpus:
        """Every sequence's items in a random order (a permutation inside each sequence)."""
        key = self.owner + np.random.default_rng(seed).random(len(self.items))
        return Corpus(self.name, self.items[np.argsort(key, kind="stable")], self.offsets, self.num_items)


def _entropy(counts: np.ndarray) -> float:
    """Shannon entropy in nats of a count vector."""
    counts = counts[counts > 0]
    p = counts / counts.sum()
    return abs(float((p * np.log(p)).sum()))  # abs: one symbol's 0 is -0.0 when negated, printed "-0.000"


def zipf_ols(sorted_counts: np.ndarray, r_max: int) -> float:
    """s of c_r ~ r^-s: minus the OLS slope of log c_r on log r over ranks 1..r_max; NaN (undefined) below two
    ranks, where a corpus of one distinct item has no slope to fit."""
    if r_max < 2:
        return math.nan
    r = np.arange(1, r_max + 1)
    slope = np.polyfit(np.log(r), np.log(sorted_counts[:r_max]), 1)[0]
    return round(float(-slope), 12) + 0.0  # a flat head fits a slope of +-1e-16: 0.0, never "-0.000"


ALPHA_BOUNDS = (1.0001, 8.0)  # s = 1 / (alpha - 1) from 0.14 to 10^4; a fit at a bound is flagged


def powerlaw_mle(values: np.ndarray, min_tail: int = 50) -> dict[str, float]:
    """Discrete power law P(x) = x^-alpha / zeta(alpha, x_min) for x >= x_min, fitted by exact likelihood;
    x_min minimises the KS distance between the tail's empirical CDF and the fitted one (Clauset et al. 2009).
    Candidates are the distinct values leaving at least `min_tail` points in the tail. `at_bound` is 1 when
    the chosen alpha sits at a search bound (then it is a bound, not an estimate)."""
    from scipy.optimize import minimize_scalar
    from scipy.special import zeta

    x = np.sort(values[values > 0].astype(np.float64))
    best = {"alpha": math.nan, "x_min": math.nan, "ks": math.inf, "tail": 0}
    candidates = np.unique(x)
    candidates = candidates[len(x) - np.searchsorted(x, candidates) >= min_tail]
    for x_min in candidates:
        tail = x[np.searchsorted(x, x_min) :]
        n, log_sum = len(tail), float(np.log(tail).sum())
        fit = minimize_scalar(
            lambda a: n * math.log(zeta(a, x_min)) + a * log_sum,  # noqa: B023
            bounds=ALPHA_BOUNDS,
            method="bounded",
        )
        alpha = float(fit.x)
        support, first = np.unique(tail, return_index=True)
        empirical = first / n  # P(X < x) at each distinct tail value
        cdf = 1.0 - zeta(alpha, support) / zeta(alpha, x_min)  # fitted P(X < x)
        ks = float(np.abs(empirical - cdf).max())
        if ks < best["ks"]:
            best = {"alpha": alpha, "x_min": float(x_min), "ks": ks, "tail": n}
    best["at_bound"] = (
        float(min(abs(best["alpha"] - b) for b in ALPHA_BOUNDS) < 1e-3) if best["tail"] else 0.0
    )
    return best


def permutation_patterns(
    values: np.ndarray, offsets: np.ndarray, order: int
) -> tuple[np.ndarray, np.ndarray]:
    """(pattern code, sequence) of every window of `order` consecutive values inside one sequence. The pattern
    is the stable argsort of the window (ties by order of occurrence), coded in base `order`."""
    if len(values) < order:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    owner = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    starts = np.arange(len(values) - order + 1)
    inside = owner[starts] == owner[starts + order - 1]
    windows = np.lib.stride_tricks.sliding_window_view(values, order)[starts[inside]]
    perm = np.argsort(windows, axis=1, kind="stable")
    return perm @ (order ** np.arange(order)), owner[starts[inside]]


def permutation_entropy(values: np.ndarray, offsets: np.ndarray, order: int) -> tuple[float, float, int]:
    """(pooled, mean per sequence, sequences in the mean), normalised by ln(order!)."""
    codes, owner = permutation_patterns(values, offsets, order)
    if not len(codes):
        return math.nan, math.nan, 0
    norm = math.log(math.factorial(order))
    pooled = _entropy(np.bincount(codes)) / norm
    pairs, counts = np.unique(owner * order**order + codes, return_counts=True)
    who = pairs // order**order
    totals = np.bincount(who, weights=counts)[who]  # windows per sequence
    p = counts / totals
    per_sequence = np.bincount(who, weights=-p * np.log(p))
    counted = np.unique(who)
    return pooled, float(per_sequence[counted].mean() / norm), len(counted)


def popularity_ranks(items: np.ndarray, num_items: int) -> np.ndarray:
    """Each position's item as its popularity rank (1 = most frequent; equal counts ranked by item id)."""
    counts = np.bincount(items, minlength=num_items + 1)
    order = np.lexsort((np.arange(len(counts)), -counts))
    rank = np.empty(len(counts), dtype=np.int64)
    rank[order] = np.arange(1, len(counts) + 1)
    return rank[items]


def bits_per_symbol(corpus: Corpus) -> dict[str, float]:
    """lzma and zlib bits per item of the fixed-width sequences, a 0 between sequences."""
    dtype = np.uint16 if corpus.num_items < 65535 else np.uint32
    stream = np.zeros(len(corpus.items) + len(corpus.offsets) - 1, dtype=dtype)
    positions = np.arange(len(corpus.items)) + np.repeat(
        np.arange(len(corpus.offsets) - 1), np.diff(corpus.offsets)
    )
    stream[positions] = corpus.items  # sequence u's items shift by u separators
    raw = stream.tobytes()
    n = max(len(corpus.items), 1)
    return {"lzma": 8 * len(lzma.compress(raw)) / n, "zlib": 8 * len(zlib.compress(raw, 9)) / n}


def mutual_information(corpus: Corpus, gap: int, seed: int = 0) -> dict[str, float]:
    """I(x_t; x_t+gap) in bits over the pairs inside one sequence: plug-in, Miller-Madow, and the plug-in of
    the same pairs with their second items permuted (the bias of an independent pairing)."""
    owner = corpus.owner
    first = np.flatnonzero(owner[: len(owner) - gap] == owner[gap:]) if gap < len(owner) else np.zeros(0, int)
    if not len(first):
        return {"plugin": math.nan, "miller_madow": math.nan, "permuted": math.nan}
    a, b = corpus.items[first], corpus.items[first + gap]
    count_a, count_b = np.bincount(a), np.bincount(b)
    h_a, h_b, ln2 = _entropy(count_a), _entropy(count_b), math.log(2)

    def joint(second: np.ndarray) -> np.ndarray:
        return np.unique(a * (corpus.num_items + 2) + second, return_counts=True)[1]

    cells = joint(b)
    plug_in = (h_a + h_b - _entropy(cells)) / ln2
    permuted = (h_a + h_b - _entropy(joint(np.random.default_rng([seed, gap]).permutation(b)))) / ln2
    k_a, k_b = int((count_a > 0).sum()), int((count_b > 0).sum())
    return {
        "plugin": plug_in,
        "permuted": permuted,
        "miller_madow": plug_in + (k_a + k_b - len(cells) - 1) / (2 * len(first) * ln2),
    }


def profile(
    corpus: Corpus,
    orders: tuple[int, ...] = ORDERS,
    max_gap: int = MAX_GAP,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Every measure of `corpus` and of its shuffled copy, as one JSON-able dict (names fixed for
    scripts)."""
    started = time.perf_counter()
    shuffled = corpus.shuffled(seed)
    steps = 3 + len(orders) + max_gap
    bar = tqdm(
        total=steps, desc=f"profile {corpus.name}", unit="measure", disable=not progress, dynamic_ncols=True
    )
    out = _rank_frequency(corpus)
    bar.update()
    out |= _permutation_entropies(corpus, shuffled, orders, bar)
    compressed, compressed_shuffled = bits_per_symbol(corpus), bits_per_symbol(shuffled)
    out |= {
        "bits_per_symbol_lzma": compressed["lzma"],
        "bits_per_symbol_zlib": compressed["zlib"],
        "bits_per_symbol_lzma_shuffled": compressed_shuffled["lzma"],
        "bits_per_symbol_zlib_shuffled": compressed_shuffled["zlib"],
    }
    bar.update()
    out |= _mi_decays(corpus, shuffled, max_gap, seed, bar)
    bar.update()
    bar.close()
    out["seed"], out["seconds"] = seed, time.perf_counter() - started
    return out


def _rank_frequency(corpus: Corpus) -> dict[str, Any]:
    """The corpus's size and its item counts' shape: Zipf exponents (OLS over the head, power-law MLE),
    the top 1%'s share and the unigram entropy."""
    counts = np.bincount(corpus.items, minlength=corpus.num_items + 1)[1:]
    ranked = np.sort(counts[counts > 0])[::-1]
    r_max = min(len(ranked), max(10, math.ceil(0.1 * len(ranked))))
    mle = powerlaw_mle(ranked)
    top = max(1, math.ceil(0.01 * len(ranked)))
    return {
        "dataset": corpus.name,
        "symbols": len(corpus.items),
        "sequences": len(corpus.offsets) - 1,
        "distinct_items": len(ranked),
        "zipf_exponent_ols": zipf_ols(ranked, r_max),
        "zipf_ols_ranks": [1, r_max],
        "zipf_exponent_mle": 1.0 / (mle["alpha"] - 1.0) if math.isfinite(mle["alpha"]) else math.nan,
        "powerlaw_alpha": mle["alpha"],
        "powerlaw_x_min": mle["x_min"],
        "powerlaw_ks": mle["ks"],
        "powerlaw_alpha_at_bound": bool(mle["at_bound"]),
        "powerlaw_tail_items": mle["tail"],
        "top1pct_mass": float(ranked[:top].sum() / ranked.sum()),
        "unigram_entropy_bits": _entropy(ranked) / math.log(2),
    }


def _permutation_entropies(
    corpus: Corpus, shuffled: Corpus, orders: tuple[int, ...], bar: tqdm
) -> dict[str, dict[str, Any]]:
    """Permutation entropy of the popularity ranks at each order, pooled and per user, real and shuffled
    (short sequences alone pull the per-user mean down, so the users counted come beside it)."""
    ranks, ranks_shuffled = (
        popularity_ranks(corpus.items, corpus.num_items),
        popularity_ranks(shuffled.items, corpus.num_items),
    )
    out: dict[str, dict[str, Any]] = {}
    out["permutation_entropy"], out["permutation_entropy_per_user"] = {}, {}
    out["permutation_entropy_shuffled"], out["permutation_entropy_users"] = {}, {}
    out["permutation_entropy_per_user_shuffled"] = {}
    for m in orders:
        pooled, per_user, users = permutation_entropy(ranks, corpus.offsets, m)
        out["permutation_entropy"][str(m)], out["permutation_entropy_per_user"][str(m)] = pooled, per_user
        out["permutation_entropy_users"][str(m)] = users
        pooled_shuffled, per_user_shuffled, _ = permutation_entropy(ranks_shuffled, corpus.offsets, m)
        out["permutation_entropy_shuffled"][str(m)] = pooled_shuffled
        out["permutation_entropy_per_user_shuffled"][str(m)] = per_user_shuffled
        bar.update()
    return out


def _mi_decays(corpus: Corpus, shuffled: Corpus, max_gap: int, seed: int, bar: tqdm) -> dict[str, list]:
    """[gap, bits] curves of mutual information for gaps 1..max_gap: bias-corrected (plug-in minus the
    permuted pairing's) real and shuffled, and the real plug-in and Miller-Madow values beside them."""
    out: dict[str, list] = {}
    for key in ("mi_decay", "mi_decay_shuffled", "mi_decay_plugin", "mi_decay_miller_madow"):
        out[key] = []
    for gap in range(1, max_gap + 1):
        real, baseline = mutual_information(corpus, gap, seed), mutual_information(shuffled, gap, seed)
        out["mi_decay"].append([gap, real["plugin"] - real["permuted"]])
        out["mi_decay_shuffled"].append([gap, baseline["plugin"] - baseline["permuted"]])
        out["mi_decay_plugin"].append([gap, real["plugin"]])
        out["mi_decay_miller_madow"].append([gap, real["miller_madow"]])
        bar.update()
    return out
