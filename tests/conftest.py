from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def isolated_data_root(tmp_path, monkeypatch):
    """Every test gets its own prepared-datasets folder, and a small torch thread count."""
    root = tmp_path / "datasets"
    monkeypatch.setenv("MODSAR_DATA", str(root))
    torch.set_num_threads(1)
    return root


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
