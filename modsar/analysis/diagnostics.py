"""Diagnostics of the seed papers as pure functions (definitions: docs/diagnostics.md).

ModSAR Findings 1-2: attention sparsity S and hard-threshold rank k of attention matrices. Residual
dominance: last-item hit rates (HRLI / HRL2I), norm-based mixing ratios, and the recovery rate under
inference-time residual scaling. The model-facing parts (collecting matrices, alpha sweeps, the
`modsar analyze` command) build on these.
"""

from __future__ import annotations

import math

import numpy as np

RANK_RULES = ("modsar_eq8", "gd_known_sigma", "gd_unknown_sigma")


def sparsity(matrix: np.ndarray) -> float:
    """S(x) = (||x||_1 / N) / ||x||_2 over the whole flattened matrix; smaller = sparser (ModSAR Eq. 5).

    The value depends on N: callers record the window (W x W, N = W^2) and the padding convention."""
    x = np.asarray(matrix, dtype=np.float64).ravel()
    norm = np.linalg.norm(x)
    if norm == 0:
        return math.nan  # undefined for an all-zero matrix: skipped by aggregations
    return float(np.abs(x).sum() / x.size / norm)


def attention_window(attention: np.ndarray, real: int, window: int = 20) -> np.ndarray:
    """The last `window` positions of a head-averaged (T, T) attention matrix of a left-padded sequence with
    `real` items, as a W x W matrix whose padded rows and columns are zero (docs/diagnostics.md#attention)."""
    a = np.asarray(attention, dtype=np.float64)
    out = np.zeros((window, window))
    k = min(window, real, a.shape[-1])
    if k:
        out[window - k :, window - k :] = a[-k:, -k:]
    return out


def _omega(beta: float) -> float:
    return 0.56 * beta**3 - 0.95 * beta**2 + 1.82 * beta + 1.43


def hard_threshold_rank(
    matrix: np.ndarray, sigma: float = 0.0, rule: str = "modsar_eq8", seed: int = 0
) -> tuple[int, float, np.ndarray]:
    """(k, tau, singular values of Y) for Y = A + N(0, sigma^2) noise, with the threshold of `rule`:

    modsar_eq8        tau = sqrt(2 log(2n)) * sqrt(sigma^2 + ||Y||_F^2 / n^2)   (ModSAR Eq. 8, square
    restored) gd_known_sigma    tau = (4 / sqrt 3) sqrt(n) sigma                          (Gavish-Donoho 2014,
    square) gd_unknown_sigma  tau = omega(beta) * median(s)

    Singular values below numpy's matrix_rank tolerance never count (a zero-padded window has exact zeros that
    SVD returns as ~1e-17, which tau = 0 would otherwise count).
    """
    if rule not in RANK_RULES:
        raise ValueError(f"rule must be one of {RANK_RULES}, got {rule!r}")
    a = np.asarray(matrix, dtype=np.float64)
    m, n = a.shape
    y = a + (np.random.default_rng(seed).normal(0.0, sigma, a.shape) if sigma > 0 else 0.0)
    s = np.linalg.svd(y, compute_uv=False)
    if rule == "modsar_eq8":
        size = max(m, n)
        tau = math.sqrt(2 * math.log(2 * size)) * math.sqrt(sigma**2 + float((s**2).sum()) / size**2)
    elif rule == "gd_known_sigma":
        if m != n:
            raise ValueError("gd_known_sigma is defined here for square matrices")
        tau = 4 / math.sqrt(3) * math.sqrt(n) * sigma
    else:
        tau = _omega(min(m, n) / max(m, n)) * float(np.median(s))
    numerically_zero = s[0] * max(m, n) * np.finfo(np.float64).eps if len(s) else 0.0  # as matrix_rank
    return int((s > max(tau, numerically_zero)).sum()), tau, s


def effective_rank(singular_values: np.ndarray) -> float:
    """exp(entropy of s / sum(s)): a threshold-free companion to k."""
    s = np.asarray(singular_values, dtype=np.float64)
    p = s[s > 0] / s.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def last_item_hit(topk: np.ndarray, probe: np.ndarray, k: int) -> np.ndarray:
    """1 where `probe` (per sequence; -1 = undefined) is among the first k of each ranked list, NaN where
    undefined. HRLI@k probes v_m, HRL2I@k probes v_(m-1); average with nanmean and report n."""
    topk = np.asarray(topk)
    probe = np.asarray(probe)
    hits = (topk[:, :k] == probe[:, None]).any(1).astype(float)
    hits[probe < 0] = math.nan
    return hits


def mixing_ratio(contributions: np.ndarray, position: int) -> float:
    """r_i = ||sum_{j != i} c_ij|| / (||sum_{j != i} c_ij|| + ||c_ii|| + 1e-12) for contribution vectors
    c_ij (rows j, last axis the hidden dimension): norms of vector sums, not sums of norms."""
    c = np.asarray(contributions, dtype=np.float64)
    others = np.linalg.norm(np.delete(c, position, axis=0).sum(0))
    own = np.linalg.norm(c[position])
    return float(others / (others + own + 1e-12))


def recovery_rate(
    miss_final_at_1: np.ndarray, hit_earlier_at_1: np.ndarray, hit_final_at_alpha: np.ndarray
) -> float:
    """Rec(alpha) = |{s in R : hit@10 at L under alpha}| / |R| with R fixed at alpha = 1: sequences missed at
    the final position but hit at L-1, L-2 or L-3. |R| = 0 gives 0."""
    recoverable = np.asarray(miss_final_at_1, bool) & np.asarray(hit_earlier_at_1, bool)
    if not recoverable.any():
        return 0.0
    return float((recoverable & np.asarray(hit_final_at_alpha, bool)).sum() / recoverable.sum())
