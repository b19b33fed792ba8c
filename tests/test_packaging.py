"""What an installed ModSAR reports about itself."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import modsar


def test_the_version_is_defined_once_and_installed_as_written():
    """pyproject.toml takes the version from modsar.__version__, so the installed metadata, the rows'
    `versions` and `modsar_version` of prepared datasets can never disagree."""
    text = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]  # the [project] table (tomllib needs 3.11)
    assert not re.search(r"^version\s*=", project, re.M) and re.search(r'^dynamic\s*=\s*\["version"\]', project, re.M)
    assert 'version = { attr = "modsar.__version__" }' in text
    assert importlib.metadata.version("modsar") == modsar.__version__
