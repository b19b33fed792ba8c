from __future__ import annotations

import pytest
import torch

# One torch thread per test process, from the start: module-scoped fixtures (a trained model shared by a
# module's tests) run before the per-test fixture below, and two pytest-xdist workers each running torch's
# default of one thread per core oversubscribe the cores (a fixture that trains in 8 s took 86 s so).
torch.set_num_threads(1)


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
