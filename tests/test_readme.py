"""The README is a test: its main-job command, as written, in a fresh copy of the repository that holds the
committed rows, ends in its report.

The command installs from scratch (`python3 -m venv .venv && .venv/bin/pip install ...`). CI runs the suite in
a network namespace that has only loopback, so the packages come from a wheelhouse: `.ci/run` fills one
(`pip download`) before it enters the namespace and names it in $MODSAR_WHEELHOUSE; pip reads it through its
own environment settings (PIP_NO_INDEX, PIP_FIND_LINKS), and the command's text is run unchanged. Without
$MODSAR_WHEELHOUSE the test fills one itself, which needs the package registries. CI runs the README's tests
command the same way (`.ci/run` reads it from the README with `.ci/readme_commands.py`)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
WANTED = ["torch==2.13.0", f"{CHECKOUT}[test]", "setuptools>=68", "wheel"]  # as .ci/run's wheelhouse


def readme_commands() -> dict[str, str]:
    """The README's two set-up commands, read by the extractor CI uses."""
    spec = importlib.util.spec_from_file_location("readme_commands", CHECKOUT / ".ci" / "readme_commands.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.commands((CHECKOUT / "README.md").read_text())


def fresh_copy(target: Path) -> Path:
    """What a clone of this checkout holds: every file git tracks or would add (the committed rows under
    results/published/ included), none that it ignores (no venv, no earlier results)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=CHECKOUT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = CHECKOUT / name
        if source.is_file():  # a tracked file deleted in the working tree is not in the copy either
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def wheelhouse(folder: Path) -> Path:
    """The packages the README's install asks for, as files: $MODSAR_WHEELHOUSE, or downloaded now."""
    given = os.environ.get("MODSAR_WHEELHOUSE")
    if given:
        assert Path(given, ".").is_dir(), f"MODSAR_WHEELHOUSE={given} is not a folder"
        return Path(given)
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(folder), *WANTED],
        capture_output=True,
        text=True,
    )
    assert fetched.returncode == 0, (
        "no $MODSAR_WHEELHOUSE and the package registries cannot be reached: run `.ci/run`, or set "
        "MODSAR_WHEELHOUSE to a folder filled by `pip download torch==2.13.0 '.[test]' setuptools wheel`\n"
        + fetched.stderr[-3000:]
    )
    return folder


@pytest.mark.slow
def test_the_readme_main_job_runs_as_written_in_a_fresh_clone(tmp_path):
    """The first thing a new user runs: install, a real search, its rows, its report. The copy holds the
    committed rows of the same experiment name under results/published/, which must not mix with the
    user's own (they once made the report refuse two selected rows)."""
    command = readme_commands()["main"]
    clone = fresh_copy(tmp_path / "clone")
    published = clone / "results" / "published" / "quickstart" / "quickstart-synthetic" / "trials"
    assert any(published.glob("*.parquet")), "the copy must hold the committed quickstart rows"
    home = tmp_path / "home"
    home.mkdir()
    wheels = wheelhouse(tmp_path / "wheels")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),  # a new user's: no datasets, no Ray state, no pip configuration of ours
        "LANG": "C.UTF-8",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": " ".join([str(wheels), os.environ.get("PIP_FIND_LINKS", "")]).strip(),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    for name in ("RAY_TMPDIR", "TMPDIR", "PIP_CONSTRAINT"):
        if name in os.environ:
            env[name] = os.environ[name]
    done = subprocess.run(
        ["sh", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=1800
    )
    shown = done.stdout[-4000:] + "\n--- stderr ---\n" + done.stderr[-4000:]
    assert done.returncode == 0, shown
    report = clone / "results" / "quickstart-report"
    assert (report / "report.md").is_file() and list(report.rglob("*.png")), shown
    text = (report / "report.md").read_text()
    assert "quickstart-synthetic" in text and "AE" in text and "AR" in text, text
    trials = clone / "results" / "quickstart-synthetic" / "trials"
    rows = pd.concat(pd.read_parquet(p) for p in trials.glob("*.parquet"))
    mine = set(rows["trial_id"])
    theirs = {pd.read_parquet(p)["trial_id"].iloc[0] for p in published.glob("*.parquet")}
    assert len(rows) == 12 and rows["selected"].sum() == 2, rows[["trial_id", "task", "selected"]]
    assert not any(trial in text for trial in theirs - mine), "the report shows committed rows"
    assert "modsar: error" not in done.stderr, shown


def test_ci_runs_the_readme_tests_command_as_written():
    """CI takes its test command from the README (not a copy that could drift), and the README's two
    commands each set everything up from scratch."""
    commands = readme_commands()
    assert set(commands) == {"main", "tests"}
    for command in commands.values():
        assert command.startswith("python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e '.[test]'")
    assert commands["tests"].endswith(".venv/bin/python -m pytest")
    ci = (CHECKOUT / ".ci" / "run").read_text()
    assert ".ci/readme_commands.py tests" in ci and "MODSAR_WHEELHOUSE" in ci
