"""What a backbone reads is declared once, on its registry entry: the declaration matches what its code reads,
drives the refusals and the configuration reference, and lets a plugin add settings of its own."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest
import torch

from modsar import config
from modsar.config import Config, ModelConfig, load_config
from modsar.errors import ModsarError
from modsar.model import registry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "docs"))
import gen_reference

PLUGIN = Path(__file__).parent / "plugins" / "toy_backbone.py"
# one backbone of each kind: the modular core, DuoRec's subclass, BSARec, GRU4Rec and three HuggingFace ones
BUILT = ["modular", "duorec", "bsarec", "gru4rec", "albert", "llama", "transfo_xl", "hf:bert"]
# properties of ModelConfig -> the keys they are worked out from
DERIVED = {
    "ffn_width": {"ffn_size", "hidden_size"},
    "user_width": {"user_size", "user_fusion", "hidden_size"},
    "head_size": {"hidden_size", "num_heads"},
    "absolute_positions": {"positional"},
    "norm_style": {"norm"},
    "position_code": {"positional"},
    "item_width": {"pos_dim", "pos_fusion", "positional", "user_size", "user_fusion", "hidden_size"},
    "timed": {"time_bias"},
}


@pytest.fixture
def toy():
    registry.load_plugins([str(PLUGIN)])
    yield
    registry.unregister("toy")


def _read_by_the_model(backbone: str) -> set[str]:
    """The ModelConfig keys a backbone's code reads while it builds its model and encodes a batch."""
    dropout = {"llama": ["model.dropout=0"], "transfo_xl": ["model.activation=relu"]}.get(backbone, [])
    task = "ar" if backbone in ("duorec", "gru4rec") else "ae"
    cfg = load_config(None, [f"model.backbone={backbone}", f"task={task}", *dropout])
    read: set[str] = set()
    fields = {f.name for f in dataclasses.fields(ModelConfig)}

    class Recording(ModelConfig):
        def __getattribute__(self, name: str):
            if name in fields or name in DERIVED:
                read.add(name)
            return super().__getattribute__(name)

    cfg.model = Recording(**{name: getattr(cfg.model, name) for name in fields})
    torch.manual_seed(0)
    model = registry.build(cfg, num_items=30, num_users=10, max_len=8)
    with torch.no_grad():  # and while it encodes a batch: some keys are read there (local heads, positions)
        model.eval()(torch.tensor([[0, 3, 5, 7], [2, 4, 6, 8]]), torch.tensor([1, 2]))
    keys = set().union(*(DERIVED.get(name, {name}) for name in read))
    return {f"model.{key}" for key in keys} - {"model.backbone"}


@pytest.mark.parametrize("backbone", BUILT)
def test_a_backbone_reads_no_key_its_entry_does_not_declare(backbone):
    """The third way of saying what a backbone reads (its code) agrees with the declaration: no key outside
    `reads` and its own settings, and none it declares as accepted with no effect."""
    entry = registry.lookup(backbone)
    read = _read_by_the_model(backbone)
    declared = set(registry.MODEL_KEYS) if entry.reads is None else set(entry.reads)
    assert read <= declared | set(entry.settings), sorted(read - declared - set(entry.settings))
    assert not read & entry.inert, sorted(read & entry.inert)
    assert "model.hidden_size" in read  # the recording sees the reads at all


# keys a backbone's reads declare that its model code does not read: read by the training batches (SSE), or
# checked against the one value the architecture has (HF models keep their own norms and positions)
READ_ELSEWHERE = {"model.item_sse_prob", "model.user_sse_prob", "model.sse_style", "model.session_gap"}
VALUE_CHECKED = {
    "bsarec": {"model.norm", "model.positional"},
    "albert": {"model.norm", "model.positional"},
    "llama": {"model.norm", "model.positional", "model.dropout"},
    "transfo_xl": {"model.positional", "model.activation"},
    "hf:bert": {"model.norm", "model.positional"},
}


@pytest.mark.parametrize("backbone", BUILT)
def test_a_backbone_reads_every_key_its_entry_declares(backbone):
    """The other way round: every key the declaration says the backbone reads is read by its model, by the
    training batches, or checked against the one value its architecture has: none is a silent no-op."""
    entry = registry.lookup(backbone)
    declared = set(registry.MODEL_KEYS) if entry.reads is None else set(entry.reads)
    declared -= set(registry.owned_settings()) | READ_ELSEWHERE | VALUE_CHECKED.get(backbone, set())
    if not entry.time_bias:
        declared.discard("model.time_bias")
    assert declared <= _read_by_the_model(backbone), sorted(declared - _read_by_the_model(backbone))


