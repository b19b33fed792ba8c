"""A seeded synthetic log with planted sequential structure.

Each item has a few fixed successors; a user's next item follows one of them with probability `follow`
and is otherwise drawn from a skewed popularity distribution. A model that reads the order (AR/AE)
therefore recovers the successors and clearly beats popularity, while popularity alone stays weak.
"""

from __future__ import annotations

import numpy as np

from modsar.data.importers import Interactions


def generate(num_users: int = 1000, num_items: int = 300, min_len: int = 6, max_len: int = 30,
             successors: int = 3, follow: float = 0.8, seed: int = 0) -> Interactions:
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, num_items + 1) ** 0.8
    popularity /= popularity.sum()
    next_items = rng.integers(0, num_items, size=(num_items, successors))
    next_weights = np.array([0.6, 0.3, 0.1][:successors] + [0.0] * max(0, successors - 3))
    next_weights /= next_weights.sum()

    lengths = rng.integers(min_len, max_len + 1, size=num_users)
    seqs = np.zeros((num_users, max_len), dtype=np.int64)
    seqs[:, 0] = rng.choice(num_items, size=num_users, p=popularity)
    for t in range(1, max_len):
        pick = rng.choice(successors, size=num_users, p=next_weights)
        followed = next_items[seqs[:, t - 1], pick]
        random = rng.choice(num_items, size=num_users, p=popularity)
        seqs[:, t] = np.where(rng.random(num_users) < follow, followed, random)

    real = np.arange(max_len)[None, :] < lengths[:, None]
    user = np.repeat(np.arange(1, num_users + 1), lengths)
    return Interactions(user=user, item=seqs[real] + 1)
