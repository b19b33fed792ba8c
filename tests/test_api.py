"""The Python API, used as a notebook uses it: `import modsar`, then train, evaluate, load, results, search.
Each returns what the command of the same name computes (the same row, the same metrics)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

import modsar
from modsar.config import Config, load_config
from modsar.errors import ModsarError
from modsar.evaluation.ranking import Evaluator, model_scorer
from modsar.records.rows import read_rows

TINY = {
    "model.hidden_size": 16,
    "model.num_layers": 1,
    "train.max_epochs": 2,
    "train.patience": 0,
    "train.threads": 1,
}


@pytest.fixture
def ran(tmp_path):
    row = modsar.train(
        {"task": "ae", **TINY}, dataset="synthetic", results=str(tmp_path / "results"), progress=False
    )
    return tmp_path / "results", row


def test_train_returns_the_row_it_wrote_and_evaluate_equals_it(ran):
    root, row = ran
    assert row["task"] == "ae" and row["model.hidden_size"] == 16 and row["status"] == "finished"
    stored = read_rows(str(root), "train-synthetic")
    assert (
        stored["trial_id"].tolist() == [row["trial_id"]]
        and stored["test.ndcg@10"].iloc[0] == row["test.ndcg@10"]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the stored protocol, and equal to the row: nothing to warn about
        metrics = modsar.evaluate(row["checkpoint"])
    assert metrics == {k.removeprefix("test."): v for k, v in row.items() if k.startswith("test.")}
    assert modsar.evaluate(row["checkpoint"], "valid")["ndcg@10"] == row["valid.ndcg@10"]
    with pytest.warns(UserWarning, match=r"another protocol .*eval\.filter_seen=history \(stored: none\)"):
        modsar.evaluate(row["checkpoint"], filter_seen="history")
    assert modsar.evaluate(Path(row["checkpoint"]), device="cpu", ks=[5])["ndcg@5"] == row["test.ndcg@5"]
    with pytest.raises(ModsarError, match="device='gpu' is not a device ModSAR runs on"):
        modsar.evaluate(row["checkpoint"], device="gpu")


def test_load_gives_the_model_that_scores_as_the_row_says(ran):
    _, row = ran
    model, cfg = modsar.load(row["checkpoint"])
    assert isinstance(cfg, Config) and cfg.task == "ae" and not model.training
    from modsar.training.checkpoints import checkpoint_split

    split = checkpoint_split(cfg)
    test = Evaluator.of(split, cfg, cfg.data.max_len or 50, torch.device("cpu"))(model_scorer(model), "test")
    assert test["ndcg@10"] == row["test.ndcg@10"]


def test_results_filters_as_the_command_does(ran, tmp_path):
    root, row = ran
    second = modsar.train(
        ["task=ar", *(f"{k}={v}" for k, v in TINY.items())],
        dataset="synthetic",
        results=str(root),
        progress=False,
        checkpoint=False,
    )
    both = modsar.results("train-synthetic", root=str(root))
    assert isinstance(both, pd.DataFrame) and sorted(both["trial_id"]) == sorted(
        [row["trial_id"], second["trial_id"]]
    )
    assert modsar.results(root=str(root), where={"task": "ar"})["trial_id"].tolist() == [second["trial_id"]]
    assert modsar.results(root=str(root), where=["task=AE"])["trial_id"].tolist() == [row["trial_id"]]
    assert not len(modsar.results(root=str(root), where={"task": "ar", "status": "diverged"}))
    with pytest.raises(ModsarError, match="unknown column 'colour'"):
        modsar.results(root=str(root), where={"colour": "red"})
    with pytest.raises(
        ModsarError, match=r"no trial rows under .*; pass root the folder .* and an experiment in it"
    ):
        modsar.results("nothing-here", root=str(root))
    assert modsar.results(root=root, where="task=ae")["trial_id"].tolist() == [
        row["trial_id"]
    ]  # a Path, one str
    with pytest.raises(ModsarError, match="where 'task' is not KEY=VALUE"):
        modsar.results(root=root, where=["task"])
    with pytest.raises(ModsarError, match="where must be a mapping"):
        modsar.results(root=root, where=5)  # type: ignore[arg-type]


def test_where_compares_numbers_by_value_and_an_empty_value_is_a_missing_one():
    """As typed on a command line: 3e-3 is the lr stored as 0.003, .1 the dropout 0.1, and `KEY=` finds the
    rows without that value (the committed quickstart search: 12 trials, two selected and tested)."""
    root = Path(__file__).parent.parent / "results" / "published" / "quickstart"
    every = modsar.results(root=root)
    assert len(every) == 12
    for typed in ("3e-3", "0.003", ".003"):
        assert len(modsar.results(root=root, where={"train.lr": typed})) == 12
    assert (
        len(modsar.results(root=root, where={"model.dropout": ".1"}))
        == (every["model.dropout"] == 0.1).sum()
        > 0
    )
    tested = modsar.results(root=root, where={"selected": "TRUE"})
    untested = modsar.results(root=root, where={"test.ndcg@10": ""})
    assert len(tested) == 2 and tested["test.ndcg@10"].notna().all()
    assert len(untested) == 10 and untested["test.ndcg@10"].isna().all()
    assert not len(modsar.results(root=root, where={"train.lr": "fast"}))  # not a number: compared as text
    assert modsar.results(root=root, where={"test.ndcg@10": None}).equals(untested)


def test_every_form_of_config_is_read_as_the_command_reads_it(tmp_path):
    """A mapping (dotted or nested), a YAML path, key=value strings and a Config give the same config; a
    Config passed in is never changed; an unknown key is the command's error."""
    from modsar.api import _config

    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("task: ae\nmodel:\n  hidden_size: 16\n")
    expected = load_config(yaml_file, ["dataset=video"])
    given = load_config(None, ["task=ae", "model.hidden_size=16"])
    forms = [
        {"task": "ae", "model.hidden_size": 16},
        {"task": "ae", "model": {"hidden_size": 16}},
        yaml_file,
        str(yaml_file),
        ["task=ae", "model.hidden_size=16"],
        given,
    ]
    for form in forms:
        assert _config(form, "video") == expected, form
    assert given.dataset == "synthetic"  # untouched
    with pytest.raises(ModsarError, match="hidden_sise"):
        _config({"model.hidden_sise": 16}, None)
    with pytest.raises(ModsarError, match="does not exist"):
        modsar.train(tmp_path / "missing.yaml")
    for wrong in (5, b"task=ae", [1, 2]):
        with pytest.raises(ModsarError, match="config must be a mapping of keys"):
            _config(wrong, None)  # type: ignore[arg-type]