def _changed(key: str):
    """A value of `key` other than its default that its field admits alone."""
    f = next(f for f in dataclasses.fields(ModelConfig) if f.name == key.removeprefix("model."))
    default = getattr(ModelConfig(), f.name)
    if "choices" in f.metadata:
        return next(c for c in f.metadata["choices"] if c != default)
    if isinstance(default, bool):
        return not default
    return {int: default + 1, float: 0.125 if default != 0.125 else 0.25}[type(default)]


@pytest.mark.parametrize("backbone", ["bsarec", "gru4rec", "albert", "hf:bert"])
def test_refusals_follow_the_declaration(backbone):
    """Every shared key outside what the backbone reads is refused when changed; every key it accepts with no
    effect is accepted (as before the declarations: spaces and records set them)."""
    entry = registry.lookup(backbone)
    base = [f"model.backbone={backbone}", "task=ar"]
    for key in registry.MODEL_KEYS:
        if key in entry.reads or key in registry.owned_settings():
            continue
        value = _changed(key)
        if key in entry.inert:
            assert getattr(load_config(None, [*base, f"{key}={value}"]).model, key[6:]) == value
        else:
            with pytest.raises(ModsarError, match=re.escape(key) + r"|model\.time_bias"):
                load_config(None, [*base, f"{key}={value}"])


def test_the_generic_refusal_says_what_why_and_the_default():
    with pytest.raises(
        ModsarError,
        match=re.escape(
            "gru4rec has no 'model.ffn_size' (a recurrent model: no attention, positions, norms, "
            "feed-forward layers or user embedding); leave it at 0"
        ),
    ):
        load_config(None, ["model.backbone=gru4rec", "model.ffn_size=16"])
    with pytest.raises(ModsarError, match=re.escape("albert has no 'model.local_heads' (a design knob")):
        load_config(None, ["model.backbone=albert", "task=ae", "model.local_heads=1"])


def test_another_backbones_own_setting_is_refused_with_its_owner():
    with pytest.raises(ModsarError, match=r"'model.gru_size=8' is read by model.backbone=gru4rec only"):
        load_config(None, ["model.bsa_cutoff=3", "model.gru_size=8"])
    assert registry.owned_settings()["loss.cl_weight"] == ("duorec",)


def test_gbce_t_belongs_to_the_gbce_loss():
    with pytest.raises(ModsarError, match=r"'loss.gbce_t' calibrates loss.name=gbce only"):
        load_config(None, ["loss.gbce_t=0.5"])
    assert load_config(None, ["loss.name=gbce", "loss.gbce_t=0.5"]).loss.gbce_t == 0.5


def test_a_plugin_declares_a_setting_of_its_own(toy):
    """model.toy.recency: set, bounded, written and read back, refused elsewhere, read by the model."""
    cfg = load_config(None, ["model.backbone=toy", "model.toy.recency=0.5"])
    assert cfg.model.toy.recency == 0.5 and cfg.flat()["model.toy.recency"] == 0.5
    assert Config.from_dict(cfg.to_dict()) == cfg != load_config(None, ["model.backbone=toy"])
    assert "model.toy.recency" not in Config().flat()  # other backbones' rows gain no column
    with pytest.raises(ModsarError, match=r"'model.toy.recency' must be in \[0, 1\]; got 2.0"):
        load_config(None, ["model.backbone=toy", "model.toy.recency=2"])
    with pytest.raises(ModsarError, match=r"'model.toy.recency=0.5' is read by model.backbone=toy only"):
        load_config(None, ["model.toy.recency=0.5"])
    with pytest.raises(
        ModsarError, match=r"unknown key 'model.toy.nope' \('nope' is not in model.toy; allowed: "
    ):
        load_config(None, ["model.backbone=toy", "model.toy.nope=1"])
    with pytest.raises(ModsarError, match=r"'model.toy' is a section"):
        load_config(None, ["model.backbone=toy", "model.toy=1"])
    inputs = torch.tensor([[3, 1, 4, 1, 5]])
    outputs = []
    for recency in (0.0, 0.5):
        torch.manual_seed(0)
        model = registry.build(
            load_config(None, ["model.backbone=toy", f"model.toy.recency={recency}"]), 9, 2, 5
        )
        outputs.append(model(inputs))
    assert outputs[0][:, 0].equal(outputs[1][:, 0])  # one item: its mean is itself
    assert not outputs[0][:, 1:].equal(outputs[1][:, 1:])


