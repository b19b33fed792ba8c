"""Seeded synthetic logs with planted structure whose best achievable ranking is known exactly.

`synthetic` (sequential): a first-order Markov chain over items. Each item has a few fixed successors; the
next item is one of them (weights .6/.3/.1) with probability `follow`, else a Zipf popularity draw. A model
that reads the order recovers the successors and clearly beats popularity.

`synthetic-clusters` (order-free): every user belongs to a latent cluster and draws each item independently
from the cluster's item distribution (with probability `noise` from global popularity). Order carries no
information; the history identifies the cluster.

Both planted models give the exact predictive distribution of a user's next target given the history, so
`optimum` computes the expected Recall/NDCG/MRR@k of the Bayes-optimal ranking on the leave-one-out split
(an expectation under the generator, no sampling noise): the ceiling a model's figures can be read against.
Structure and users come from independent seeded streams, so the structure is rebuilt from the options.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from modsar.data.importers import Interactions
from modsar.data.prepare import PreparedLog
from modsar.data.registry import SYNTHETIC, SYNTHETIC_CLUSTERS
from modsar.data.split import LeaveOneOut, history_index

VERSION = 2  # bump whenever a generator's output changes: cached copies are then regenerated on use
DEFAULT_KS = (1, 5, 10, 20, 50)


def zipf(n: int, exponent: float) -> np.ndarray:
    """Normalised Zipf weights 1/r^exponent for ranks 1..n (strictly decreasing: no ties)."""
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    return weights / weights.sum()


def _streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent streams for the planted structure and for the users."""
    structure, users = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(structure), np.random.default_rng(users)


def _lengths(rng: np.random.Generator, num_users: int, min_len: int, max_len: int) -> np.ndarray:
    return rng.integers(min_len, max_len + 1, size=num_users)


def _log(seqs: np.ndarray, lengths: np.ndarray) -> Interactions:
    """(U, max_len) 0-based item matrix + lengths -> a log with raw user ids 1..U and item ids 1..N."""
    real = np.arange(seqs.shape[1])[None, :] < lengths[:, None]
    user = np.repeat(np.arange(1, len(lengths) + 1), lengths)
    return Interactions(user=user, item=seqs[real] + 1)


class PlantedModel(Protocol):
    def predictive(
        self, split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, generator_index: np.ndarray
    ) -> np.ndarray:
        """(len(users), N): P(target = item | history) for prepared item ids 1..N (columns 0..N-1)."""
        ...


@dataclass(frozen=True)
class MarkovChain:
    """next = successors[prev, k] with prob. follow * weights[k], else a popularity draw."""

    popularity: np.ndarray  # (M,) over generator items 0..M-1
    successors: np.ndarray  # (M, S)
    weights: np.ndarray  # (S,)
    follow: float

    def transition(self) -> np.ndarray:
        """(M, M) P[s, j] = P(next = j | previous = s); repeated successors add up."""
        m, s = self.successors.shape
        probs = np.tile((1 - self.follow) * self.popularity, (m, 1))
        rows = np.repeat(np.arange(m), s)
        np.add.at(probs, (rows, self.successors.ravel()), self.follow * np.tile(self.weights, m))
        return probs

    def predictive(
        self, split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, generator_index: np.ndarray
    ) -> np.ndarray:
        """First order: only the last history item matters."""
        previous = generator_index[split.items[history_end - 1] - 1]
        return self.transition()[previous][:, generator_index]


def markov_chain(
    num_items: int,
    successors: int = 3,
    follow: float = 0.8,
    exponent: float = 0.8,
    seed: int = 0,
    **_: object,
) -> MarkovChain:
    """The planted chain of `generate` with the same options (user options are ignored)."""
    rng, _users = _streams(seed)
    weights = np.array([0.6, 0.3, 0.1][:successors] + [0.0] * max(0, successors - 3))
    return MarkovChain(
        zipf(num_items, exponent),
        rng.integers(0, num_items, size=(num_items, successors)),
        weights / weights.sum(),
        follow,
    )


