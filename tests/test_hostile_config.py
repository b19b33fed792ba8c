"""What a hostile (or careless) user types: YAML 1.1 surprises read as YAML 1.2, keys given twice, Config
objects changed by hand, degenerate numbers, and an API that must leave the caller's global state as it found
it. Each case has a known answer: the value ModSAR reads, or the one-line error it gives."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest
import torch
from conftest import write

import modsar
from modsar.api import _config
from modsar.cli import main
from modsar.config import FLOAT32_TINY, Config, all_keys, load_config, parse_override, read_yaml
from modsar.errors import ModsarError
from modsar.sweep.spaces import load_space
from modsar.version import __version__


def _refusal(given: object) -> str:
    """The one-line message `_config` (the API's reading of a config) gives for `given`."""
    with pytest.raises(ModsarError) as caught:
        _config(given, None)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- YAML 1.2 (core schema) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,value",
    [
        ("010", 10),  # YAML 1.1: 8 (octal)
        ("0o17", 15),
        ("0x1F", 31),
        ("+12", 12),
        ("-0", 0),
        ("1:30", "1:30"),  # YAML 1.1: 90 (base 60)
        ("1_000", "1_000"),  # YAML 1.1: 1000
        ("0b101", "0b101"),  # YAML 1.1: 5
        ("on", "on"),  # YAML 1.1: true
        ("off", "off"),
        ("yes", "yes"),
        ("no", "no"),
        ("y", "y"),
        ("N", "N"),
        ("tRUE", "tRUE"),
        ("True", True),
        ("FALSE", False),
        ("1e3", 1000.0),  # YAML 1.1: the text "1e3" (no dot)
        ("1E-3", 0.001),
        (".5", 0.5),
        ("1.", 1.0),
        ("-.Inf", -math.inf),
        ("-.nan", "-.nan"),
        ("~", None),
        ("NULL", None),
        ("", None),
        ("2000-11-20", "2000-11-20"),  # YAML 1.1: a date
        ("=", "="),  # YAML 1.1: a 'value' tag no loader constructs
        ("!!int 010", 10),  # an explicit tag reads YAML 1.2's forms too
        ("!!float 1", 1.0),
        ("[1, 010, on]", [1, 10, "on"]),
    ],
)
def test_values_are_read_as_yaml_1_2(text, value):
    read = read_yaml(text)
    assert read == value or (value != value and read != read)  # (NaN)
    assert type(read) is type(value)


@pytest.mark.parametrize("text", ["!!int 1:30", "!!int 1_000", "!!bool yes", "!!float 1_0", "{a: 1, a: 2}"])
def test_explicit_tags_and_repeated_keys_outside_yaml_1_2_are_errors(text):
    import yaml

    with pytest.raises(yaml.YAMLError):
        read_yaml(text)


@pytest.mark.parametrize(
    "override,expected",
    [
        ("train.max_epochs=010", ("train", "max_epochs", 10)),
        ("train.max_epochs=0x10", ("train", "max_epochs", 16)),
        ("dataset=yes", ("", "dataset", "yes")),  # was True: "'dataset' must be str, got True"
        ("train.lr=1e-3", ("train", "lr", 0.001)),
        ("train.lr='1e-3'", ("train", "lr", 0.001)),  # the text of a YAML 1.2 number, in a float key
        ("data.split_dates=2000-11-20,2000-12-01", ("data", "split_dates", "2000-11-20,2000-12-01")),
    ],
)
def test_overrides_read_yaml_1_2(override, expected):
    section, key, value = expected
    cfg = load_config(None, [override])
    got = getattr(getattr(cfg, section) if section else cfg, key)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "override,message",
    [
        ("data.max_len=1:30", "override: 'data.max_len' must be int, got '1:30'"),  # was 90
        ("data.padding_free=on", "override: 'data.padding_free' must be bool, got 'on'"),  # was true
        ("model.embedding_norm=yes", "override: 'model.embedding_norm' must be bool, got 'yes'"),
        ("train.max_epochs=1_000", "override: 'train.max_epochs' must be int, got '1_000'"),
        ("train.lr=1_000", "override: 'train.lr' must be float, got '1_000'"),  # Python's float() takes it
        ("train.lr=nan", "override: 'train.lr' must be float, got 'nan'"),
        ("train.lr='inf'", "override: 'train.lr' must be float, got 'inf'"),
        ("train.device=~", "override: 'train.device' must be str, got None"),
        ("model.hidden_size=0b1000000", "override: 'model.hidden_size' must be int, got '0b1000000'"),
    ],
)
def test_yaml_1_1_values_are_refused_in_one_line(override, message):
    with pytest.raises(ModsarError) as caught:
        load_config(None, [override])
    assert str(caught.value) == message