def test_a_config_file_may_set_the_keys_of_the_backbone_an_override_chooses(toy, tmp_path):
    """A file holding model.toy.recency (and loss.gbce_t) is refused alone, with its own line naming it, and
    taken where the overrides choose the backbone (and the loss) that read them."""
    path = tmp_path / "toy.yaml"
    path.write_text("model:\n  toy:\n    recency: 0.5\nloss:\n  gbce_t: 0.5\n")
    cfg = load_config(path, ["model.backbone=toy", "loss.name=gbce"])
    assert (cfg.model.backbone, cfg.model.toy.recency, cfg.loss.gbce_t) == ("toy", 0.5, 0.5)
    with pytest.raises(
        ModsarError, match=rf"^{path}: .*'model.toy.recency=0.5' is read by model.backbone=toy"
    ):
        load_config(path)
    with pytest.raises(
        ModsarError, match=rf"^{path}: .*'model.toy.recency=0.5' is read by model.backbone=toy"
    ):
        load_config(path, ["loss.name=gbce"])  # the overrides do not complete it: the file's refusal
    with pytest.raises(ModsarError, match=r"^config: 'train.lr' must be"):  # they fix it, but break another
        load_config(path, ["model.backbone=toy", "loss.name=gbce", "train.lr=-1"])


def test_a_plugin_is_loaded_for_its_section_key(monkeypatch):
    """`modsar train model.backbone=toy model.toy.recency=...` with the plugin named in $MODSAR_PLUGINS: the
    section's key is known before the backbone is checked."""
    monkeypatch.setenv(registry.PLUGINS_ENV, str(PLUGIN))
    try:
        assert load_config(None, ["model.toy.recency=0.25", "model.backbone=toy"]).model.toy.recency == 0.25
    finally:
        registry.unregister("toy")


def test_the_reference_lists_a_plugins_setting(toy, capsys):
    from modsar.cli import main

    assert main(["train", "--list-keys"]) == 0
    assert "model.toy.recency = 0.0  (model.backbone=toy)" in capsys.readouterr().out.splitlines()
    page = gen_reference.config_page(plugins=True)
    assert "toy" not in gen_reference.config_page()  # the committed page: core and hf_plugins only
    assert "| `model.toy.recency` | float | `0.0` | must be in [0, 1] | the weight of the item at t" in page
    toy_row = next(line for line in page.splitlines() if line.startswith("| `toy` |"))
    assert toy_row.startswith("| `toy` | `toy.recency` | `num_layers`, `num_heads`, ") and toy_row.endswith(
        " | none |"
    )
    assert "`hidden_size`" not in toy_row and "`time_bias`" in toy_row  # it reads the one, not the other
    assert "| `gru4rec` | `gru_size` | `ffn_size`, `activation`," in page


@pytest.mark.parametrize(
    "section, problem",
    [
        (dict, "must be a dataclass class"),
        (dataclasses.make_dataclass("NoDefault", [("x", "float")]), "'x' must have a default"),
        (
            dataclasses.make_dataclass("Odd", [("x", "dict", dataclasses.field(default_factory=dict))]),
            "got dict",
        ),
    ],
)
def test_a_bad_section_is_refused_when_registered(section, problem):
    with pytest.raises(ModsarError, match=re.escape(problem)):
        registry.register(registry.BackboneEntry("badsection", "x:y", section=section))
    assert registry.find("badsection") is None
    with pytest.raises(ModsarError, match="cannot have a settings section"):
        registry.register(registry.BackboneEntry("hf2:", "x:y", section=dataclasses.make_dataclass("S", [])))


def test_a_declared_key_that_is_no_config_key_is_refused_when_registered():
    with pytest.raises(ModsarError, match=r"declares model.gru_sise, which is no shared config key"):
        registry.register(registry.BackboneEntry("typo", "x:y", settings=("model.gru_sise",)))
    with pytest.raises(ModsarError, match=r"declares model.nope, which is no shared config key"):
        registry.register(registry.BackboneEntry("typo", "x:y", inert=frozenset({"model.nope"})))
    assert registry.find("typo") is None


