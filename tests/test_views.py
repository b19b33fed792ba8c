"""data.view=item: each item's users in global time order become the sequences; refused without timestamps."""

from __future__ import annotations

import numpy as np
import pytest

from modsar.data.store import load_dataset, prepare_dataset
from modsar.data.views import viewed
from modsar.errors import ModsarError

# userId,movieId,rating,timestamp: item 10 is seen by users 2 (t=5), 1 (t=7), 3 (t=9); item 20 by 3 (t=1), 1
# (t=2), 2 (t=2, later in the file: ties keep the log order); item 30 by 1, 2, 3 (t = 30, 31, 32); item 40 by
# 3, 2
LOG = """userId,movieId,rating,timestamp
1,10,4,7
1,20,4,2
1,30,4,30
2,10,4,5
2,20,4,2
2,30,4,31
2,40,4,50
3,10,4,9
3,20,4,1
3,30,4,32
3,40,4,40
"""


@pytest.fixture
def timestamped(tmp_path):
    source = tmp_path / "ratings.csv"
    source.write_text(LOG)
    root = tmp_path / "data"
    prepare_dataset("tiny", sources=[source], fmt="ml-csv", root=root)
    return root


def sequences(data) -> list[list[int]]:
    """Each sequence's 'items' in order, by sequence id."""
    return [data.item[data.user == u].tolist() for u in range(1, data.num_users + 1)]


def test_the_item_view_orders_each_items_users_by_time(timestamped):
    data = load_dataset("tiny", timestamped)
    items = viewed(data, "item")
    assert (items.num_users, items.num_items) == (data.num_items, data.num_users)
    # stored ids are dense: map raw ids through the stored user sequences (user-major, time-ordered)
    by_user = sequences(data)
    raw_item = {10: None, 20: None, 30: None, 40: None}
    # user 1's time order is 20 (t=2), 10 (t=7), 30 (t=30): its first two stored items are 20 and 10
    raw_item[20], raw_item[10], raw_item[30] = by_user[0]
    raw_item[40] = by_user[1][-1]
    user_id = {raw: raw for raw in (1, 2, 3)}  # users keep their order when remapped (1, 2, 3)
    expected = {10: [2, 1, 3], 20: [3, 1, 2], 30: [1, 2, 3], 40: [3, 2]}
    got = sequences(items)
    for raw, users in expected.items():
        assert got[raw_item[raw] - 1] == [user_id[u] for u in users]
    assert np.all(np.diff(items.user) >= 0) and np.all(
        items.timestamp[items.user == raw_item[10]] == [5, 7, 9]
    )
    assert viewed(items, "item") is items and viewed(data, "user") is data


def test_training_on_the_item_view_is_recorded(timestamped, tmp_path, capsys):
    """`modsar train data.view=item` trains on 4 item sequences over 3 'items' (users) and its row says so."""
    from modsar.cli import main
    from modsar.records.rows import read_rows

    assert (
        main(
            [
                "train",
                "--dataset",
                "tiny",
                "--data-dir",
                str(timestamped),
                "--results",
                str(tmp_path / "r"),
                "--experiment",
                "v",
                "--quiet",
                "--no-checkpoint",
                "data.view=item",
                "train.max_epochs=1",
                "model.hidden_size=8",
                "model.num_heads=1",
                "train.patience=0",
            ]
        )
        == 0
    )
    row = read_rows(str(tmp_path / "r"), "v").iloc[0]
    assert row["data.view"] == "item" and row["status"] == "finished"


def test_no_timestamps_no_item_view():
    data = load_dataset("synthetic")
    with pytest.raises(
        ModsarError, match=r"data\.view=item needs timestamps, and dataset 'synthetic' has none"
    ):
        viewed(data, "item")
