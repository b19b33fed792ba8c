"""Training batches and evaluation inputs, built vectorised from the CSR split.

Rows are left-padded (SASRec style), so the most recent item is always in the last column and positions
count back from it: padding never shifts a real token's position. With `padding_free` each batch is only as
wide as its longest row, and `batching` says who shares a batch:
  length  `batch_size` users of similar length (narrow batches; but the loss is a mean over the batch's
          positions, so a position of a short-history user weighs up to max_len times more than a long one)
  tokens  users of similar length, as many as fill the positions of an average `batch_size`-user batch
          (token-budget batching, as in NMT): narrow batches, and every position weighs the same
  random  `batch_size` random users (as SASRec code): equal weights, but most batches are max_len wide
Without `padding_free` every batch is `batch_size` random users, `max_len` wide.

`samples` says what one row is:
  sequences  a user's training window, labelled at every position (one pass trains every prefix at once)
  prefixes   one training prefix items[start:p] (its last max_len items), labelled at its last position only
             with items[p] (AR only): RecBole's data augmentation, the recipe DuoRec, CL4SRec and RecBole's
             SASRec train with. Every prefix is a row, those before a long history's last window too, so an
             epoch takes ~L times more optimizer steps and encodes far more tokens, and a per-sample term
             (DuoRec's contrastive views) covers every prefix, not each user's last; rows are batched
             `batch_size` at a time (`tokens` cuts by rows here, as `length` does)

AR: input = the last L training items before the last one, labels = the same window shifted by one.
AE: window of the last L + 1 training items, a fresh cloze mask every epoch (at least one mask per row).
At evaluation AR reads the last L history items; AE reads the last L history items plus a mask token, so
both directions see the same context (the original code gave AE one item less).
Every one of these differences lives in `NextItemRows` (AR) and `ClozeRows` (AE), picked by `task_rows`:
the batching code around them is the same for both tasks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from modsar.data.split import LeaveOneOut, left_padded_windows
from modsar.task import Task

# padding-free epochs sort rows by length within chunks of this many batches: batches stay narrow (little
# compute on padding) while their order across the epoch stays random; the memory estimate counts by it too
SORT_CHUNK_BATCHES = 64


@dataclass
class Batch:
    inputs: torch.Tensor  # (B, T) item ids, 0 = padding, N + 1 = mask
    labels: torch.Tensor  # (B, T) target item per position, 0 = no loss here
    users: torch.Tensor  # (B,) 1-based user ids (SSE-replaced during training when asked)
    # (B, T') AR: per row, another training prefix with the same next item
    partners: torch.Tensor | None = None
    partner_users: torch.Tensor | None = None  # (B,) their users
    times: torch.Tensor | None = None  # (B, T) float64 seconds before each row's last item (time_bias models)

    def to(self, device: torch.device) -> Batch:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return Batch(
            self.inputs.to(device, non_blocking=True),
            self.labels.to(device, non_blocking=True),
            self.users.to(device, non_blocking=True),
            move(self.partners),
            move(self.partner_users),
            move(self.times),
        )


class TaskRows(ABC):
    """How a task lays out a model row: which of a user's items a training row holds, which positions carry a
    label, which slots hide their time, and what the model reads at inference. The two subclasses side by
    side are everything batching does differently for AE and AR."""

    # a training row is at most max_len + extra_width items wide (AE's window holds the item a mask hides)
    extra_width: int
    # the row's inputs end this many items before its labels do (AR: the last item is only ever a label)
    input_shift: int
    # whether a row may be one prefix labelled with its next item only (`samples="prefixes"`)
    labels_prefixes: bool

    def row_lengths(self, spans: np.ndarray, max_len: int) -> np.ndarray:
        """Real (non-padding) positions of each training row reading items[start:end] (spans: end - start)."""
        return np.minimum(spans - self.input_shift, max_len + self.extra_width)

    @abstractmethod
    def labelled(self, row_lengths: np.ndarray, mask_prob: float) -> int:
        """Labelled positions per epoch over rows of these lengths (exact for AR, expected for AE)."""

    @abstractmethod
    def inputs_and_labels(
        self,
        items: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        width: int,
        rng: np.random.Generator,
        *,
        mask_prob: float,
        mask_token: int,
        last_only: bool,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(B, width) inputs and labels (0 = no loss) of training rows reading items[starts:ends];
        `last_only` labels a row's last position only (prefix rows)."""

    @abstractmethod
    def hidden_slots(self, inputs: np.ndarray, mask_token: int) -> np.ndarray | None:
        """Input slots whose own time must not be read (None: every slot's time is readable)."""

    @abstractmethod
    def with_inference_slot(self, windows: torch.Tensor, mask_token: int) -> torch.Tensor:
        """What the model reads to score the item after left-padded history `windows`: it scores the last
        column of the result."""

    @abstractmethod
    def with_inference_time(self, times: torch.Tensor) -> torch.Tensor:
        """The times beside `with_inference_slot`'s columns, from the history windows' own times."""


