"""Leave-one-out split over CSR sequences (flat item array + per-user offsets).

For a user with n >= 3 interactions: items[:n-2] train, items[n-2] validation target, items[n-1] test
target. Validation ranks with history items[:n-2]; test ranks with history items[:n-1]. Users with fewer
than 3 interactions cannot be evaluated; their items are training data only (the SASRec convention).
No test item and no validation item ever reaches a training input or label.
`TemporalSplit` is the global-time alternative (`data.split=temporal`); `make_split` picks one for a config.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modsar.config import parse_dates


@dataclass
class LeaveOneOut:
    items: np.ndarray  # int64, all users' items, user-major, chronological
    offsets: np.ndarray  # int64 (U + 1,): user u (1-based) owns items[offsets[u-1]:offsets[u]]
    num_items: int
    timestamp: np.ndarray | None = None  # float64 seconds aligned with items, where the dataset has them

    @classmethod
    def from_log(
        cls,
        user: np.ndarray,
        item: np.ndarray,
        num_users: int,
        num_items: int,
        timestamp: np.ndarray | None = None,
    ) -> LeaveOneOut:
        counts = np.bincount(user, minlength=num_users + 1)[1:]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(
            item.astype(np.int64),
            offsets,
            num_items,
            None if timestamp is None else timestamp.astype(np.float64),
        )

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
    def owner(self) -> np.ndarray:
        """The 0-based user of every position of `items`."""
        return np.repeat(np.arange(self.num_users), self.lengths)

    @property
    def eval_users(self) -> np.ndarray:
        """0-based indices of users that have a validation and a test target."""
        return np.flatnonzero(self.lengths >= 3)

    @property
    def train_ends(self) -> np.ndarray:
        """Exclusive end of each user's training items (the last two are held out when n >= 3)."""
        n = self.lengths
        return self.starts + np.where(n >= 3, n - 2, n)

    @property
    def in_training(self) -> np.ndarray:
        """Whether each position of `items` is training data (before its user's `train_ends`)."""
        return np.arange(len(self.items)) < self.train_ends[self.owner]

    def targets(self, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(users, history_end, target) for `split` in {valid, test}; history =
        items[starts[u]:history_end]."""
        users = self.eval_users
        shift = {"valid": 2, "test": 1}[split]
        end = self.offsets[users + 1] - shift
        return users, end, self.items[end]


@dataclass
class TemporalSplit(LeaveOneOut):
    """One global time cut for every user (the data-first paper §2): training reads only events before the
    validation cut; validation targets lie in [valid cut, test cut), test targets at or after the test cut.
    A target's history is the user's events strictly earlier in time (events that share its timestamp are
    left out), so a test history includes the validation period. `every=False` takes each user's first event
    in the window (one target per user), `every=True` every event in it. Targets without any earlier event
    are left out (nothing to condition on). `items` must be chronological within each user."""

    valid_cut: float = 0.0
    test_cut: float = 0.0
    every: bool = False

    @property
    def stamps(self) -> np.ndarray:
        """The timestamps (a temporal split always has them)."""
        assert self.timestamp is not None, "a temporal split is built from a timed log"
        return self.timestamp

    @classmethod
    def from_timed_log(
        cls,
        user: np.ndarray,
        item: np.ndarray,
        timestamp: np.ndarray,
        num_users: int,
        num_items: int,
        valid_cut: float,
        test_cut: float,
        every: bool = False,
    ) -> TemporalSplit:
        """The split of a user-major log; refuses one whose events are not in time order within each user
        (a history would then not end at its latest event) and cuts that leave a window without targets."""
        from modsar.errors import ModsarError

        base = LeaveOneOut.from_log(user, item, num_users, num_items)
        timestamp = timestamp.astype(np.float64)
        same_user = user[1:] == user[:-1]
        if (same_user & (timestamp[1:] < timestamp[:-1])).any():
            raise ModsarError(
                "temporal split: events are not in time order within each user; prepare the log "
                "with `modsar data prepare` (it sorts by timestamp)"
            )
        if not valid_cut < test_cut:
            raise ModsarError(
                f"temporal split: the validation cut ({when(valid_cut)}) must come before the test "
                f"cut ({when(test_cut)}); with many equal timestamps, pick quantiles further apart or "
                "dates"
            )
        split = cls(base.items, base.offsets, num_items, timestamp, valid_cut, test_cut, every)
        for which in ("valid", "test"):
            if not len(split.targets(which)[0]):
                raise ModsarError(
                    f"temporal split: no {which} target (cuts {when(valid_cut)} and "
                    f"{when(test_cut)}; the data spans {when(timestamp.min())} to "
                    f"{when(timestamp.max())}); move the cuts "
                    "inside the data (data.split_valid / data.split_test, or data.split_dates)"
                )
        return split

    @property
    def train_ends(self) -> np.ndarray:
        """Each user's events before the validation cut (chronological, so a prefix)."""
        before = np.bincount(self.owner, weights=self.stamps < self.valid_cut, minlength=self.num_users)
        return self.starts + before.astype(np.int64)

    @property
    def eval_users(self) -> np.ndarray:
        """0-based users with a validation or a test target."""
        return np.unique(np.concatenate([self.targets("valid")[0], self.targets("test")[0]]))

    def _history_ends(self) -> np.ndarray:
        """For every position, the index of its user's first event with the same timestamp (its history
        end)."""
        owner, ts = self.owner, self.stamps
        index = np.arange(len(ts))
        new_run = np.ones(len(ts), dtype=bool)
        new_run[1:] = (owner[1:] != owner[:-1]) | (ts[1:] != ts[:-1])
        return np.maximum.accumulate(np.where(new_run, index, 0))

    def targets(self, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lo, hi = {"valid": (self.valid_cut, self.test_cut), "test": (self.test_cut, np.inf)}[split]
        owner = self.owner
        ends = self._history_ends()
        positions = np.flatnonzero((self.stamps >= lo) & (self.stamps < hi) & (ends > self.starts[owner]))
        if not self.every:  # the first such event of each user
            positions = positions[np.unique(owner[positions], return_index=True)[1]]
        users, history_end = owner[positions], ends[positions]
        if len(positions) and not (self.stamps[history_end - 1] < self.stamps[positions]).all():
            # never, by construction
            raise AssertionError("temporal split: a history reaches the time of its target")
        return users, history_end, self.items[positions]


def left_padded_windows(items: np.ndarray, starts: np.ndarray, ends: np.ndarray, width: int) -> np.ndarray:
    """The last `width` items of each range items[start:end], left-padded with 0 to shape (B, width)."""
    idx = ends[:, None] - width + np.arange(width)[None, :]
    real = idx >= starts[:, None]
    return np.where(real, items[np.clip(idx, 0, max(len(items) - 1, 0))], 0)


def history_index(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(row, item) pairs of every history item of each user in the batch, as flat arrays."""
    starts = split.starts[users]
    lengths = history_end - starts
    rows = np.repeat(np.arange(len(users)), lengths)
    within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return rows, split.items[np.repeat(starts, lengths) + within]


def make_split(cfg, dataset) -> LeaveOneOut:
    """The split a config asks for over a (viewed) dataset: leave-one-out, or one global time cut at the
    quantiles `data.split_valid` / `data.split_test` of all timestamps (or at `data.split_dates`)."""
    from modsar.errors import ModsarError

    if cfg.data.split == "loo":
        return LeaveOneOut.from_log(
            dataset.user, dataset.item, dataset.num_users, dataset.num_items, dataset.timestamp
        )
    if dataset.timestamp is None:
        raise ModsarError(
            f"data.split=temporal needs timestamps, and dataset '{dataset.name}' has none; use "
            "data.split=loo or prepare a timestamped log (ml-csv, ml-dat, inter with timestamps)"
        )
    valid_cut, test_cut = cut_times(cfg.data, dataset.timestamp)
    return TemporalSplit.from_timed_log(
        dataset.user,
        dataset.item,
        dataset.timestamp,
        dataset.num_users,
        dataset.num_items,
        valid_cut,
        test_cut,
        cfg.data.split_targets == "every",
    )


def when(seconds: float) -> str:
    """A time in seconds since 1970 (UTC) as people write it, for messages: the ISO date, with the time of
    day (to the second) only where it is not midnight, as `data.split_dates` takes it. Raw seconds mean
    nothing to a reader; ones out of the calendar's range (years 1 to 9999) are shown as seconds."""
    import datetime as dt

    try:
        moment = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=float(seconds))
    except (OverflowError, ValueError):
        return f"{seconds:g} seconds"
    if moment.replace(hour=0, minute=0, second=0, microsecond=0) == moment:
        return moment.date().isoformat()
    return f"{moment.date().isoformat()}T{moment.time().replace(microsecond=0).isoformat()}Z"


def cut_times(data_cfg, timestamp: np.ndarray) -> tuple[float, float]:
    """(validation cut, test cut) in seconds: ISO dates when `split_dates` is set, else timestamp
    quantiles."""
    if data_cfg.split_dates:
        first, second = parse_dates(data_cfg.split_dates)
        return first.timestamp(), second.timestamp()
    cuts = np.quantile(timestamp, [data_cfg.split_valid, data_cfg.split_test])
    return float(cuts[0]), float(cuts[1])


def rollout_targets(history_end: np.ndarray) -> np.ndarray:
    """Indices into `split.targets("test")` (whose `history_end` this reads) of the targets rolled out: the
    first of each distinct (user, history). Under `data.split_targets=every`, events that share a timestamp
    are targets with one history, and the first of them in stored order starts the true future (a history end
    is a position in `items`, so it names the user too)."""
    return np.unique(history_end, return_index=True)[1]
