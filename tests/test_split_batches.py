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
    tagged = LeaveOneOut(
        np.arange(1, len(split.items) + 1), split.offsets, len(split.items)
    )  # item = position+1
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


def test_paper_sse_gates_rows_then_replaces_each_item_with_one_minus_p():
    """sse_style=paper (the ModSAR code): rows picked w.p. p, then items w.p. 1 - p; the overall rate is p(1 -
    p)."""
    split = synthetic_split()
    p = 0.2
    clean = next(iter(TrainBatches(split, "ar", 20, 100_000, padding_free=False, seed=3)))
    noisy = next(
        iter(
            TrainBatches(
                split, "ar", 20, 100_000, padding_free=False, item_sse_prob=p, sse_style="paper", seed=3
            )
        )
    )
    order = torch.argsort(clean.users), torch.argsort(noisy.users)
    real = clean.inputs[order[0]] > 0
    changed = (clean.inputs[order[0]] != noisy.inputs[order[1]]) & real
    rows_hit = changed.any(1)
    assert abs(changed.sum() / real.sum() - p * (1 - p)) < 0.01  # a few replacements draw the same item back
    assert abs(rows_hit.float().mean() - p) < 0.02
    hit_rate = changed[rows_hit].sum() / real[rows_hit].sum()
    assert abs(hit_rate - (1 - p)) < 0.02
    assert torch.equal(clean.labels[order[0]], noisy.labels[order[1]])  # labels keep the true items


def test_random_batch_order_mixes_lengths_like_dense_batches():
    """batching=random: the same user groups as unbucketed batches, each only as wide as its longest row."""
    split = synthetic_split()
    mixed = list(TrainBatches(split, "ar", 20, 64, batching="random", seed=5))
    dense = list(TrainBatches(split, "ar", 20, 64, padding_free=False, seed=5))
    assert [b.users.tolist() for b in mixed] == [b.users.tolist() for b in dense]
    for m, d in zip(mixed, dense, strict=True):
        width = m.inputs.size(1)
        assert width == int((d.inputs > 0).sum(1).max()) and torch.equal(m.inputs, d.inputs[:, -width:])


def test_token_batches_hold_an_average_batchs_positions_and_every_user_once():
    """batching=tokens: each batch fills (at most one row past) the positions of an average 64-user batch."""
    split = synthetic_split()
    batches = TrainBatches(split, "ar", 20, 64, batching="tokens", seed=2)
    budget = 64 * batches.row_lengths.mean()
    epoch = list(batches)
    positions = np.array([int((b.labels > 0).sum()) for b in epoch])
    users = np.concatenate([b.users.numpy() for b in epoch])
    assert sorted(users.tolist()) == (batches.users + 1).tolist()
    assert positions.max() <= budget + batches.row_lengths.max()
    assert np.median(positions) > 0.8 * budget  # full batches, except the last of each sorted chunk
    assert abs(len(epoch) - len(batches)) <= 2  # about as many steps as user batches
    slots = {
        order: sum(b.inputs.numel() for b in TrainBatches(split, "ar", 20, 64, batching=order, seed=2))
        for order in ("length", "random")
    }
    tokens = sum(b.inputs.numel() for b in epoch)
    assert tokens < 1.1 * slots["length"] < slots["random"]  # still narrow: similar lengths share a batch


def test_prefix_samples_are_every_training_prefix_once_labelled_at_the_end():
    """samples=prefixes: one row per training prefix items[start:p] -> items[p] (RecBole's augmentation), each
    labelled at its last column only, the window the last max_len items before p; nothing held out."""
    split = small_split()  # training parts: [1 2 3 4], [7 8], [9], [12 13]
    batches = TrainBatches(split, "ar", 2, 3, samples="prefixes", seed=1)
    rows = []
    for batch in batches:
        assert (batch.labels[:, :-1] == 0).all() and (batch.labels[:, -1] > 0).all()
        rows += [
            (u, tuple(v for v in x if v), y)
            for u, x, y in zip(
                batch.users.tolist(), batch.inputs.tolist(), batch.labels[:, -1].tolist(), strict=True
            )
        ]
    assert sorted(rows) == [(1, (1,), 2), (1, (1, 2), 3), (1, (2, 3), 4), (2, (7,), 8), (4, (12,), 13)]
    assert batches.num_targets == 5 and len(batches) == 2  # batch_size rows per batch, not a token budget


def test_prefix_samples_cover_the_same_positions_as_sequences():
    """With windows wide enough for every history and no absolute positions (which count back from a row's
    last item, so they do differ: a prefix row puts its last item where evaluation does), a causal model's
    states are the same either way: the summed CE over prefix rows equals that over whole-sequence rows."""
    from modsar.config import ModelConfig
    from modsar.model.modular import ModularSAR

    split = synthetic_split()
    longest = int((split.train_ends - split.starts).max())
    torch.manual_seed(0)
    model = ModularSAR(
        ModelConfig(hidden_size=16, num_heads=2, dropout=0.0, attn_dropout=0.0, positional="none"),
        split.num_items,
        split.num_users,
        longest,
        "ar",
    ).eval()

    def summed_ce(samples: str) -> tuple[float, int]:
        total, count = 0.0, 0
        with torch.no_grad():
            for batch in TrainBatches(split, "ar", longest, 512, samples=samples):
                h = model(batch.inputs, batch.users)[batch.labels > 0]
                scores = model.score(h)
                total += torch.nn.functional.cross_entropy(
                    scores, batch.labels[batch.labels > 0] - 1, reduction="sum"
                ).item()
                count += int((batch.labels > 0).sum())
        return total, count

    (by_sequence, n_seq), (by_prefix, n_pre) = summed_ce("sequences"), summed_ce("prefixes")
    assert n_seq == n_pre > 10_000
    assert by_prefix == pytest.approx(by_sequence, rel=1e-5)


def test_prefix_samples_refuse_ae():
    with pytest.raises(ValueError, match="AR objective"):
        TrainBatches(small_split(), "ae", 10, 8, samples="prefixes")