def generate(
    num_users: int = 1000,
    num_items: int = 300,
    min_len: int = 6,
    max_len: int = 30,
    successors: int = 3,
    follow: float = 0.8,
    exponent: float = 0.8,
    seed: int = 0,
) -> Interactions:
    """The `synthetic` log: users follow the planted Markov chain from a popularity-drawn first item."""
    chain = markov_chain(num_items, successors, follow, exponent, seed)
    _structure, rng = _streams(seed)
    lengths = _lengths(rng, num_users, min_len, max_len)
    seqs = np.zeros((num_users, max_len), dtype=np.int64)
    seqs[:, 0] = rng.choice(num_items, size=num_users, p=chain.popularity)
    for t in range(1, max_len):  # vectorised over users; the chain is sequential in t
        pick = rng.choice(successors, size=num_users, p=chain.weights)
        followed = chain.successors[seqs[:, t - 1], pick]
        random = rng.choice(num_items, size=num_users, p=chain.popularity)
        seqs[:, t] = np.where(rng.random(num_users) < chain.follow, followed, random)
    return _log(seqs, lengths)


@dataclass(frozen=True)
class ClusterMixture:
    """Each user's cluster c ~ prior; each item i.i.d. ~ item_probs[c] (order-free)."""

    prior: np.ndarray  # (K,)
    item_probs: np.ndarray  # (K, M), rows sum to 1, every entry > 0 when noise > 0

    def posterior(self, counts: np.ndarray) -> np.ndarray:
        """(U, K) P(cluster | history) from (U, M) item counts: exact Bayes in log space."""
        # noise = 0: unseen items stay finite (0 * log)
        log_probs = np.log(np.maximum(self.item_probs, 1e-300))
        log_like = counts @ log_probs.T + np.log(self.prior)
        log_like -= log_like.max(1, keepdims=True)
        post = np.exp(log_like)
        return post / post.sum(1, keepdims=True)

    def predictive(
        self, split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, generator_index: np.ndarray
    ) -> np.ndarray:
        """sum_c P(c | history) P(item | c): the target is one more i.i.d. draw of the same cluster."""
        rows, items = history_index(split, users, history_end)
        counts = np.zeros((len(users), self.item_probs.shape[1]))
        np.add.at(counts, (rows, generator_index[items - 1]), 1.0)
        return self.posterior(counts) @ self.item_probs[:, generator_index]


def cluster_mixture(
    num_items: int,
    num_clusters: int = 20,
    cluster_size: int = 30,
    exponent: float = 1.0,
    noise: float = 0.1,
    seed: int = 0,
    **_: object,
) -> ClusterMixture:
    """Clusters are random item subsets (they may overlap) with Zipf weights; `noise` mixes in popularity."""
    rng, _users = _streams(seed)
    members = np.argsort(rng.random((num_clusters, num_items)), axis=1)[:, :cluster_size]
    own = np.zeros((num_clusters, num_items))
    np.put_along_axis(own, members, np.tile(zipf(cluster_size, exponent), (num_clusters, 1)), axis=1)
    probs = (1 - noise) * own + noise * zipf(num_items, 0.8)[None, :]
    return ClusterMixture(np.full(num_clusters, 1.0 / num_clusters), probs / probs.sum(1, keepdims=True))


def generate_clusters(
    num_users: int = 1000,
    num_items: int = 300,
    min_len: int = 6,
    max_len: int = 30,
    num_clusters: int = 20,
    cluster_size: int = 30,
    exponent: float = 1.0,
    noise: float = 0.1,
    seed: int = 0,
) -> Interactions:
    """The `synthetic-clusters` log: each user's items are i.i.d. draws from their cluster (inverse CDF)."""
    model = cluster_mixture(num_items, num_clusters, cluster_size, exponent, noise, seed)
    _structure, rng = _streams(seed)
    lengths = _lengths(rng, num_users, min_len, max_len)
    cluster = rng.choice(num_clusters, size=num_users, p=model.prior)
    cdf = np.cumsum(model.item_probs, axis=1)
    cdf[:, -1] = 1.0
    flat_cdf = (cdf + np.arange(num_clusters)[:, None]).ravel()  # row c lives in (c, c + 1]
    draws = rng.random((num_users, max_len)) + cluster[:, None]
    index = np.searchsorted(flat_cdf, draws, side="right").clip(max=flat_cdf.size - 1)
    return _log(index - cluster[:, None] * num_items, lengths)


