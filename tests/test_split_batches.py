"""Leave-one-out split and training batches: no leakage, SSE on training inputs only, fresh masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from modsar.data.batches import TrainBatches, eval_inputs
from modsar.data.split import LeaveOneOut, left_padded_windows
from modsar.data.store import load_dataset

N = 300


def synthetic_split() -> LeaveOneOut:
    data = load_dataset("synthetic")
    return LeaveOneOut.from_log(data.user, data.item, data.num_users, data.num_items)


def small_split() -> LeaveOneOut:
    seqs = [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 11], [12, 13, 14, 15]]
    user = np.repeat(np.arange(1, 5), [len(s) for s in seqs])
    return LeaveOneOut.from_log(user, np.concatenate(seqs), 4, 20)


def test_leave_one_out_targets_and_histories():
    split = small_split()
    users, end, target = split.targets("test")
    assert users.tolist() == [0, 2, 3] and target.tolist() == [6, 11, 15]
    users, end, target = split.targets("valid")
    assert target.tolist() == [5, 10, 14]
    hist = left_padded_windows(split.items, split.starts[users], end, 4)
    assert hist.tolist() == [[1, 2, 3, 4], [0, 0, 0, 9], [0, 0, 12, 13]]
    assert (split.train_ends - split.starts).tolist() == [4, 2, 1, 2]  # user 2 (n=2): all items train


def held_out(split: LeaveOneOut) -> tuple[set, set]:
    """Log positions of the validation and test targets (positions, not ids, so repeats are handled)."""
    _, end_v, _ = split.targets("valid")
    _, end_t, _ = split.targets("test")
    return set(end_v.tolist()), set(end_t.tolist())


@pytest.mark.parametrize("task", ["ar", "ae"])
@pytest.mark.parametrize("padding_free", [True, False])
def test_no_test_item_in_training_and_no_valid_item_in_labels(task, padding_free):
    """Trace every training input/label back to its position in the log: none is a held-out position."""
    split = synthetic_split()
    tagged = LeaveOneOut(np.arange(1, len(split.items) + 1), split.offsets, len(split.items))  # item = position+1
    valid_pos, test_pos = held_out(split)
    batches = TrainBatches(tagged, task, 20, 64, mask_prob=0.3, padding_free=padding_free)
    seen_inputs, seen_labels = set(), set()
    for batch in batches:
        inputs = batch.inputs[(batch.inputs > 0) & (batch.inputs <= len(split.items))]
        seen_inputs.update((inputs - 1).tolist())
        seen_labels.update((batch.labels[batch.labels > 0] - 1).tolist())
    assert not seen_inputs & test_pos and not seen_labels & test_pos
    assert not seen_labels & valid_pos and not seen_inputs & valid_pos
    assert len(seen_labels) > 1000  # the check looked at real data


def test_ar_labels_are_next_items():
    split = small_split()
    batch = next(iter(TrainBatches(split, "ar", 10, 8, padding_free=False)))
    row = batch.inputs[batch.users == 1][0]
    label = batch.labels[batch.users == 1][0]
    assert row[-3:].tolist() == [1, 2, 3] and label[-3:].tolist() == [2, 3, 4]
    assert row[:-3].eq(0).all() and label[:-3].eq(0).all()


def test_ae_masks_are_redrawn_each_epoch_and_labels_only_at_masks():
    split = synthetic_split()
    batches = TrainBatches(split, "ae", 20, 10_000, mask_prob=0.25)
    first, second = next(iter(batches)), next(iter(batches))
    mask_token = split.num_items + 1
    for b in (first, second):
        masked = b.inputs == mask_token
        assert torch.equal(masked, b.labels > 0)
        assert masked.sum(1).min() >= 1
        frac = masked.sum().item() / (b.inputs > 0).sum().item()
        assert 0.2 < frac < 0.3
    order1, order2 = first.users.argsort(), second.users.argsort()
    assert not torch.equal(first.inputs[order1] == mask_token, second.inputs[order2] == mask_token)


def test_padding_free_batches_are_narrow():
    split = synthetic_split()
    narrow = [b.inputs.shape[1] for b in TrainBatches(split, "ar", 30, 32, padding_free=True)]
    wide = [b.inputs.shape[1] for b in TrainBatches(split, "ar", 30, 32, padding_free=False)]
    assert set(wide) == {30} and np.mean(narrow) < 25


def test_sse_touches_training_inputs_only():
    split = synthetic_split()
    plain = TrainBatches(split, "ar", 20, 10_000, seed=5)
    sse = TrainBatches(split, "ar", 20, 10_000, item_sse_prob=0.3, user_sse_prob=0.5, seed=5)
    a, b = next(iter(plain)), next(iter(sse))
    assert torch.equal(a.labels, b.labels)  # labels are never replaced
    real = a.inputs > 0
    changed = (a.inputs != b.inputs)[real].float().mean().item()
    assert 0.25 < changed < 0.31  # ~p, minus replacements that drew the same item
    assert 0.4 < (a.users != b.users).float().mean().item() < 0.6
    # Evaluation inputs are built from the log alone: SSE settings cannot reach them.
    users, end, _ = split.targets("test")
    expected = left_padded_windows(split.items, split.starts[users], end, 20)
    assert torch.equal(eval_inputs(split, users, end, "ar", 20), torch.from_numpy(expected))


def test_ae_eval_input_is_history_plus_mask():
    split = small_split()
    users, end, _ = split.targets("test")
    x = eval_inputs(split, users, end, "ae", 3)
    assert x.tolist() == [[3, 4, 5, 21], [0, 9, 10, 21], [12, 13, 14, 21]]