class NextItemRows(TaskRows):
    """AR: the inputs are the window before the last item, the labels the same window shifted one ahead
    (every position predicts the item after it), and inference scores the last history position."""

    extra_width = 0
    input_shift = 1
    labels_prefixes = True

    def labelled(self, row_lengths: np.ndarray, mask_prob: float) -> int:
        return int(row_lengths.sum())

    def inputs_and_labels(
        self,
        items: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        width: int,
        rng: np.random.Generator,
        *,
        mask_prob: float,
        mask_token: int,
        last_only: bool,
    ) -> tuple[np.ndarray, np.ndarray]:
        inputs = left_padded_windows(items, starts, ends - 1, width)
        labels = left_padded_windows(items, starts + 1, ends, width)
        if last_only:  # the prefix's next item only: every shorter prefix is its own row
            labels[:, :-1] = 0
        return inputs, labels

    def hidden_slots(self, inputs: np.ndarray, mask_token: int) -> np.ndarray | None:
        return None

    def with_inference_slot(self, windows: torch.Tensor, mask_token: int) -> torch.Tensor:
        return windows

    def with_inference_time(self, times: torch.Tensor) -> torch.Tensor:
        return times


class ClozeRows(TaskRows):
    """AE: the inputs are the whole window with a fresh random cloze mask (at least one per row), labelled at
    the masked positions only; a masked slot reads the time of the item before it. Inference appends a mask
    token after the history and scores it; it takes the last history item's time."""

    extra_width = 1
    input_shift = 0
    labels_prefixes = False

    def labelled(self, row_lengths: np.ndarray, mask_prob: float) -> int:
        return int(mask_counts(row_lengths, mask_prob).sum())

    def inputs_and_labels(
        self,
        items: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        width: int,
        rng: np.random.Generator,
        *,
        mask_prob: float,
        mask_token: int,
        last_only: bool,
    ) -> tuple[np.ndarray, np.ndarray]:
        labels = left_padded_windows(items, starts, ends, width)
        inputs = labels.copy()
        real = labels > 0
        n_mask = mask_counts(real.sum(1), mask_prob).astype(np.int64)
        draw = np.where(real, rng.random(labels.shape), 2.0)  # padding sorts last
        rank = np.argsort(np.argsort(draw, axis=1), axis=1)
        masked = rank < n_mask[:, None]
        inputs[masked] = mask_token
        return inputs, np.where(masked, labels, 0)

    def hidden_slots(self, inputs: np.ndarray, mask_token: int) -> np.ndarray | None:
        return inputs == mask_token  # an item's time says something about it

    def with_inference_slot(self, windows: torch.Tensor, mask_token: int) -> torch.Tensor:
        return torch.cat([windows, torch.full((len(windows), 1), mask_token, device=windows.device)], dim=1)

    def with_inference_time(self, times: torch.Tensor) -> torch.Tensor:
        return F.pad(times, (0, 1))  # 0 s before the last history item