def test_the_api_is_importable_without_loading_the_machinery():
    """`import modsar` stays light: torch, pandas and Ray load when a function is called (a fresh process)."""
    import subprocess
    import sys

    probe = "import sys, modsar; print(sorted(m for m in ('torch', 'pandas', 'ray') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert all(callable(getattr(modsar, name)) for name in ("train", "evaluate", "load", "results", "search"))


@pytest.mark.slow
def test_search_returns_the_experiments_rows(local_ray, tmp_path, monkeypatch):
    monkeypatch.setenv("MODSAR_DATA", str(tmp_path / "data"))  # trials run in Ray workers: a real folder
    space = tmp_path / "one.yaml"
    space.write_text(
        "description: one trial\nbase: {task: ar, model.hidden_size: 16, model.num_layers: 1}\n"
        "params:\n  model.num_heads: {grid: [1, 2]}\n"
        "budget: {search: grid, num_samples: 1, max_epochs: 2, eval_every: 1}\n"
    )
    rows = modsar.search(space, "synthetic", results=str(tmp_path / "results"), quiet=True)
    with pytest.raises(ModsarError, match="unknown option 'max_epoch'"):
        modsar.search(space, "synthetic", max_epoch=3)
    assert len(rows) == 2 and rows["selected"].sum() == 1
    best = rows[rows["selected"]].iloc[0]
    assert best["valid.ndcg@10"] == rows["valid.ndcg@10"].max() and pd.notna(best["test.ndcg@10"])
    assert Path(best["checkpoint"]).is_dir()
    assert modsar.evaluate(best["checkpoint"])["ndcg@10"] == best["test.ndcg@10"]
