"""The backbone registry: a plugin backbone from a test file runs through train and analyze (search: in
test_search.py, on that module's Ray cluster)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from modsar.analysis.analyze import run
from modsar.cli import main
from modsar.config import load_config
from modsar.errors import ModsarError
from modsar.model import registry
from modsar.records.rows import read_rows
from modsar.training.trainer import build_model

PLUGIN = Path(__file__).parent / "plugins" / "toy_backbone.py"


@pytest.fixture(scope="module")
def toy():
    registry.load_plugins([str(PLUGIN)])
    yield
    registry.unregister("toy")


def test_config_checks_import_no_model_code():
    """modsar.config checks every backbone through the registry without importing torch."""
    code = (
        "import sys; from modsar.config import load_config; "
        "load_config(None, ['model.backbone=llama', 'model.dropout=0']); load_config(None, []); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_unknown_backbone_lists_the_registered_ones():
    with pytest.raises(
        ModsarError,
        match=r"'model.backbone' 'nosuch' is unknown; choose one of modular, duorec, bsarec, gru4rec, "
        r"albert, llama, transfo_xl, hf:<model_type>",
    ):
        load_config(None, ["model.backbone=nosuch"])


def test_a_missing_plugin_is_one_clear_error(monkeypatch):
    monkeypatch.setenv(registry.PLUGINS_ENV, "/nonexistent/plugin.py")
    with pytest.raises(ModsarError, match=r"backbone plugin '/nonexistent/plugin.py' cannot be loaded"):
        load_config(None, ["model.backbone=nosuch2"])


@pytest.mark.parametrize(
    "code, raised",
    [
        (
            "from modsar.model.registry import BackboneEntry, register\n"
            "register(BackboneEntry('half', 'modsar.model.modular:ModularSAR'))\nx = 1 / 0\n",
            r"ZeroDivisionError: division by zero at .*broken\.py:3",
        ),
        ("def f(:\n", r"SyntaxError: .+ \(broken\.py, line 1\)"),  # the wording varies with Python's version
        (
            "raise RuntimeError('no GPU driver\\nsecond line')\n",
            r"RuntimeError: no GPU driver at .*broken\.py:1",
        ),
        (
            "import modsar_no_such_dependency\n",
            r"ModuleNotFoundError: No module named 'modsar_no_such_dependency' at .*broken\.py:1",
        ),
        (
            "class Boom(BaseException):\n    pass\nraise Boom('custom base exception')\n",
            r"Boom: custom base exception at .*broken\.py:3",
        ),
        ("import sys\nsys.exit(3)\n", r"SystemExit: 3 at .*broken\.py:2"),
        (
            "class Odd(Exception):\n    def __str__(self):\n        raise ValueError\nraise Odd()\n",
            r"Odd at .*broken\.py:4",
        ),
    ],
    ids=[
        "ZeroDivisionError-after-registering",
        "SyntaxError",
        "RuntimeError-two-lines",
        "missing-dependency",
        "BaseException-subclass",
        "SystemExit",
        "unprintable-exception",
    ],
)
def test_a_plugin_that_raises_is_one_line_even_for_a_built_in_backbone(
    tmp_path, monkeypatch, capsys, code, raised
):
    """Whatever a $MODSAR_PLUGINS module raises on import is one line naming it, with the exception's type and
    first line and how to fix it, before any work: also when the run's backbone is built in (modular), which
    never looked the plugins up. A plugin that registered before raising leaves nothing behind."""
    plugin = tmp_path / "broken.py"
    plugin.write_text(code)
    monkeypatch.setenv(registry.PLUGINS_ENV, str(plugin))
    named = re.escape(str(plugin))
    expected = (
        rf"^backbone plugin '{named}' cannot be loaded: importing it raised {raised}; fix the "
        r"module, or remove it from \$MODSAR_PLUGINS$"
    )
    with pytest.raises(ModsarError, match=expected):
        load_config(None, [])
    assert "half" not in registry.names() and str(plugin) not in registry.loaded_plugins()
    assert not [m for m in sys.modules if m.startswith("modsar_plugin_broken_")]
    results = tmp_path / "results"
    assert (
        main(["train", "--dataset", "synthetic", "--quiet", "--results", str(results), "train.max_epochs=1"])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(f"modsar: error: backbone plugin '{named}' cannot be", err)
    assert not results.exists()  # refused before training


def test_an_interrupt_while_importing_a_plugin_stays_an_interrupt_that_names_it(
    tmp_path, monkeypatch, capsys
):
    """KeyboardInterrupt (Ctrl-C, or a plugin raising it) is not turned into an error: exit 130 as for any
    interrupt, but the line says which plugin was being imported, and the plugin leaves nothing behind."""
    plugin = tmp_path / "slow.py"
    plugin.write_text(
        "from modsar.model.registry import BackboneEntry, register\n"
        "register(BackboneEntry('half', 'modsar.model.modular:ModularSAR'))\n"
        "raise KeyboardInterrupt('plugin interrupted')\n"
    )
    monkeypatch.setenv(registry.PLUGINS_ENV, str(plugin))
    results = tmp_path / "results"
    assert main(["train", "--dataset", "synthetic", "--quiet", "--results", str(results)]) == 130
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [
        f"modsar: interrupted while importing backbone plugin '{plugin}'"
    ]
    assert "half" not in registry.names() and str(plugin) not in registry.loaded_plugins()
    assert not [m for m in sys.modules if m.startswith("modsar_plugin_slow_")] and not results.exists()


def test_a_missing_plugin_module_says_it_is_not_importable(monkeypatch):
    monkeypatch.setenv(registry.PLUGINS_ENV, "modsar_no_such_plugin")
    with pytest.raises(
        ModsarError,
        match=r"^backbone plugin 'modsar_no_such_plugin' cannot be loaded: no "
        r"module of that name is importable here; name an importable "
        r"module \(see PYTHONPATH\), or remove it from \$MODSAR_PLUGINS$",
    ):
        load_config(None, ["model.backbone=gru4rec"])


def test_toy_backbone_capabilities_are_enforced(toy):
    with pytest.raises(ModsarError, match="backbone toy implements task ar only; got task=ae"):
        load_config(None, ["model.backbone=toy", "task=ae"])
    model = build_model(load_config(None, ["model.backbone=toy", "model.hidden_size=8"]), 20, 3, 10)
    x = torch.randint(1, 21, (2, 6), generator=torch.Generator().manual_seed(0))
    changed = x.clone()
    changed[:, 4:] = changed[:, 4:] % 20 + 1
    torch.testing.assert_close(model(changed)[:, :4], model(x)[:, :4], rtol=0, atol=0)  # causal


def test_toy_backbone_trains_and_is_analyzed(toy, tmp_path, isolated_data_root):
    """A user's view: name the plugin file in MODSAR_PLUGINS, then use its backbone like any other."""
    out = tmp_path / "results"
    env = {**os.environ, registry.PLUGINS_ENV: str(PLUGIN), "MODSAR_DATA": str(isolated_data_root)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "modsar.cli",
            "train",
            "--dataset",
            "synthetic",
            "--results",
            str(out),
            "--experiment",
            "toy",
            "--quiet",
            "model.backbone=toy",
            "train.max_epochs=5",
            "train.lr=0.01",
            "train.patience=0",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    row = read_rows(str(out), "toy").iloc[0]
    assert row["model.backbone"] == "toy" and row["status"] == "finished"
    popular = main(
        [
            "train",
            "--dataset",
            "synthetic",
            "--results",
            str(out),
            "--experiment",
            "pop",
            "--quiet",
            "model.backbone=toy",
            "train.max_epochs=1",
            "train.lr=1e-9",
            "train.patience=0",
        ]
    )
    assert popular == 0
    untrained = read_rows(str(out), "pop").iloc[0]
    assert row["valid.ndcg@10"] > 2 * untrained["valid.ndcg@10"]  # it learned through the common trainer
    checkpoint = next((out / "toy" / "checkpoints").glob("*.pt"))
    analysis = run(checkpoint, ["hrli", "sparsity", "mixing"], None)
    assert set(analysis.table["diagnostic"]) == {"hrli"}
    assert "skipped sparsity, mixing: toy has no attention maps" in analysis.notes[0]


def test_plugin_paths_are_made_absolute_for_the_workers(tmp_path, monkeypatch):
    """A relative .py path is recorded absolute (trials run in their own folders), and an exact name wins over
    a prefix that also matches it."""
    (tmp_path / "tiny.py").write_text(
        "from modsar.model.registry import BackboneEntry, register\n"
        "register(BackboneEntry('hf:tiny', 'modsar.model.modular:ModularSAR'))\n"
    )
    monkeypatch.chdir(tmp_path)
    try:
        assert str(tmp_path / "tiny.py") in registry.load_plugins(["tiny.py"])
        assert registry.find("hf:tiny").build == "modsar.model.modular:ModularSAR"  # not the hf: prefix entry
        assert registry.find("hf:bert").name == "hf:"
    finally:
        registry.unregister("hf:tiny")
    assert str(tmp_path / "tiny.py") not in registry.loaded_plugins()


def test_the_core_never_imports_hf_plugins_which_registers_through_its_entry_point():
    """hf_plugins is a plugin like any other: declared under the modsar.backbones entry point, loaded by the
    registry, never imported by the core (modsar/)."""
    import ast
    from importlib.metadata import entry_points

    core = Path(registry.__file__).resolve().parents[1]
    importing = sorted(
        str(path.relative_to(core))
        for path in core.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and any(
            name.split(".")[0] == "hf_plugins"
            for name in (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            )
        )
    )
    assert importing == []
    assert "hf_plugins.backbones" in {point.value for point in entry_points(group="modsar.backbones")}
    assert registry.find("llama") is not None and "hf_plugins.backbones" in registry.load_plugins()


DECLARING = Path(__file__).parent / "plugins" / "declared_backbone.py"


@pytest.fixture()
def declared():
    registry.load_plugins([str(DECLARING)])
    yield
    for name in ("declared", "declared:"):
        registry.unregister(name)


def test_a_plugin_declares_every_backbone_fact_and_each_is_honoured(declared):
    """Each field of a plugin's entry changes what the core does, without an edit to the core."""
    from modsar.data.split import make_split
    from modsar.data.store import load_dataset
    from modsar.model.registry import needs_partners
    from modsar.training.trainer import train_batches

    # owned settings: the plugin may set DuoRec's knobs, the modular backbone still may not
    load_config(None, ["model.backbone=declared", "task=ar", "loss.cl_weight=0.2"])
    with pytest.raises(
        ModsarError, match=r"'loss\.cl_weight=0\.2' is read by model\.backbone=duorec or declared"
    ):
        load_config(None, ["model.backbone=modular", "loss.cl_weight=0.2"])
    # its paper name, in the column it declares: reports and analyses order and label models by it
    assert registry.paper_name("declared", "ar") == "DeclaredRec"
    assert [n.name for n in registry.paper_names()][:3] == ["DeclaredRec", "SASRec", "DuoRec"]
    assert registry.named_by_paper("declared") and not registry.named_by_paper("declared:sites")
    # training partners: its batches carry a same-target partner per row, as DuoRec's do
    cfg = load_config(None, ["model.backbone=declared", "task=ar", "loss.cl_weight=0.2", "loss.cl_views=su"])
    assert needs_partners(cfg)
    split = make_split(cfg, load_dataset("synthetic"))
    batch = next(iter(train_batches(split, cfg, 20)))
    assert batch.partners is not None and batch.partners.shape[0] == batch.inputs.shape[0]
    unsupervised = load_config(None, ["model.backbone=declared", "task=ar", "loss.cl_views=un"])
    assert not needs_partners(unsupervised)
    # time bias: accepted for the prefix entry that declares it, refused (naming who has it) elsewhere
    load_config(None, ["model.backbone=declared:sites", "model.time_bias=gap"])
    with pytest.raises(
        ModsarError, match="attention bias of the modular and declared: backbone; backbone bsarec"
    ):
        load_config(None, ["model.backbone=bsarec", "model.time_bias=gap"])
    # skip sites: the model types under its prefix whose attention skips it declares, and only those
    known = registry.skip_site_backbones()
    assert "declared:sites" in known and "declared:other" not in known and "declared" in known
    assert registry.lookup("declared:sites").has_skip_sites("declared:sites")
    assert not registry.lookup("declared:other").has_skip_sites("declared:other")


def test_unregistering_the_plugin_takes_its_facts_away(declared):
    registry.unregister("declared")
    assert "DeclaredRec" not in [n.name for n in registry.paper_names()]
    assert registry.owned_settings()["loss.cl_weight"] == ("duorec",)


def test_the_analyze_help_lists_a_plugins_skip_sites(declared):
    """`modsar analyze --help` names the backbones whose attention skips are known, from the registry."""
    from modsar.cli.analyze import epilog

    text = " ".join(epilog().split())
    assert "declared:sites" in text and "declared:other" not in text and "hf:gpt2" in text


def test_reports_and_analyses_name_and_order_a_plugin_by_its_declared_paper_name(declared):
    """The entry's paper name reaches the report's arms and order, and the analyses' model label."""
    import pandas as pd

    from modsar.analysis.analyze import model_label
    from modsar.report.arms import in_paper_order, with_arms

    rows = pd.DataFrame(
        {
            "dataset": ["toys"] * 3,
            "space": ["residual_models"] * 3,
            "task": ["ar", "ar", "ar"],
            "model.backbone": ["duorec", "declared", "modular"],
        }
    )
    arms = list(with_arms(rows)["arm"])
    assert arms == ["DuoRec", "DeclaredRec", "SASRec"]
    assert in_paper_order(set(arms)) == ["DeclaredRec", "SASRec", "DuoRec"]
    assert model_label(load_config(None, ["model.backbone=declared", "task=ar"])) == "DeclaredRec"
    # a backbone named by its design keeps the ModSAR paper's labels; others carry their name before them
    assert model_label(load_config(None, ["model.backbone=declared:sites"])) == "declared:sites Vanilla-AR"
    assert model_label(load_config(None, [])) == "Vanilla-AR"


def test_the_hf_adapter_finds_skips_for_exactly_the_types_its_spec_declares():
    """hf_plugins declares its skip-site types torch-free (spec) for the registry; the adapter's table of
    finders must hold the same names, or the registry would promise diagnostics the adapter cannot give."""
    from hf_plugins.adapter import SKIP_FINDERS
    from hf_plugins.spec import SKIP_SITE_TYPES

    assert set(SKIP_FINDERS) == set(SKIP_SITE_TYPES)
    assert registry.lookup("hf:gpt2").has_skip_sites("hf:gpt2")
    assert not registry.lookup("hf:electra").has_skip_sites("hf:electra")