TASK_ROWS: dict[Task, TaskRows] = {Task.AR: NextItemRows(), Task.AE: ClozeRows()}


def task_rows(task: Task) -> TaskRows:
    """The row layout of `task` (a plain "ae" / "ar" string too)."""
    return TASK_ROWS[Task(task)]


def mask_counts(lengths: np.ndarray, mask_prob: float) -> np.ndarray:
    """AE's masks per row of `lengths` real items: round(length x mask_prob), at least one."""
    return np.maximum(1, np.round(lengths * mask_prob))


class TrainBatches:
    """One epoch of training batches per iteration; masks, SSE and order are re-drawn every epoch."""

    def __init__(
        self,
        split: LeaveOneOut,
        task: Task,
        max_len: int,
        batch_size: int,
        mask_prob: float = 0.2,
        padding_free: bool = True,
        item_sse_prob: float = 0.0,
        user_sse_prob: float = 0.0,
        seed: int = 0,
        batching: str = "tokens",
        sse_style: str = "token",
        partners: bool = False,
        samples: str = "sequences",
        times: bool = False,
    ) -> None:
        self.task = Task(task)
        self.layout = task_rows(self.task)
        if samples == "prefixes" and not self.layout.labels_prefixes:
            raise ValueError("samples='prefixes' labels each prefix's next item: an AR objective")
        self.split, self.max_len, self.batch_size = split, max_len, batch_size
        self.mask_prob, self.padding_free, self.batching = mask_prob, padding_free, batching
        self.item_sse_prob, self.user_sse_prob, self.sse_style = item_sse_prob, user_sse_prob, sse_style
        self.samples, self.times = samples, times
        if times and split.timestamp is None:
            raise ValueError("times=True needs a split with timestamps")
        self.rng = np.random.default_rng(seed)
        ends = split.train_ends
        trained = np.flatnonzero(ends - split.starts >= 2)  # a training row needs an input and a label
        # row r reads items[starts[r]:ends[r] - 1] and predicts items[starts[r] + 1:ends[r]]; a user's rows
        # share one start, so prefix rows differ only in their end (the prefix p -> items[p] ends at p + 1)
        if samples == "prefixes":
            counts = ends[trained] - split.starts[trained] - 1
            self.users = np.repeat(trained, counts)
            self.ends = (
                np.arange(counts.sum())
                - np.repeat(np.cumsum(counts) - counts, counts)
                + np.repeat(split.starts[trained] + 2, counts)
            )
        else:
            self.users, self.ends = trained, ends[trained]
        self.starts = split.starts[self.users]
        self.row_lengths = self.layout.row_lengths(self.ends - self.starts, max_len)
        self.mask_token = split.num_items + 1
        self.partner_index = SameTarget(split, trained) if partners else None

    def __len__(self) -> int:
        return -(-len(self.users) // self.batch_size)

    @property
    def num_targets(self) -> int:
        """Training positions with a label per epoch (AR: exact; AE: expected)."""
        if self.samples == "prefixes":
            return len(self.users)
        return self.layout.labelled(self.row_lengths, self.mask_prob)

    def epoch_plan(self) -> list[np.ndarray]:
        """The row indices of each batch of one epoch, in training order (draws the epoch's shuffle)."""
        perm = self.rng.permutation(len(self.users))
        if not len(perm):
            return []
        if not self.padding_free or self.batching == "random":
            return [perm[i : i + self.batch_size] for i in range(0, len(perm), self.batch_size)]
        # Sort chunks of ~64 batches by length so batches are narrow but still random, then shuffle batches.
        chunk = self.batch_size * SORT_CHUNK_BATCHES
        budget = self.batch_size * self.row_lengths.mean()  # "tokens": positions of an average batch
        batches = []
        for i in range(0, len(perm), chunk):
            part = perm[i : i + chunk]
            part = part[np.argsort(self.row_lengths[part], kind="stable")]
            if self.batching == "tokens" and self.samples == "sequences":
                # cut where the running position count crosses a multiple of the budget
                group = (np.cumsum(self.row_lengths[part]) - 1) // budget
                cuts = np.flatnonzero(np.diff(group)) + 1
                batches += np.split(part, cuts)
            else:
                batches += [part[j : j + self.batch_size] for j in range(0, len(part), self.batch_size)]
        return [batches[i] for i in self.rng.permutation(len(batches))]

    def __iter__(self) -> Iterator[Batch]:
        for rows in self.epoch_plan():
            yield self.make(rows)

    def make(self, rows: np.ndarray) -> Batch:
        """The batch of training rows `rows`: draws its masks, then its item SSE, user SSE and partners."""
        starts, ends = self.starts[rows], self.ends[rows]
        layout = self.layout
        width = int(self.row_lengths[rows].max()) if self.padding_free else self.max_len + layout.extra_width
        inputs, labels = layout.inputs_and_labels(
            self.split.items,
            starts,
            ends,
            width,
            self.rng,
            mask_prob=self.mask_prob,
            mask_token=self.mask_token,
            last_only=self.samples == "prefixes",
        )
        inputs = self.swap_items(inputs)
        times = None
        if self.times:
            hidden = layout.hidden_slots(inputs, self.mask_token)
            times = relative_times(self.split, starts, ends - layout.input_shift, width, hidden)
        batch = Batch(
            torch.from_numpy(inputs),
            torch.from_numpy(labels),
            torch.from_numpy(self.swap_users(self.users[rows] + 1)),
            times=None if times is None else torch.from_numpy(times),
        )
        if self.partner_index is not None:
            prefixes, owners = self.partner_index.draw(self.ends[rows] - 1, self.max_len, self.rng)
            batch.partners, batch.partner_users = torch.from_numpy(prefixes), torch.from_numpy(owners + 1)
        return batch

    def swap_items(self, inputs: np.ndarray) -> np.ndarray:
        """Item SSE on training inputs only (labels keep the true items): real, unmasked items replaced by
        uniform random ones."""
        if self.item_sse_prob <= 0:
            return inputs
        p = self.item_sse_prob
        if self.sse_style == "paper":  # the ModSAR code: pick a row w.p. p, then each of its items w.p. 1 - p
            drawn = (self.rng.random((len(inputs), 1)) < p) & (self.rng.random(inputs.shape) >= p)
        else:
            drawn = self.rng.random(inputs.shape) < p
        swap = (inputs > 0) & (inputs != self.mask_token) & drawn
        return np.where(swap, self.rng.integers(1, self.split.num_items + 1, inputs.shape), inputs)

    def swap_users(self, users: np.ndarray) -> np.ndarray:
        """User SSE: 1-based `users` replaced by uniform random users w.p. user_sse_prob."""
        if self.user_sse_prob <= 0:
            return users
        swap = self.rng.random(len(users)) < self.user_sse_prob
        return np.where(swap, self.rng.integers(1, self.split.num_users + 1, len(users)), users)


class SameTarget:
    """Every training prefix by its next item, to draw a same-target partner for a sequence (DuoRec's
    supervised view). The prefix items[start_u:p] of user u is named by p, an index into the split's `items`
    inside u's training items with p > start_u (a non-empty prefix); its next item is items[p]."""

    def __init__(self, split: LeaveOneOut, users: np.ndarray) -> None:
        starts, ends = split.starts[users], split.train_ends[users]
        counts = np.maximum(ends - starts - 1, 0)
        owners = np.repeat(users, counts)
        # every prefix end p, user by user: ascending, since users and their items are stored in order
        self.positions = (
            np.arange(counts.sum())
            - np.repeat(np.cumsum(counts) - counts, counts)
            + np.repeat(starts + 1, counts)
        )
        order = np.argsort(split.items[self.positions], kind="stable")  # grouped by next item
        self.by_target, self.owners = self.positions[order], owners[order]
        # prefix i of `positions` sits at rank[i] in by_target
        self.rank = np.empty(len(order), dtype=np.int64)
        self.rank[order] = np.arange(len(order))
        self.first = np.searchsorted(split.items[self.by_target], np.arange(split.num_items + 2))  # per item
        self.items, self.starts = split.items, split.starts

    def draw(self, own: np.ndarray, max_len: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """For each own prefix end (a row's last label), another prefix with the same next item, left-padded
        to the widest drawn (at most max_len), and its 0-based user; a target nobody else has gives the row's
        own prefix back (as DuoRec does)."""
        target = self.items[own]
        lo, hi = self.first[target], self.first[target + 1]
        own_rank = self.rank[np.searchsorted(self.positions, own)]
        others = hi - lo - 1
        pick = lo + (rng.random(len(own)) * np.maximum(others, 1)).astype(np.int64)
        pick += pick >= own_rank  # skip the row's own prefix
        pick = np.where(others > 0, pick, own_rank)
        ends, owners = self.by_target[pick], self.owners[pick]
        begin = np.maximum(self.starts[owners], ends - max_len)
        width = int((ends - begin).max()) if len(own) else 1
        return left_padded_windows(self.items, begin, ends, width), owners


def relative_times(
    split: LeaveOneOut, starts: np.ndarray, ends: np.ndarray, width: int, hidden: np.ndarray | None = None
) -> np.ndarray:
    """(B, width) float64 seconds of each window item of left_padded_windows(items, starts, ends, width)
    before the window's last item (<= 0; padding 0). float64: float32 holds whole seconds only up to ~194
    days, and a 10-year window would round a 50 s gap to 32 s (a different bucket).

    `hidden` (B, width) marks slots whose own time must not be read (AE's masks: an item's time says
    something about it); each takes the time of the nearest readable slot before it, or after it where none
    is before."""
    assert split.timestamp is not None, "relative_times needs a timestamped split"
    t = left_padded_windows(split.timestamp, starts, ends, width)
    real = np.arange(width)[None, :] >= width - np.minimum(ends - starts, width)[:, None]
    if hidden is not None:
        readable, column = real & ~hidden, np.arange(width)
        before = np.maximum.accumulate(np.where(readable, column, -1), axis=1)
        after = np.minimum.accumulate(np.where(readable, column, width)[:, ::-1], axis=1)[:, ::-1]
        source = np.where(before >= 0, before, np.where(after < width, after, column))
        t = np.where(readable.any(1, keepdims=True), np.take_along_axis(t, source, axis=1), 0.0)
    return np.where(real, t - t[:, -1:], 0.0)


def history_windows(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, max_len: int
) -> torch.Tensor:
    """(B, max_len) each user's last max_len history items before `history_end`, left-padded."""
    return torch.from_numpy(left_padded_windows(split.items, split.starts[users], history_end, max_len))


def history_times(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, max_len: int
) -> torch.Tensor:
    """The relative times of `history_windows`; refused for a split without timestamps."""
    if split.timestamp is None:
        from modsar.errors import ModsarError

        raise ModsarError(
            "this model reads timestamps (model.time_bias), and the dataset it is evaluated on has "
            "none; use the timestamped dataset it was trained on (check --data-dir)"
        )
    return torch.from_numpy(relative_times(split, split.starts[users], history_end, max_len))


def eval_times(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, task: Task, max_len: int
) -> torch.Tensor:
    """The relative times of `eval_inputs`' windows; AE's appended mask token takes the last history
    item's."""
    return task_rows(task).with_inference_time(history_times(split, users, history_end, max_len))


def eval_inputs(
    split: LeaveOneOut, users: np.ndarray, history_end: np.ndarray, task: Task, max_len: int
) -> torch.Tensor:
    """Left-padded model inputs for evaluation; AE appends the mask token after the history."""
    windows = history_windows(split, users, history_end, max_len)
    return task_rows(task).with_inference_slot(windows, split.num_items + 1)
