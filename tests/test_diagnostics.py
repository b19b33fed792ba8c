"""Diagnostics against hand-checked cases (definitions: docs/diagnostics.md)."""

from __future__ import annotations

import numpy as np
import pytest

from modsar.analysis.diagnostics import (
    attention_window,
    hard_threshold_rank,
    last_item_hit,
    mixing_ratio,
    recovery_rate,
    sparsity,
)


def causal_uniform(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def causal_window(n: int, w: int) -> np.ndarray:
    i, j = np.indices((n, n))
    a = ((j <= i) & (i - j < w)).astype(float)
    return a / a.sum(1, keepdims=True)


@pytest.mark.parametrize(
    "matrix,expected",
    [
        (np.array([1.0, 0, 0, 0]), 0.25),
        (np.full(4, 0.25), 0.5),
        (np.array([0.7, 0.1, 0.1, 0.1]), 0.347),
        (np.full((4, 4), 0.25), 0.25),
        (causal_uniform(4), 0.173),
        (np.full((20, 20), 1 / 20), 0.050),
        (causal_uniform(20), 0.0264),
        (causal_window(20, 3), 0.0183),
        (np.eye(20), 0.0112),
    ],
)
def test_sparsity_hand_checks(matrix, expected):
    assert sparsity(matrix) == pytest.approx(expected, abs=6e-4)


def test_sparsity_of_a_short_sequence_in_a_zero_window():
    window = attention_window(causal_uniform(8), real=8, window=20)
    assert window[:12].sum() == 0 and window[:, :12].sum() == 0
    assert sparsity(window) == pytest.approx(0.0121, abs=1e-4)
    assert np.isnan(sparsity(np.zeros((3, 3))))


def test_rank_hand_checks_4x4():
    k, tau, s = hard_threshold_rank(np.full((4, 4), 0.25))
    assert (k, round(tau, 3)) == (1, 0.510) and s[0] == pytest.approx(1.0)
    k, tau, s = hard_threshold_rank(causal_uniform(4))
    assert (k, round(tau, 3)) == (1, 0.736)
    np.testing.assert_allclose(s, [1.272, 0.579, 0.310, 0.183], atol=1e-3)
    k, tau, _ = hard_threshold_rank(np.eye(4))
    assert k == 0 and tau == pytest.approx(1.020, abs=1e-3)  # the relative rule can return 0


@pytest.mark.parametrize(
    "matrix,expected",
    [
        (np.full((20, 20), 1 / 20), 1),
        (causal_uniform(20), 5),
        (causal_window(20, 3), 10),
        (np.eye(20), 20),
        (causal_uniform(50), 10),
    ],
)
def test_rank_hand_checks(matrix, expected):
    assert hard_threshold_rank(matrix)[0] == expected


def test_rank_identity_unchanged_with_small_noise_and_other_rules():
    assert hard_threshold_rank(np.eye(20), sigma=0.01, seed=3)[0] == 20
    assert hard_threshold_rank(np.eye(20), sigma=0.01, rule="gd_known_sigma")[0] == 20
    with pytest.raises(ValueError, match="rule must be one of"):
        hard_threshold_rank(np.eye(3), rule="svt")


def test_hrli_on_a_fixed_top_k_list():
    v_m, a, v_m1 = 7, 3, 5
    topk = np.array([[v_m, a, v_m1], [a, v_m1, v_m]])
    assert last_item_hit(topk[:1], np.array([v_m]), 1)[0] == 1
    assert last_item_hit(topk[:1], np.array([v_m1]), 1)[0] == 0
    assert last_item_hit(topk[:1], np.array([v_m1]), 3)[0] == 1
    undefined = last_item_hit(topk, np.array([v_m1, -1]), 3)  # m = 1: HRL2I undefined, left out
    assert undefined[0] == 1 and np.isnan(undefined[1]) and np.nanmean(undefined) == 1


def test_two_token_mixing_ratio_example():
    x1, x2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    attn = np.stack([0.5 * x1, 0.5 * x2])  # c^A_2j with f = identity, a_21 = a_22 = 1/2
    assert mixing_ratio(attn, 1) == pytest.approx(0.5)
    for alpha, expected in ((1.0, 0.25), (0.5, 1 / 3)):
        res = attn.copy()
        res[1] += alpha * x2  # + residual (delta_ij * alpha * x_i)
        assert mixing_ratio(res, 1) == pytest.approx(expected)
        z = res.sum(0)  # +LN: centred, divided by the pre-LN vector's std (gamma = 1, beta = 0)
        s = np.sqrt(z.var() + 1e-12)
        ln = (res - res.mean(1, keepdims=True)) / s
        np.testing.assert_allclose(ln.sum(0), (z - z.mean()) / s)  # the pieces sum to LN(z)
        assert mixing_ratio(ln, 1) == pytest.approx(expected)
        if alpha == 1.0:
            np.testing.assert_allclose(ln, [[0.5, -0.5], [-1.5, 1.5]], atol=1e-6)


def test_recovery_rate_definition():
    miss_final = np.array([1, 1, 1, 0, 1], bool)
    hit_earlier = np.array([1, 1, 0, 1, 1], bool)  # R = sequences 0, 1, 4
    hit_at_alpha = np.array([1, 0, 1, 1, 1], bool)  # recovered: 0 and 4 (2 and 3 are not in R)
    assert recovery_rate(miss_final, hit_earlier, hit_at_alpha) == pytest.approx(2 / 3)
    assert recovery_rate(miss_final, hit_earlier, np.zeros(5, bool)) == 0.0
    assert recovery_rate(np.zeros(5, bool), hit_earlier, hit_at_alpha) == 0.0  # |R| = 0
