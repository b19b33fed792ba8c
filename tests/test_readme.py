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
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
WANTED = ["torch==2.13.0", f"{CHECKOUT}[test]", "setuptools>=68", "wheel"]  # as .ci/run's wheelhouse


def extractor():
    """.ci/readme_commands.py, the extractor CI uses, as a module."""
    spec = importlib.util.spec_from_file_location("readme_commands", CHECKOUT / ".ci" / "readme_commands.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme_commands() -> dict[str, str]:
    """The README's two set-up commands, read by the extractor CI uses."""
    return extractor().commands((CHECKOUT / "README.md").read_text())


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=CHECKOUT, capture_output=True, check=True).stdout.decode()


def fresh_copy(target: Path) -> Path:
    """What a new user's clone of this checkout holds: the committed rows under results/published/ included,
    nothing git ignores (no venv, no earlier results). A clean working tree is cloned for real (`git clone
    --no-local`: objects copied through git's transport, no hard links into this checkout) at this checkout's
    commit. A tree with uncommitted work (while one develops, or a CI copy with changes) cannot be cloned
    with that work, so it is copied instead: every file git tracks or would add, as found on disk."""
    if not git("status", "--porcelain", "--untracked-files=all").strip():
        git("clone", "--quiet", "--no-local", str(CHECKOUT), str(target))
        git("-C", str(target), "checkout", "--quiet", "--detach", git("rev-parse", "HEAD").strip())
        return target
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard")
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
@pytest.mark.readme
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
    # a pytest without --readme leaves the README's main job out (tests/conftest.py): CI runs it on its own
    assert 'pytest --readme --long -m "readme or long"' in ci


def test_each_command_is_read_from_its_own_section_only():
    """A section's command is the ```bash block between its heading and the next heading: a block of a later
    section is never taken for a section without one, and a '#' line inside a fence is no heading."""
    read = extractor()
    good = (
        "# Tool\n\n## Quick start\n\n```text\n# a comment, no heading\n```\n\n```bash\nrun main\n```\n\n"
        "### Tests\n\nRun:\n\n```bash\nrun tests\n```\n\n## Later\n\n```bash\nrun later\n```\n"
    )
    assert read.commands(good) == {"main": "run main", "tests": "run tests"}
    assert read.section(good, "### Tests") == "\nRun:\n\n```bash\nrun tests\n```\n\n"
    for text, said in (
        (good.replace("```bash\nrun tests\n```", "(none)"), "'### Tests' section has no ```bash block"),
        (good.replace("Run:", "#### Sub"), "'### Tests' section has no ```bash block"),
        (good.replace("```bash\nrun main\n```", "nothing here"), "'## Quick start' section has no ```bash"),
        (good.replace("### Tests", "### Testing"), "README.md has no '### Tests' section"),
    ):
        with pytest.raises(SystemExit, match=re.escape(said)):
            read.commands(text)


def test_a_clean_checkout_is_cloned_and_uncommitted_work_is_copied(tmp_path, monkeypatch):
    """fresh_copy: a clean tree is a real clone (its own .git, at the same commit); a tree with uncommitted
    work is copied with that work, never with what git ignores."""
    import test_readme

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".gitignore").write_text(".venv/\n")
    (repo / "kept.txt").write_text("committed")
    (repo / ".venv").mkdir()
    (repo / ".venv" / "ignored").write_text("x")
    monkeypatch.setattr(test_readme, "CHECKOUT", repo)
    git("init", "--quiet")
    git("add", ".")
    who = ("-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false")
    git(*who, "commit", "--quiet", "-m", "one")
    clone = fresh_copy(tmp_path / "clone")
    assert (clone / ".git").is_dir() and (clone / "kept.txt").read_text() == "committed"
    assert git("-C", str(clone), "rev-parse", "HEAD") == git("rev-parse", "HEAD")
    assert not (clone / ".venv").exists()
    (repo / "kept.txt").write_text("changed")
    (repo / "new.txt").write_text("new")
    copy = fresh_copy(tmp_path / "copy")
    assert not (copy / ".git").exists() and not (copy / ".venv").exists()
    assert (copy / "kept.txt").read_text() == "changed" and (copy / "new.txt").read_text() == "new"
