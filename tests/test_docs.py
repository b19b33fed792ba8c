"""The documentation site: its reference pages are what the code generates today, every configuration key
has a meaning, and the site builds with mkdocs --strict (a broken link or a missing page fails)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs"))

import gen_reference  # noqa: E402


def test_the_committed_reference_pages_are_what_the_code_generates():
    assert gen_reference.main(["--check"]) == 0, "run: python docs/gen_reference.py"


def test_every_configuration_key_is_documented():
    from modsar.config import Config

    rows = {key: meaning for key, *_, meaning in gen_reference.config_rows()}
    assert set(rows) == set(Config().flat())
    assert not [key for key, meaning in rows.items() if len(meaning) < 10], "comment these keys in config.py"
    page = (ROOT / "docs" / "reference" / "config.md").read_text()
    assert all(f"| `{key}` |" in page for key in rows)


def test_an_undocumented_key_fails_the_generator(monkeypatch):
    real = gen_reference.field_comments
    monkeypatch.setattr(
        gen_reference,
        "field_comments",
        lambda: {k: v for k, v in real().items() if k != ("ModelConfig", "dropout")},
    )
    try:
        gen_reference.config_page()
    except SystemExit as error:
        assert "model.dropout" in str(error)
    else:
        raise AssertionError("a key without a comment went unreported")


def test_the_reference_shows_declared_defaults_and_ranges():
    rows = {key: (kind, default, allowed) for key, kind, default, allowed, _ in gen_reference.config_rows()}
    assert rows["task"] == ("Task", "`'ar'`", "`ar`, `ae`")
    assert rows["model.hidden_size"] == ("int", "`64`", "must be >= 1")
    assert rows["mask_prob"][2] == "must be in (0, 1)"
    assert dataclasses.is_dataclass(gen_reference.config.Config)


def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for page in ("index.html", "reference/config/index.html", "reference/api/index.html"):
        assert (tmp_path / "site" / page).is_file()
    assert "modsar.api.train" in (tmp_path / "site" / "reference/api/index.html").read_text()


def test_every_registry_dataset_has_its_source_described():
    """The datasets page names every benchmark the registry can download, with the counts it checks."""
    from modsar.data.registry import REGISTRY, SYNTHETIC_SPECS

    page = (Path(__file__).resolve().parents[1] / "docs" / "datasets.md").read_text()
    for name, spec in REGISTRY.items():
        if name in SYNTHETIC_SPECS:
            continue
        line = next((row for row in page.splitlines() if row.startswith(f"| `{name}` |")), None)
        assert line is not None, name
        for value in (spec.expected or {}).values():
            assert f"{value:,}" in line, (name, value)