def test_a_section_cannot_shadow_a_model_attribute_and_leaves_with_its_entry(toy):
    for name in ("timed", "head_size", "backbone", "section"):
        with pytest.raises(ModsarError, match="cannot have a settings section"):
            registry.register(
                registry.BackboneEntry(name, "x:y", section=dataclasses.make_dataclass("S", []))
            )
    toy_entry = registry.lookup("toy")
    registry.register(dataclasses.replace(toy_entry, section=None))  # registered again, without it
    try:
        with pytest.raises(ModsarError, match=r"unknown key 'model\.toy\.recency'"):
            load_config(None, ["model.backbone=toy", "model.toy.recency=0.5"])
    finally:
        registry.register(toy_entry)


def test_replicas_are_told_apart_by_what_trained_not_where(toy):
    """Seed re-runs given a GPU are still replicas (their train.device says where they ran); two toy rows
    that differ in the plugin's own setting are not."""
    import pandas as pd

    from modsar.records.rows import differing_keys

    rows = pd.DataFrame(
        [
            {"seed": 0, "train.device": "auto", "model.hidden_size": 8, "model.toy.recency": 0.0},
            {"seed": 1, "train.device": "cuda", "model.hidden_size": 8, "model.toy.recency": 0.0},
        ]
    )
    assert differing_keys(rows) == []
    rows.loc[1, "model.toy.recency"] = 0.5
    assert differing_keys(rows) == ["model.toy.recency"]


def test_the_old_name_of_settings_still_declares_them():
    entry = registry.BackboneEntry("old", "x:y", owned_settings=("model.gru_size",))
    assert entry.settings == ("model.gru_size",)


@pytest.mark.parametrize(
    "fields, problem",
    [
        ([("a", "float", dataclasses.field(default="abc"))], "must be float"),
        ([("a", "float", dataclasses.field(default=float("nan")))], "must be a finite number"),
        (
            [("a", "str", dataclasses.field(default="zzz", metadata={"choices": ("x", "y")}))],
            "must be one of x, y",
        ),
        ([("a", "str", config.bounded("x", low=0))], "only a number (or a list of them) has a range"),
    ],
)
def test_a_section_whose_defaults_break_its_own_rules_is_refused(fields, problem):
    with pytest.raises(ModsarError, match=re.escape(problem)):
        registry.register(
            registry.BackboneEntry("odd", "x:y", section=dataclasses.make_dataclass("S", fields))
        )
    frozen = dataclasses.make_dataclass("F", [("a", "float", dataclasses.field(default=0.0))], frozen=True)
    with pytest.raises(ModsarError, match="is frozen"):
        registry.register(registry.BackboneEntry("odd", "x:y", section=frozen))
    assert registry.find("odd") is None and "odd" not in config.SECTIONS


def test_a_plugin_cannot_take_another_modules_backbone_or_a_key_every_run_reads(toy, tmp_path):
    clash = tmp_path / "clash.py"
    clash.write_text(
        "from dataclasses import dataclass\nfrom modsar.model.registry import BackboneEntry, register\n"
        "@dataclass\nclass Other:\n    zzz: float = 0.0\n"
        "register(BackboneEntry('toy', 'x:y', tasks=('ar',), section=Other))\n"
    )
    with pytest.raises(
        ModsarError, match=r"registers backbone 'toy', which .*toy_backbone.py registered already"
    ):
        registry.load_plugins([str(clash)])
    assert config.SECTIONS["toy"].__name__ == "ToySettings"  # the registry as it was, sections too
    assert load_config(None, ["model.backbone=toy", "model.toy.recency=0.3"]).model.toy.recency == 0.3
    with pytest.raises(ModsarError, match="claims seed as its own, which every run reads"):
        registry.register(registry.BackboneEntry("grab", "x:y", settings=("seed",)))


def test_a_secret_in_a_plugins_text_setting_is_refused(tmp_path):
    """A Config object given to the API is checked for passwords in URIs as a mapping is, its plugin
    section included (a row and a checkpoint would hold it)."""
    import modsar

    section = dataclasses.make_dataclass("Leaky", [("source", "str", dataclasses.field(default=""))])
    registry.register(registry.BackboneEntry("leaky", "x:y", tasks=("ar",), section=section))
    try:
        cfg = load_config(None, ["model.backbone=leaky"])
        cfg.model.leaky.source = "s3://AKIA:topsecret@bucket/x"
        with pytest.raises(ModsarError, match=r"a URI here may carry no password") as refused:
            modsar.train(cfg, dataset="synthetic", results=str(tmp_path))
        assert "topsecret" not in str(refused.value)
        with pytest.raises(ModsarError, match=r"'model.leaky' is a section; set one of its keys, or assign"):
            cfg.model.leaky = 5
    finally:
        registry.unregister("leaky")
