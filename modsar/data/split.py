"""Leave-one-out split over CSR sequences (flat item array + per-user offsets).

For a user with n >= 3 interactions: items[:n-2] train, items[n-2] validation target, items[n-1] test
target. Validation ranks with history items[:n-2]; test ranks with history items[:n-1]. Users with fewer
than 3 interactions cannot be evaluated; their items are training data only (the SASRec convention).
No test item and no validation item ever reaches a training input or label.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LeaveOneOut:
    items: np.ndarray  # int64, all users' items, user-major, chronological
    offsets: np.ndarray  # int64 (U + 1,): user u (1-based) owns items[offsets[u-1]:offsets[u]]
    num_items: int

    @classmethod
    def from_log(cls, user: np.ndarray, item: np.ndarray, num_users: int, num_items: int) -> LeaveOneOut:
        counts = np.bincount(user, minlength=num_users + 1)[1:]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(item.astype(np.int64), offsets, num_items)

    @property
    def num_users(self) -> int:
        return len(self.offsets) - 1

    @property
    def starts(self) -> np.ndarray:
        return self.offsets[:-1]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def eval_users(self) -> np.ndarray:
        """0-based indices of users that have a validation and a test target."""
        return np.flatnonzero(self.lengths >= 3)

    @property
    def train_ends(self) -> np.ndarray:
        """Exclusive end of each user's training items (the last two are held out when n >= 3)."""
        n = self.lengths
        return self.starts + np.where(n >= 3, n - 2, n)

    def targets(self, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(users, history_end, target) for `split` in {valid, test}; history = items[starts[u]:history_end]."""
        users = self.eval_users
        shift = {"valid": 2, "test": 1}[split]
        end = self.offsets[users + 1] - shift
        return users, end, self.items[end]


def left_padded_windows(items: np.ndarray, starts: np.ndarray, ends: np.ndarray, width: int) -> np.ndarray:
    """The last `width` items of each range items[start:end], left-padded with 0 to shape (B, width)."""
    idx = ends[:, None] - width + np.arange(width)[None, :]
    real = idx >= starts[:, None]
    return np.where(real, items[np.clip(idx, 0, max(len(items) - 1, 0))], 0)


def history_index(split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, item) pairs of every history item of each user in the batch, as flat arrays."""
    starts = split.starts[users]
    lengths = history_end - starts
    rows = np.repeat(np.arange(len(users)), lengths)
    within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return rows, split.items[np.repeat(starts, lengths) + within]