def test_a_config_file_is_read_as_yaml_1_2_even_under_a_directive(tmp_path):
    path = write(
        tmp_path / "c.yaml",
        "%YAML 1.2\n---\ntrain:\n  max_epochs: 010\n  patience: !!int 012\ndataset: on\nmodel.norm: pre\n",
    )
    cfg = load_config(path)
    assert (cfg.train.max_epochs, cfg.train.patience, cfg.dataset, cfg.model.norm) == (10, 12, "on", "pre")
    sexagesimal = write(tmp_path / "s.yaml", "data:\n  max_len: 1:30\n")
    with pytest.raises(ModsarError) as caught:
        load_config(sexagesimal)
    assert str(caught.value) == f"{sexagesimal}: 'data.max_len' must be int, got '1:30'"
    tagged = write(tmp_path / "t.yaml", "data:\n  padding_free: !!bool yes\n")
    with pytest.raises(ModsarError) as caught:
        load_config(tagged)
    assert str(caught.value) == (
        f"config file '{tagged}' is not valid YAML at line 2: 'yes' is not a YAML 1.2 bool"
    )


def test_a_config_file_holds_a_mapping_or_nothing(tmp_path):
    """A file of `0` or `false` was read as the defaults (`data or {}`); an empty one still is. A merge (<<)
    is kept: the mapping that merges it may override its keys."""
    for text in ("0\n", "false\n", "[seed]\n"):
        path = write(tmp_path / "c.yaml", text)
        with pytest.raises(ModsarError) as caught:
            load_config(path)
        assert str(caught.value) == f"config file '{path}' must hold a mapping of keys to values"
    assert load_config(write(tmp_path / "e.yaml", "")) == Config()
    assert load_config(write(tmp_path / "m.yaml", "<<: {seed: 3, mask_prob: 0.5}\nseed: 4\n")).seed == 4
    assert load_config(tmp_path / "m.yaml").mask_prob == 0.5


def test_search_space_files_are_read_as_yaml_1_2(tmp_path):
    path = write(
        tmp_path / "s.yaml",
        "description: d\nbase: {train.patience: 010, model.hidden_size: 0x10}\nparams:\n"
        "  model.num_heads: {grid: [01, 02]}\n",
    )
    space = load_space(str(path))
    assert space.base == {"train.patience": 10, "model.hidden_size": 16}
    assert space.params[0].values == [1, 2]
    flags = write(tmp_path / "f.yaml", "params:\n  model.embedding_norm: {grid: [on, off]}\n")
    with pytest.raises(ModsarError, match=re.escape("'model.embedding_norm' must be bool, got 'on'")):
        load_space(str(flags))


def test_a_yaml_list_of_two_plain_dates_is_still_the_two_cuts():
    """YAML 1.2 reads 2000-11-20 as text: the list means the same cuts as the comma-separated text."""
    assert parse_override("data.split_dates=[2000-11-20, 2000-12-01]")[1] == ["2000-11-20", "2000-12-01"]
    cfg = load_config(None, ["data.split=temporal", "data.split_dates=[2000-11-20, 2000-12-01]"])
    assert cfg.data.split_dates == "2000-11-20,2000-12-01"