@dataclass(frozen=True)
class Generator:
    """A built-in generated dataset: its default options, generator and planted model."""

    options: dict
    generate: Callable[..., Interactions]
    model: Callable[..., PlantedModel]

    def facts(self) -> dict:
        """What identifies the generated data (stored in the manifest; a change regenerates cached copies)."""
        return {"generator": f"{__name__}.{self.generate.__name__}", "version": VERSION, **self.options}


GENERATORS: dict[str, Generator] = {
    SYNTHETIC: Generator(
        {
            "num_users": 1000,
            "num_items": 300,
            "min_len": 6,
            "max_len": 30,
            "successors": 3,
            "follow": 0.8,
            "exponent": 0.8,
            "seed": 0,
        },
        generate,
        markov_chain,
    ),
    SYNTHETIC_CLUSTERS: Generator(
        {
            "num_users": 1000,
            "num_items": 300,
            "min_len": 6,
            "max_len": 30,
            "num_clusters": 20,
            "cluster_size": 30,
            "exponent": 1.0,
            "noise": 0.1,
            "seed": 0,
        },
        generate_clusters,
        cluster_mixture,
    ),
}


def expected_metrics(probs: np.ndarray, ks: Sequence[int] = DEFAULT_KS) -> dict[str, np.ndarray]:
    """Per row: expected Recall/NDCG/MRR@k of ranking the columns by `probs` when the target ~ that row.

    Ties do not matter: permuting equally likely items leaves the expectation unchanged. Mass outside the
    columns (items absent from the data) can never be hit and counts as a miss.
    """
    ranked = -np.sort(-probs, axis=1)
    ranks = np.arange(1, ranked.shape[1] + 1)
    out = {}
    for k in ks:
        top, r = ranked[:, :k], ranks[:k]
        out[f"recall@{k}"] = top.sum(1)
        out[f"ndcg@{k}"] = top @ (1.0 / np.log2(r + 1))
        out[f"mrr@{k}"] = top @ (1.0 / r)
    return out


def optimum_per_user(
    model: PlantedModel, log: PreparedLog, which: str, ks: Sequence[int] = DEFAULT_KS
) -> dict[str, np.ndarray]:
    """Expected metrics of the Bayes-optimal ranking for each evaluable user of the `valid`/`test` split.

    Prepared ids are the generator's items present in the log, sorted (np.unique), so the ranking runs over
    exactly the items the evaluator ranks, in its id space.
    """
    split = LeaveOneOut.from_log(log.user, log.item, log.num_users, log.num_items)
    users, history_end, _ = split.targets(which)
    generator_index = np.asarray(log.raw_items, dtype=np.int64) - 1
    return expected_metrics(model.predictive(split, users, history_end, generator_index), ks)


def optimum(model: PlantedModel, log: PreparedLog, ks: Sequence[int] = DEFAULT_KS) -> dict:
    """Mean expected metrics of the Bayes-optimal ranking (valid and test), as stored in the manifest."""
    out: dict = {
        "ks": list(ks),
        "filter_seen": "none",
        "what": "expected metrics of the Bayes-optimal ranking under the generator, given each "
        "evaluable user's history (leave-one-out, full ranking)",
    }
    for which in ("valid", "test"):
        per_user = optimum_per_user(model, log, which, ks)
        out[which] = {key: round(float(v.mean()), 6) if len(v) else 0.0 for key, v in per_user.items()}
    return out
