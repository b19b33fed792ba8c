"""Views of a prepared log: whose history is a sequence (`data.view`, the data-first paper §2).

  user  each user's items in time order: the log as stored (the default)
  item  each item's users in global time order: the sequences are items and the "items" are users, so the
        model predicts the next user of an item. Needs timestamps: across users, only time orders events.
A view is applied when a model's data is loaded (training, search selection, analysis), so every command
reads the same sequences for a config; the choice is a config key, hence a column of every result row.
"""

from __future__ import annotations

import numpy as np

from modsar.data.store import StoredDataset
from modsar.errors import ModsarError


def viewed(dataset: StoredDataset, view: str) -> StoredDataset:
    """`dataset` as `view` sees it (the same object for the stored view, or when already in that view)."""
    if dataset.manifest.get("view", "user") == view:
        return dataset
    if view != "item":
        raise ModsarError(f"'data.view' {view!r} cannot be made from a {dataset.manifest.get('view')} view")
    if dataset.timestamp is None:
        raise ModsarError(
            f"data.view=item needs timestamps, and dataset '{dataset.name}' has none (its source "
            "format gives only the order within each user); prepare a timestamped log (ml-csv, "
            "ml-dat, inter with a timestamp column, pairs with a third column)"
        )
    # by item, time, log order
    order = np.lexsort((np.arange(len(dataset.item)), dataset.timestamp, dataset.item))
    return StoredDataset(
        dataset.name,
        dataset.item[order],
        dataset.user[order],
        dataset.num_items,
        dataset.num_users,
        {**dataset.manifest, "view": "item"},
        dataset.timestamp[order],
    )