# --- keys given twice -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,key,lines",
    [
        ("train:\n  lr: 0.1\n  lr: 0.2\n", "'lr'", (2, 3)),
        ("train.lr: 0.1\nmodel.dropout: 0.1\ntrain.lr: 0.2\n", "'train.lr'", (1, 3)),
        ("model: {hidden_size: 8}\nmodel: {num_heads: 2}\n", "'model'", (1, 2)),
        ("seed: 1\nseed: 01\n", "'seed'", (1, 2)),
    ],
)
def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path, text, key, lines):
    path = write(tmp_path / "c.yaml", text)
    with pytest.raises(ModsarError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"config file '{path}' gives the key {key} twice in one mapping (lines {lines[0]} and {lines[1]}); "
        "YAML would keep only the last: remove one"
    )


def test_a_key_given_nested_and_dotted_is_refused_in_files_mappings_and_config_objects(tmp_path):
    path = write(tmp_path / "c.yaml", "model:\n  hidden_size: 8\nmodel.hidden_size: 16\n")
    with pytest.raises(ModsarError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: 'model.hidden_size' is given twice, as model: {{hidden_size}} and as model.hidden_size; "
        "give it once"
    )
    for mapping in (
        {"model": {"hidden_size": 8}, "model.hidden_size": 16},
        {"model.hidden_size": 16, "model": {"hidden_size": 8}},  # either order: no silent winner
    ):
        assert "'model.hidden_size' is given twice" in _refusal(mapping)
    cfg = Config()
    cfg.model = {"hidden_size": 8}  # type: ignore[assignment]
    assert _config(cfg, None).model.hidden_size == 8  # a section given as a mapping is read by name
    loop: dict = {}
    loop["model"] = loop
    assert _refusal(loop) == "config: 'model.model' contains itself; give the keys as values"


def test_nested_aliases_in_a_config_file_are_refused_before_they_are_expanded(tmp_path):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)
    ]
    path = write(tmp_path / "bomb.yaml", "\n".join(levels) + "\ndataset: *a8\n")
    with pytest.raises(ModsarError) as caught:
        load_config(path)
    assert str(caught.value).startswith(
        f"config file '{path}' expands its YAML aliases (*name) into more than 10,000 values"
    )


def test_a_hostile_nesting_depth_is_one_line():
    with pytest.raises(ModsarError) as caught:
        load_config(None, ["train.max_epochs=" + "[" * 5000])
    assert str(caught.value).startswith("override: 'train.max_epochs' must be int, got '[[[[")
    assert str(caught.value).endswith("(5,002 characters)")


# --- a Config object is checked as a mapping is ---------------------------------------------------


@pytest.mark.parametrize(
    "key,value",
    [
        ("model.norm", "bogus"),  # trained as post-norm, its row saying "bogus"
        ("train.lr", "abc"),  # a traceback deep in the optimizer
        ("model.hidden_size", 3.5),
        ("task", "lm"),
        ("data.padding_free", 1),
        ("eval.ks", [10, 10]),
        ("train.lr", 5e-324),
        ("model.dropout", math.nan),
        ("seed", True),
    ],
)
def test_a_config_object_is_validated_exactly_as_a_mapping(key, value):
    cfg = Config()
    section, _, name = key.rpartition(".")
    setattr(getattr(cfg, section) if section else cfg, name, value)
    assert _refusal(cfg) == _refusal({key: value})
    assert key in _refusal(cfg)


def test_a_config_object_with_a_misspelt_attribute_is_refused_and_a_valid_one_is_kept():
    cfg = Config()
    cfg.train.max_epoch = 3  # type: ignore[attr-defined]
    assert _refusal(cfg).startswith("config: unknown key 'train.max_epoch' ('max_epoch' is not in train;")
    good = load_config(None, ["task=ae", "model.norm=pre", "eval.ks=[5, 10]", "train.monitor=ndcg@5"])
    read = _config(good, "video")
    assert read == load_config(
        None, ["task=ae", "model.norm=pre", "eval.ks=[5, 10]", "train.monitor=ndcg@5", "dataset=video"]
    )
    assert good.dataset == "synthetic" and read is not good and read.eval.ks is not good.eval.ks


def test_numpy_numbers_are_numbers():
    cfg = _config(
        {
            "model.hidden_size": np.int64(32),
            "train.lr": np.float32(0.5),
            "eval.ks": [np.int32(5)],
            "train.monitor": "ndcg@5",
        },
        None,
    )
    assert (cfg.model.hidden_size, cfg.train.lr, cfg.eval.ks) == (32, 0.5, [5])
    assert type(cfg.model.hidden_size) is int and type(cfg.eval.ks[0]) is int


