from __future__ import annotations

import pytest
import torch

# One torch thread per test process, from the start: module-scoped fixtures (a trained model shared by a
# module's tests) run before the per-test fixture below, and two pytest-xdist workers each running torch's
# default of one thread per core oversubscribe the cores (a fixture that trains in 8 s took 86 s so).
torch.set_num_threads(1)

# tests a plain `pytest` leaves out (deselected, and said so at the end), each run by its option; CI runs all:
# the README's main job (an install and a real search, ~7 min) and the end-to-end runs of over a minute each
OPT_IN = {
    "readme": ("--readme", "the README's main job as written in a fresh clone (tests/test_readme.py)"),
    "long": ("--long", "the end-to-end runs of over a minute (one curve, SIGKILL/Ctrl-C resume, two nodes)"),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    """--readme and --long: also run the tests of that marker, which keep a plain `pytest` under ten minutes
    on 2 cores; CI passes both."""
    for flag, what in OPT_IN.values():
        parser.addoption(flag, action="store_true", help=f"also run {what} (CI does)")


def _left_out(config: pytest.Config) -> list[str]:
    """The opt-in markers whose option was not given."""
    return [marker for marker, (flag, _) in OPT_IN.items() if not config.getoption(flag)]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without its option, a test of an opt-in marker is deselected (counted as such), never skipped."""
    markers = _left_out(config)
    left = [item for item in items if any(item.get_closest_marker(m) for m in markers)]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if item not in left]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Say what was left out, so a deselected test is never mistaken for a passed one."""
    for marker in _left_out(config):
        flag, what = OPT_IN[marker]
        line = f"left out (marked {marker}): {what}; `pytest {flag} -m {marker}` runs it"
        terminalreporter.write_line(line)


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


@pytest.fixture(scope="module")
def local_ray():
    """A real local Ray cluster of 2 CPUs, shared by a module's search tests (no mocks)."""
    import ray

    ray.init(
        num_cpus=2,
        num_gpus=0,
        include_dashboard=False,
        object_store_memory=128 * 1024 * 1024,
        log_to_driver=False,
        logging_level="ERROR",
    )
    yield
    ray.shutdown()


@pytest.fixture
def data_dir(tmp_path_factory, monkeypatch):
    """Trials run in other processes: the data root must be a real shared folder, not per-test env."""
    root = tmp_path_factory.mktemp("data")
    monkeypatch.setenv("MODSAR_DATA", str(root))
    return root
