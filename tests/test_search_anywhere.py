"""A search started from any working directory: its Ray workers import the package the driver runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from modsar.records.rows import read_rows

pytestmark = pytest.mark.slow  # real multi-process runs: the full suite's tier

CHECKOUT = Path(__file__).resolve().parents[1]


def test_a_search_from_the_folder_above_a_checkout_named_modsar(tmp_path):
    """From X, with a checkout at X/modsar, `import modsar` in a worker would find the folder X/modsar (an
    empty namespace package) before the installed package: every trial died on its first import. The trial's
    backbone is a plugin module found through a relative PYTHONPATH, and another plugin is a relative .py
    path: both must mean X for workers too (Tune runs each trial in a folder of its own)."""
    above = tmp_path / "work"
    (above / "mine").mkdir(parents=True)
    (above / "modsar").symlink_to(CHECKOUT, target_is_directory=True)  # a clone named as the project
    shutil.copy(CHECKOUT / "tests" / "plugins" / "toy_backbone.py", above / "mine" / "my_backbones.py")
    (above / "extra.py").write_text("LOADED = True\n")
    (above / "one.yaml").write_text(
        "description: one trial\nbase: {task: ar, model.hidden_size: 16}\n"
        "params:\n  model.backbone: {grid: [toy]}\n"
        "budget: {search: grid, num_samples: 1, max_epochs: 2, eval_every: 1}\n"
    )
    modsar = Path(sys.executable).parent / "modsar"  # the installed command, as a user runs it
    env = {
        **os.environ,
        "MODSAR_DATA": str(tmp_path / "data"),
        "MODSAR_PLUGINS": "my_backbones,extra.py",
        "PYTHONPATH": "mine",
    }
    done = subprocess.run(
        [
            str(modsar),
            "search",
            "--space",
            "one.yaml",
            "--dataset",
            "synthetic",
            "--results",
            "results",
            "--experiment",
            "here",
            "--quiet",
        ],
        cwd=above,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-1000:] + done.stderr[-2000:]
    rows = read_rows(str(above / "results"), "here")
    assert list(rows["status"]) == ["finished"], rows.get("error")
    assert rows["selected"].all() and rows["test.ndcg@10"].notna().all()