# --- degenerate numbers ---------------------------------------------------------------------------

FLOAT_KEYS = [key for key, value in Config().flat().items() if isinstance(value, float)]
SIZE_KEYS = [
    "data.batch_size",
    "data.eval_batch_size",
    "model.hidden_size",
    "model.num_layers",
    "model.num_heads",
    "train.max_epochs",
    "train.eval_every",
    "loss.num_negatives",
]


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "1e39"])
def test_no_float_key_takes_a_non_finite_number(key, value):
    with pytest.raises(ModsarError, match=re.escape(f"'{key}' must be a finite number of float32 range")):
        load_config(None, [f"{key}={value}"])


@pytest.mark.parametrize("key", FLOAT_KEYS)
def test_no_float_key_takes_a_subnormal_number(key):
    with pytest.raises(ModsarError, match=re.escape(f"'{key}' must be")) as caught:
        load_config(None, [f"{key}=5e-324"])
    assert "5e-324" in str(caught.value)  # float32's smallest normal number, or the key's own range, says why


@pytest.mark.parametrize("key", SIZE_KEYS)
@pytest.mark.parametrize("value", [0, -1])
def test_no_size_is_zero_or_negative(key, value):
    with pytest.raises(ModsarError, match=re.escape(f"'{key}' must be >= 1; got {value}")):
        load_config(None, [f"{key}={value}"])


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "train.lr=5e-324",
            "config: 'train.lr' must be a positive normal float32, >= 2**-126 (about 1.18e-38): the model "
            "trains in float32, where a smaller rate is 0 or subnormal; got 5e-324",
        ),
        ("train.lr=1e-38", "'train.lr' must be a positive normal float32"),  # normal in float64, not float32
        ("train.lr=0", "'train.lr' must be a positive normal float32"),
        ("train.lr=-0.001", "'train.lr' must be a positive normal float32"),
        (
            "model.dropout=5e-324",
            "config: 'model.dropout' must be 0 or at least 2**-126 (about 1.18e-38) in size, float32's "
            "smallest normal number: the model computes in float32, where 5e-324 is subnormal or 0",
        ),
        ("model.session_gap=1e-320", "'model.session_gap' must be at least 2**-126"),  # no "0 or": > 0
        ("loss.cl_temperature=1e-40", "'loss.cl_temperature' must be at least 2**-126"),
        ("train.weight_decay=-1e-40", "'train.weight_decay' must be >= 0 (0 = none); got -1e-40"),
        (
            "eval.ks=[10,10]",
            "config: 'eval.ks' lists 10 twice; list each cut-off once; got [10, 10]",
        ),
        ("eval.ks=[5,10,20,5]", "'eval.ks' lists 5 twice"),
        ("eval.ks=[]", "'eval.ks' must be a non-empty list of distinct positive integers"),
        ("eval.ks=[0,10]", "'eval.ks' must be a non-empty list of distinct positive integers"),
        ("mask_prob=0", "'mask_prob' must be in (0, 1)"),
        ("mask_prob=1", "'mask_prob' must be in (0, 1)"),
        ("model.dropout=-0.1", "'model.dropout' must be in [0, 1)"),
        ("model.attn_dropout=1", "'model.attn_dropout' must be in [0, 1)"),
        ("data.max_len=-1", "'data.max_len' must be >= 1, or 0 for the dataset default; got -1"),
        ("train.beta2=1", "'train.beta2' (Adam's second-moment decay) must be in [0, 1)"),
        ("seed=true", "'seed' must be an integer, got True"),
        (
            "train.patience=" + "9" * 5000,
            "override: 'train.patience' must be int, got '99999999999999999999999999999999999999999999999999"
            "999999999... (5,002 characters)",
        ),
    ],
)
def test_degenerate_numbers_are_refused_in_one_line(override, message):
    with pytest.raises(ModsarError) as caught:
        load_config(None, [override])
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_smallest_normal_float32_rate_is_kept():
    assert load_config(None, [f"train.lr={FLOAT32_TINY!r}"]).train.lr == FLOAT32_TINY
    assert load_config(None, ["model.dropout=0", "train.weight_decay=0.0"]).model.dropout == 0.0


