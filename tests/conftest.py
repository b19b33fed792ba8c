from __future__ import annotations

import pytest
import torch

# One torch thread per test process, from the start: module-scoped fixtures (a trained model shared by a
# module's tests) run before the per-test fixture below, and two pytest-xdist workers each running torch's
# default of one thread per core oversubscribe the cores (a fixture that trains in 8 s took 86 s so).
torch.set_num_threads(1)

README_LEFT_OUT = (
    "the README's main job (tests/test_readme.py, marked readme, ~7 min) was left out: "
    "run `pytest --readme -m readme` (CI does)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    """--readme: also run the README's main job as written in a fresh clone. It installs everything and runs
    a real search, so a plain `pytest` (any -m included) leaves it out and says so; CI runs it."""
    parser.addoption("--readme", action="store_true", help="also run the tests marked readme (CI does)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without --readme, the readme-marked tests are deselected (counted as such), never skipped."""
    if config.getoption("--readme"):
        return
    left = [item for item in items if item.get_closest_marker("readme")]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if not item.get_closest_marker("readme")]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Say that the README's job was left out, so a deselected test is never mistaken for a passed one."""
    if not config.getoption("--readme"):
        terminalreporter.write_line(README_LEFT_OUT)


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
