"""Canonical interactions -> a clean, chronologically ordered log with ids remapped to 1..N.

Steps, in order: rating threshold, chronological order (timestamp when present, else file order; stable),
consecutive-repeat removal, min-count filtering of users and items (one pass, or iterated to a k-core),
and remapping of users to 1..U and items to 1..N (sorted by raw id, so already-remapped data keeps its ids).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from modsar.data.importers import Interactions
from modsar.errors import ModsarError


@dataclass(frozen=True)
class PrepareOptions:
    min_user_count: int = 0
    min_item_count: int = 0
    kcore: bool = False  # iterate the min-count filter until both hold
    dedup_consecutive: bool = False  # drop an interaction equal to the user's previous item
    min_rating: float | None = None
    # join sources with and without timestamps by ordering every history by its lines (never done unasked)
    drop_timestamps: bool = False

    def to_dict(self) -> dict:
        """The options as the manifest records them; drop_timestamps only when set, so that the datasets
        prepared before it existed keep their identity (rows and checkpoints compare it)."""
        options: dict = {
            "min_user_count": self.min_user_count,
            "min_item_count": self.min_item_count,
            "kcore": self.kcore,
            "dedup_consecutive": self.dedup_consecutive,
            "min_rating": self.min_rating,
        }
        if self.drop_timestamps:
            options["drop_timestamps"] = True
        return options


@dataclass
class PreparedLog:
    """User-major, chronological log with dense ids; `user` is sorted ascending."""

    user: np.ndarray  # int32, 1..U
    item: np.ndarray  # int32, 1..N
    timestamp: np.ndarray | None
    raw_users: np.ndarray  # raw_users[u - 1] = original id of user u
    raw_items: np.ndarray  # raw_items[i - 1] = original id of item i

    @property
    def num_users(self) -> int:
        return len(self.raw_users)

    @property
    def num_items(self) -> int:
        return len(self.raw_items)


def _counts(keys: np.ndarray) -> np.ndarray:
    """Per-row count of the row's key (how many rows share it)."""
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    return counts[inverse]


def prepare_log(log: Interactions, options: PrepareOptions, source: str = "the source") -> PreparedLog:
    if options.min_rating is not None:
        if not math.isfinite(options.min_rating):  # nan keeps no rating, -inf every one: neither is a filter
            raise ModsarError(f"--min-rating must be a finite number; got {options.min_rating}")
        if log.rating is None:
            raise ModsarError(f"--min-rating given but {source} has no rating column")
        log = log.take(np.flatnonzero(log.rating >= options.min_rating))

    # Chronological, user-major order; a stable sort keeps file order for ties and for time-less formats.
    user_codes = np.unique(log.user, return_inverse=True)[1]
    keys = (user_codes,) if log.timestamp is None else (log.timestamp, user_codes)
    log = log.take(np.lexsort(keys))

    if options.dedup_consecutive and len(log):
        same_user = log.user[1:] == log.user[:-1]
        repeat = np.concatenate([[False], same_user & (log.item[1:] == log.item[:-1])])
        log = log.take(np.flatnonzero(~repeat))

    while len(log):
        keep = np.ones(len(log), dtype=bool)
        if options.min_item_count > 1:
            keep &= _counts(log.item) >= options.min_item_count
        if options.min_user_count > 1:
            keep &= _counts(log.user) >= options.min_user_count
        if keep.all():
            break
        log = log.take(np.flatnonzero(keep))
        if not options.kcore:
            break

    if not len(log):
        raise ModsarError(
            f"nothing is left of {source} after filtering (min_user_count={options.min_user_count}, "
            f"min_item_count={options.min_item_count}, min_rating={options.min_rating}); "
            "lower the thresholds"
        )
    raw_users, user = np.unique(log.user, return_inverse=True)
    raw_items, item = np.unique(log.item, return_inverse=True)
    order = np.argsort(user, kind="stable")  # raw user ids may not sort like their first appearance
    ts = None if log.timestamp is None else log.timestamp[order]
    return PreparedLog(
        (user[order] + 1).astype(np.int32), (item[order] + 1).astype(np.int32), ts, raw_users, raw_items
    )


def density(interactions: int, users: int, items: int) -> float:
    """Interactions / (users x items), the papers' Table 1 density: it counts interactions, not distinct
    (user, item) pairs, so it is the filled share of the user-item matrix (at most 1, 100%) only where no
    pair repeats; a log with repeats (a user who comes back to an item) can go above 1."""
    return interactions / max(users * items, 1)


def density_text(stats: dict) -> str:
    """Density as every command shows it: a percentage to three significant digits ("5.97%", "0.0734%"),
    from the counts, so `data prepare`, `data stats` and any manifest give the same figure."""
    percent = 100 * density(stats["interactions"], stats["users"], stats["items"])
    decimals = max(0, 2 - math.floor(math.log10(percent))) if percent > 0 else 0
    return f"{percent:.{decimals}f}%"


MIN_ITEMS = 2  # with one item every ranking puts the target first: every metric is 1.0
EVALUABLE_LENGTH = 3  # leave-one-out needs a training item, a validation and a test target (split.py)


def statistics(user: np.ndarray, num_users: int, num_items: int) -> dict:
    """The paper's Table 1 figures (plus length range) for a prepared log, and how many users can be
    evaluated: only users with 3+ interactions get a validation and a test target."""
    lengths = np.bincount(user, minlength=num_users + 1)[1:]
    n = int(lengths.sum())
    return {
        "users": int(num_users),
        "items": int(num_items),
        "interactions": n,
        "avg_length": round(n / max(num_users, 1), 4),
        "min_length": int(lengths.min()) if len(lengths) else 0,
        "max_length": int(lengths.max()) if len(lengths) else 0,
        "density": float(f"{density(n, num_users, num_items):.6g}"),  # 6 significant digits at any size
        "evaluable_users": int((lengths >= EVALUABLE_LENGTH).sum()),
    }
