"""Config tree: dotted overrides, YAML files, and one clear error per bad key or value."""

from __future__ import annotations

import re

import pytest
from conftest import write

from modsar.config import Config, load_config, parse_override
from modsar.errors import ModsarError


def test_overrides_are_typed_and_dotted():
    cfg = load_config(
        None,
        ["model.hidden_size=32", "train.lr=3e-4", "task=ae", "eval.ks=[5,10]", "data.padding_free=false"],
    )
    assert cfg.model.hidden_size == 32 and cfg.train.lr == pytest.approx(3e-4) and cfg.task == "ae"
    assert cfg.eval.ks == [5, 10] and cfg.data.padding_free is False
    assert parse_override("train.lr=1") == ("train.lr", 1)
    assert load_config(None, ["train.lr=1"]).train.lr == 1.0


def test_yaml_nested_and_dotted(tmp_path):
    path = write(tmp_path / "c.yaml", "model:\n  num_heads: 2\nloss.name: bpr\n")
    cfg = load_config(path, ["model.hidden_size=32"])
    assert cfg.model.num_heads == 2 and cfg.loss.name == "bpr" and cfg.model.hidden_size == 32
    assert Config.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "override,message",
    [
        ("model.hidden=64", "unknown key 'model.hidden'"),
        ("model.hidden_size=big", "'model.hidden_size' must be int"),
        ("task=lm", "'task' must be one of ar, ae"),
        ("loss.name=mse", "'loss.name' must be one of ce, sampled_ce, bce, bpr"),
        ("model=3", "'model' is a section"),
        ("model.num_heads=5", "divisible by 'model.num_heads'"),
        ("model.local_heads=2", "'model.local_heads' must be between 0 and model.num_heads"),
        ("train.monitor=auc", "'train.monitor' must be a metric"),
        ("mask_prob=1.5", "'mask_prob' must be in (0, 1)"),
        ("nokey", "not of the form key=value"),
        ("train.patience=-1", "'train.patience' must be >= 0 (0 = never stop early); got -1"),
        ("train.weight_decay=-0.01", "'train.weight_decay' must be >= 0"),
        ("train.grad_clip=-1", "'train.grad_clip' must be >= 0"),
        (
            "train.threads=100000",
            "'train.threads' must be <= 1024 (more than any machine's cores; 0 = torch's "
            "default); got 100000",
        ),  # was a 58-line ImportError from torch
        ("train.lr=.inf", "'train.lr' must be a finite number"),
        ("model.attn_dropout=.nan", "'model.attn_dropout' must be a finite number"),
        ("model.item_sse_prob=1.0", "'model.item_sse_prob' must be in [0, 1)"),
        ("seed=-1", "'seed' must be between 0 and 2**32 - 1; got -1"),
        ("eval.sample_seed=4294967296", "'eval.sample_seed' must be between 0 and 2**32 - 1"),
        ("train.weight_decay=1e39", "'train.weight_decay' must be a finite number of float32 range"),
        ("train.patience=1000000000000000000000000", "'train.patience' must fit in 64 bits"),
        ("eval.ks=[1,100000000000000000000]", "'eval.ks' must fit in 64 bits"),
        ("data.max_len=1099511627776", "'data.max_len' must be <= 1,048,576"),
    ],
)
def test_bad_values_name_the_key(override, message):
    with pytest.raises(ModsarError, match=re.escape(message)):
        load_config(None, [override])


def test_threads_up_to_the_cap_are_kept():
    assert load_config(None, ["train.threads=1024"]).train.threads == 1024


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["model.user_embedding=true"],
            "'model.user_embedding' is now model.user_fusion (true = concat, false = none)",
        ),
        (
            ["model.pos_dim=8"],
            "'model.pos_dim=8' needs a position channel of its own: set model.pos_fusion=concat",
        ),
        (["model.pos_fusion=concat"], "'model.pos_dim' with pos_fusion=concat must be >= 1 and below 64"),
        (
            ["model.pos_fusion=concat", "model.pos_dim=20", "model.user_fusion=concat", "model.user_size=44"],
            "must be >= 1 and below 20 (the item vector needs the rest); got 20",
        ),
        (["model.pos_fusion=project", "model.pos_dim=65"], "at most the hidden size 64"),
        (
            ["model.positional=target_aligned", "model.num_heads=2", "model.pos_dim=40"],
            "at most the head size hidden_size / num_heads = 32",
        ),
        (
            ["model.positional=target_aligned", "model.pos_fusion=project"],
            "'model.pos_fusion=project' places an absolute",
        ),
        (
            ["model.positional=target_aligned", "model.positions_from=start"],
            "'model.positions_from' counts absolute",
        ),
        (["model.positional=none", "model.pos_dim=4"], "model.positional=none has none; leave it at 0"),
        (
            ["model.user_fusion=token", "model.user_size=16"],
            "'model.user_size' is the width of user_fusion=concat's",
        ),
        (["model.user_sse_prob=0.2"], "'model.user_sse_prob' needs a user in the model"),
        (
            ["model.backbone=bsarec", "model.user_fusion=bias"],
            "bsarec has no 'model.user_fusion' (its layers, init and dot-product output are fixed",
        ),
        (["model.backbone=gru4rec", "model.pos_dim=8"], "gru4rec has no 'model.pos_dim'"),
        (
            ["model.backbone=llama", "model.dropout=0", "model.user_fusion=token"],
            "llama has no 'model.user_fusion' (a design knob of the modular backbone",
        ),
        (
            ["model.backbone=llama", "model.dropout=0", "model.positional=target_aligned"],
            "llama uses rope positions",
        ),
        (
            ["task=ae", "data.samples=prefixes"],
            "'data.samples=prefixes' labels each training prefix's next item",
        ),
    ],
)
def test_position_and_user_choices_that_cannot_hold_are_refused(overrides, message):
    with pytest.raises(ModsarError, match=re.escape(message)):
        load_config(None, overrides)


def test_stored_trees_from_before_user_fusion_still_load():
    """Checkpoints and search.json bases written with SSE-PT's old switch read as user_fusion."""
    for old, new in ((True, "concat"), (False, "none")):
        tree = Config().to_dict()
        del tree["model"]["user_fusion"]
        tree["model"]["user_embedding"] = old
        assert Config.from_dict(tree).model.user_fusion == new


def test_bad_yaml_file(tmp_path):
    with pytest.raises(ModsarError, match="not valid YAML at line 2"):
        load_config(write(tmp_path / "c.yaml", "a: 1\n b: [\n"))
    with pytest.raises(ModsarError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\x00\xff\xfe")
    with pytest.raises(ModsarError, match="is not a text"):
        load_config(binary)
    with pytest.raises(ModsarError, match="unknown key '1'"):
        load_config(write(tmp_path / "k.yaml", "1: 2\n"))


def test_rope_backbones_need_an_even_head_size():
    with pytest.raises(ModsarError, match=r"head size hidden_size / num_heads = 3 must be even"):
        load_config(
            None, ["model.backbone=llama", "model.dropout=0", "model.hidden_size=12", "model.num_heads=4"]
        )


def test_a_config_with_its_typed_task_stays_yaml_writable():
    """Task is a str: a plugin or a notebook dumping a config to YAML writes "ae", as before it was typed."""
    import dataclasses

    import yaml

    from modsar.config import load_config

    cfg = load_config(None, ["task=ae"])
    assert yaml.safe_dump({"task": cfg.task}) == "task: ae\n"
    assert yaml.safe_load(yaml.safe_dump(dataclasses.asdict(cfg)))["task"] == "ae"