def test_integers_beyond_any_float_are_one_line_from_python():
    assert _refusal({"train.patience": 10**5000}) == (
        "config: 'train.patience' must fit in 64 bits; got an integer of about 5,001 digits"
    )
    assert _refusal({"train.lr": 10**400}) == (
        "config: 'train.lr' must be a finite number of float32 range; got an integer of about 401 digits"
    )
    assert _refusal({"model.norm": "x" * 100_000}).endswith("... (100,002 characters)")


def test_every_key_still_takes_its_default():
    """The new rules refuse nothing the defaults hold: every key set to its default, as an override."""
    from modsar.config import flatten

    defaults = flatten(Config().to_dict())
    assert sorted(defaults) == all_keys()
    assert load_config(None, [f"{key}={value!r}" for key, value in defaults.items()]) == Config()


# --- modsar --version -----------------------------------------------------------------------------


def test_modsar_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"modsar {__version__}\n"


# --- the API leaves the caller's global state as it found it --------------------------------------


def _seed_and_draw() -> tuple[float, float, float]:
    """What a notebook's loop draws from the global generators before each call."""
    return random.random(), float(np.random.uniform()), float(torch.rand(1))


TINY = {
    "model.hidden_size": 16,
    "model.num_layers": 1,
    "train.max_epochs": 1,
    "train.patience": 0,
    "train.threads": 1,
    "seed": 7,
}


def test_the_api_leaves_the_global_generators_and_threads_as_it_found_them(tmp_path):
    from modsar.randomness import global_states, same_states

    torch.set_num_threads(2)
    random.seed(123), np.random.seed(123), torch.manual_seed(123)
    expected = [_seed_and_draw() for _ in range(3)]
    random.seed(123), np.random.seed(123), torch.manual_seed(123)
    draws = [_seed_and_draw()]
    before = global_states()
    row = modsar.train(TINY, dataset="synthetic", results=str(tmp_path / "results"), progress=False)
    assert same_states(before, global_states()) and torch.get_num_threads() == 2
    draws.append(_seed_and_draw())  # the second draw of the caller's stream, not the run's seed's
    before = global_states()
    modsar.load(row["checkpoint"])  # builds a model: its initial weights draw from torch's generator
    modsar.evaluate(row["checkpoint"])
    assert same_states(before, global_states()) and torch.get_num_threads() == 2
    draws.append(_seed_and_draw())
    assert draws == expected
    again = modsar.train(TINY, dataset="synthetic", results=str(tmp_path / "again"), progress=False)
    assert again["test.ndcg@10"] == row["test.ndcg@10"]  # the run computes what it did
    torch.set_num_threads(1)


def test_the_api_restores_the_global_state_on_an_exception(tmp_path, monkeypatch):
    import modsar.sweep
    import modsar.training.trainer as trainer
    from modsar.randomness import global_states, same_states, seed_everything

    def fail(*args, **kwargs):  # called once the trainer has seeded the generators and set its threads
        raise RuntimeError("failed after seeding")

    monkeypatch.setattr(trainer, "make_split", fail)
    torch.set_num_threads(2)
    np.random.seed(5)
    before = global_states()
    with pytest.raises(RuntimeError, match="failed after seeding"):
        modsar.train(TINY, dataset="synthetic", results=str(tmp_path / "results"), progress=False)
    assert same_states(before, global_states()) and torch.get_num_threads() == 2

    def search_that_seeds(request):
        seed_everything(99)
        torch.set_num_threads(1)
        raise RuntimeError("the search failed")

    monkeypatch.setattr(modsar.sweep, "run_search", search_that_seeds)  # imports the search: Ray draws
    before = global_states()
    with pytest.raises(RuntimeError, match="the search failed"):
        modsar.search("quickstart", "synthetic", results=str(tmp_path / "results"))
    assert same_states(before, global_states()) and torch.get_num_threads() == 2
    torch.set_num_threads(1)
