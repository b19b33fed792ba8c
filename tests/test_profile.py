"""`modsar data profile`: every measure on an input with a known answer, and the command's outputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from modsar.cli import main
from modsar.data.profile import (
    Corpus,
    bits_per_symbol,
    mutual_information,
    permutation_entropy,
    popularity_ranks,
    powerlaw_mle,
    profile,
    zipf_ols,
)


def corpus(sequences: list[list[int]] | list[np.ndarray], num_items: int | None = None) -> Corpus:
    items = np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences])
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sequences])]).astype(np.int64)
    return Corpus("test", items, offsets, num_items or int(items.max()))


def periodic(length: int = 30_000, period: int = 3) -> Corpus:
    return corpus([np.arange(length) % period + 1])


def test_an_exact_power_law_gives_its_exponent_and_mass():
    """Item r appears round(1e5 r^-1.2) times: OLS recovers s = 1.2; the top 1% of items hold their share."""
    counts = np.round(1e5 * np.arange(1, 1001) ** -1.2).astype(np.int64)
    assert zipf_ols(counts, 100) == pytest.approx(1.2, abs=1e-3)
    c = corpus([np.repeat(np.arange(1, 1001), counts)])
    result = profile(c, orders=(3,), max_gap=1, progress=False)
    assert result["zipf_exponent_ols"] == pytest.approx(1.2, abs=1e-3) and result["zipf_ols_ranks"] == [
        1,
        100,
    ]
    assert result["top1pct_mass"] == pytest.approx(counts[:10].sum() / counts.sum())


def test_power_law_mle_recovers_alpha_and_a_small_x_min():
    """Counts drawn from P(x) ~ x^-2.5 (x >= 1): the exact discrete MLE gives alpha ~2.5, so s = 1 / 1.5."""
    from scipy import stats

    values = stats.zipf(2.5).rvs(20_000, random_state=np.random.default_rng(0))
    fit = powerlaw_mle(values)
    assert fit["alpha"] == pytest.approx(2.5, abs=0.05) and fit["x_min"] <= 3 and fit["ks"] < 0.02


def test_iid_sequences_have_maximal_permutation_entropy():
    rng = np.random.default_rng(1)
    c = corpus([rng.integers(1, 1_000_001, 5_000) for _ in range(40)], 1_000_000)
    ranks = popularity_ranks(c.items, c.num_items)
    for m in (3, 4, 5):
        pooled, per_user, users = permutation_entropy(ranks, c.offsets, m)
        assert pooled > 0.998 and per_user > 0.99 and users == 40


def test_a_periodic_sequence_has_three_patterns():
    """1 2 3 1 2 3 ...: three ordinal patterns of equal frequency at every order, so PE = ln 3 / ln m!."""
    c = periodic()
    ranks = popularity_ranks(c.items, c.num_items)
    for m in (3, 4, 5, 6):
        pooled, per_user, _ = permutation_entropy(ranks, c.offsets, m)
        assert pooled == pytest.approx(math.log(3) / math.log(math.factorial(m)), abs=1e-4)
        assert per_user == pytest.approx(pooled, abs=1e-4)  # one sequence


def test_windows_never_cross_sequences():
    """Two sequences of 3: m = 3 gives exactly two windows, one per sequence; m = 4 gives none."""
    c = corpus([[1, 2, 3], [3, 2, 1]])
    ranks = popularity_ranks(c.items, c.num_items)
    assert permutation_entropy(ranks, c.offsets, 3) == (pytest.approx(math.log(2) / math.log(6)), 0.0, 2)
    assert math.isnan(permutation_entropy(ranks, c.offsets, 4)[0])


def test_mutual_information_of_periodic_and_shuffled_sequences():
    """Period 3: x_t+g is a function of x_t, so I = log2 3 bits at every gap; a shuffled copy carries ~0."""
    c = periodic()
    for gap in (1, 2, 5):
        mi = mutual_information(c, gap)
        assert mi["plugin"] == pytest.approx(math.log2(3), abs=1e-6)
        assert mi["plugin"] - mi["permuted"] == pytest.approx(math.log2(3), abs=0.01)
        shuffled = mutual_information(c.shuffled(0), gap)
        assert abs(shuffled["plugin"] - shuffled["permuted"]) < 0.01
    result = profile(c, orders=(3,), max_gap=3, progress=False)
    assert [g for g, _ in result["mi_decay"]] == [1, 2, 3]
    assert all(v == pytest.approx(math.log2(3), abs=0.01) for _, v in result["mi_decay"])
    assert all(abs(v) < 0.01 for _, v in result["mi_decay_shuffled"])


def test_compression_and_unigram_entropy():
    """A periodic sequence compresses to a small fraction of a bit per item; uniform i.i.d. items over 256 ids
    cannot go below their 8-bit unigram entropy."""
    assert bits_per_symbol(periodic())["lzma"] < 0.05
    rng = np.random.default_rng(2)
    c = corpus([rng.integers(1, 257, 50_000)], 256)
    result = profile(c, orders=(3,), max_gap=1, progress=False)
    assert result["unigram_entropy_bits"] == pytest.approx(8.0, abs=0.01)
    assert result["bits_per_symbol_lzma"] > 7.9 and result["bits_per_symbol_zlib"] > 7.9


def test_truncation_keeps_whole_sequences_and_cuts_the_last():
    c = corpus([[1, 2, 3], [4, 5], [6, 7, 8, 9]])
    cut = c.truncated(6)
    assert cut.items.tolist() == [1, 2, 3, 4, 5, 6] and cut.offsets.tolist() == [0, 3, 5, 6]
    assert c.truncated(5).offsets.tolist() == [0, 3, 5] and c.truncated(100).offsets.tolist() == [0, 3, 5, 9]


def test_cli_json_compare_and_outputs(tmp_path, capsys):
    """A text-like corpus imported through the session importer is profiled beside a log at a matched
    budget."""
    rng = np.random.default_rng(3)
    text = tmp_path / "tokens.txt"
    text.write_text("\n".join(" ".join(map(str, rng.zipf(1.3, 40) % 5000 + 1)) for _ in range(300)) + "\n")
    data = str(tmp_path / "data")
    assert (
        main(["data", "prepare", "tokens", "--source", str(text), "--format", "sessions", "--data-dir", data])
        == 0
    )
    capsys.readouterr()
    out = tmp_path / "profile"
    assert (
        main(
            [
                "data",
                "profile",
                "synthetic",
                "--compare",
                "tokens",
                "--json",
                "--quiet",
                "--data-dir",
                data,
                "--out",
                str(out),
                "--max-gap",
                "4",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    for key in (
        "zipf_exponent_ols",
        "zipf_exponent_mle",
        "top1pct_mass",
        "permutation_entropy",
        "bits_per_symbol_lzma",
        "bits_per_symbol_zlib",
        "unigram_entropy_bits",
        "mi_decay",
    ):
        assert key in printed and key in printed["compare"]
    assert printed["symbols"] == printed["compare"]["symbols"] == 12_000  # the smaller corpus sets the budget
    assert set(printed["permutation_entropy"]) == {"3", "4", "5", "6"} and len(printed["mi_decay"]) == 4
    table = pd.read_parquet(out / "profile.parquet")
    assert set(table["dataset"]) == {"synthetic", "tokens"}
    for name in ("profile.json", "rank_frequency.png", "mi_decay.png", "permutation_entropy.png"):
        assert (out / name).stat().st_size > 0
    assert (
        json.loads((out / "profile.json").read_text()) == printed
    )  # the file has the fixed fields on top too
    for p in (printed, printed["compare"]):  # the per-user mean has its own shuffled baseline
        assert set(p["permutation_entropy_per_user_shuffled"]) == set(p["permutation_entropy_per_user"])
        assert isinstance(p["powerlaw_alpha_at_bound"], bool)
    assert main(["data", "profile", "synthetic", "--orders", "3,x", "--data-dir", data]) == 2
    assert "--orders must be comma-separated integers from 2 to 8" in capsys.readouterr().err


def test_a_flat_head_has_a_zipf_exponent_of_exactly_zero():
    """Equal counts fit a slope of about 1e-16 of either sign, which printed as "-0.000"."""
    for counts in ([5.0, 5.0, 5.0], [7.0, 7.0], [3.0, 3.0, 3.0, 3.0]):
        value = zipf_ols(np.array(counts), len(counts))
        assert value == 0.0 and math.copysign(1.0, value) == 1.0
