"""Backbones by name: how to build one, how to check a config for it, and what it can do.

As transformers' Auto classes dispatch by `model_type`, ModSAR dispatches by `model.backbone` through this
table. It imports no model code: config checks import neither torch nor a model module (except that an
`hf:<model_type>` check reads transformers' config table), and a backbone's module is imported only when a
model is built. Adding a backbone is one module (a class with the `Recommender` interface of
`modsar.model.interface`) and one `register(BackboneEntry(...))`; plugins outside this package register from
their own module, named in the `MODSAR_PLUGINS` environment variable (module names or .py paths, comma-
separated) or in a `modsar.backbones` entry point. Search trials load the same plugins in their workers
(a .py path must exist on every node of a cluster; a remote cluster needs an importable module).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from modsar.config import BACKBONE_CHECKS, Config, ModelConfig
from modsar.errors import ModsarError

if TYPE_CHECKING:
    from modsar.model.interface import Recommender

Bad = Callable[[str], NoReturn]
PLUGINS_ENV = "MODSAR_PLUGINS"


@dataclass(frozen=True)
class BackboneEntry:
    """One backbone. `name` is exact ("modular") or a prefix ending in ":" ("hf:" covers "hf:bert", ...)."""

    name: str
    build: (
        str  # "package.module:attr", called (cfg.model, num_items, num_users, max_len, task) -> Recommender
    )
    check: Callable[[Config, Bad], None] | None = None  # refuses what it cannot honour; must not import torch
    tasks: tuple[str, ...] = ("ae", "ar")  # attention directions it implements
    attention_maps: bool = True  # forward(..., need_weights=True) gives per-layer maps (sparsity, rank)
    residual_sites: bool = True  # model.skip_sites() can list its attention skips (mixing, residual scaling)
    recurrent: bool = False  # no attention at all (GRU4Rec): attention diagnostics are not defined for it

    def matches(self, name: str) -> bool:
        if self.name.endswith(":"):
            return name.startswith(self.name) and len(name) > len(self.name)
        return name == self.name


_ENTRIES: dict[str, BackboneEntry] = {}
_LOADED: dict[str, set[str]] = {}  # plugin spec -> names it registered, in load order (search forwards them)
_CONFIGURED: str | None = None  # the $MODSAR_PLUGINS value whose plugins (and entry points) are loaded


def register(entry: BackboneEntry) -> BackboneEntry:
    """Add (or replace) a backbone; returns it so a module can keep a handle."""
    _ENTRIES[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a backbone; a plugin left with none is forgotten, so loading it again from a .py path
    re-registers (a module name would come back from Python's module cache without registering)."""
    _ENTRIES.pop(name, None)
    for spec, registered in list(_LOADED.items()):
        registered.discard(name)
        if not registered:
            del _LOADED[spec]


def names() -> list[str]:
    return [entry.name + ("<model_type>" if entry.name.endswith(":") else "") for entry in _ENTRIES.values()]


def find(name: str) -> BackboneEntry | None:
    """The entry for a backbone name (an exact name before the longest matching prefix); plugins are loaded
    on the first miss."""
    for attempt in range(2):
        if name in _ENTRIES and not name.endswith(":"):
            return _ENTRIES[name]
        prefixes = [entry for entry in _ENTRIES.values() if entry.name.endswith(":") and entry.matches(name)]
        if prefixes:
            return max(prefixes, key=lambda entry: len(entry.name))
        if attempt == 0:
            load_plugins()
    return None


def _unknown(name: str) -> str:
    return (
        f"'model.backbone' {name!r} is unknown; choose one of {', '.join(names())} (or register a plugin "
        "backbone: see modsar.model.registry)"
    )


def lookup(name: str) -> BackboneEntry:
    entry = find(name)
    if entry is None:
        raise ModsarError(_unknown(name))
    return entry


# settings only one backbone reads: changed elsewhere they would be a silent no-op, which misleads a search
OWNED_SETTINGS = {
    "model.gru_size": "gru4rec",
    "model.bsa_cutoff": "bsarec",
    "model.bsa_alpha": "bsarec",
    "loss.cl_weight": "duorec",
    "loss.cl_temperature": "duorec",
    "loss.cl_views": "duorec",
    "loss.cl_similarity": "duorec",
}


def _refuse_foreign(cfg: Config, bad: Bad) -> None:
    default = Config()
    now, before = cfg.flat(), default.flat()  # dotted names, as OWNED_SETTINGS writes them
    for key, owner in OWNED_SETTINGS.items():
        if owner != cfg.model.backbone and now[key] != before[key]:
            here = "modular (the default)" if cfg.model.backbone == "modular" else cfg.model.backbone
            bad(
                f"'{key}={now[key]}' is read by model.backbone={owner} only, and the backbone here is {here}: leave "
                f"it at {before[key]!r} (in a space that varies the backbone, set it under when: "
                f"{{model.backbone: {owner}}})"
            )
    if cfg.loss.name != "gbce" and cfg.loss.gbce_t != default.loss.gbce_t:
        bad(
            f"'loss.gbce_t' calibrates loss.name=gbce only, and this run's loss is {cfg.loss.name}: leave it at "
            f"{default.loss.gbce_t}"
        )


def check_config(cfg: Config, bad: Bad, stored: bool = False) -> None:
    """The backbone exists, implements the task, and accepts the model settings (called by config.validate;
    `stored` records keep other backbones' settings, see there)."""
    _load_configured()
    entry = find(cfg.model.backbone)
    if entry is None:
        bad(_unknown(cfg.model.backbone))
    if not stored:
        _refuse_foreign(cfg, bad)
    if cfg.task not in entry.tasks:
        bad(
            f"backbone {cfg.model.backbone} implements task {' and '.join(entry.tasks)} only; got task={cfg.task}"
        )
    if cfg.model.time_bias != "none" and cfg.model.backbone != "modular":
        bad(
            f"'model.time_bias={cfg.model.time_bias}' is an attention bias of the modular backbone (SASRec / BERT4Rec); "
            f"backbone {cfg.model.backbone} has none: leave it at none"
        )
    if entry.check is not None:
        entry.check(cfg, bad)


def build(cfg: Config, num_items: int, num_users: int, max_len: int) -> Recommender:
    """A fresh model for `cfg` (the backbone's module is imported here, not before)."""
    from modsar.model import interface  # imports torch: only when a model is built

    entry = lookup(cfg.model.backbone)
    module_name, _, attr = entry.build.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    model = factory(cfg.model, num_items, num_users, max_len, cfg.task)
    if not isinstance(model, interface.Recommender):
        missing = [
            m for m in ("num_items", "item_emb", "score", "skip_sites", "describe") if not hasattr(model, m)
        ]
        raise ModsarError(
            f"backbone {entry.name!r} ({entry.build}) built a {type(model).__name__} without the "
            f"Recommender interface (missing {', '.join(missing)}); see modsar.model.interface"
        )
    return model


def load_plugins(specs: list[str] | None = None) -> list[str]:
    """Import plugin modules (each registers its backbones): `specs`, else $MODSAR_PLUGINS and the
    `modsar.backbones` entry points. A spec is a module name or a path to a .py file. Returns every spec
    loaded in this process so far. A plugin that cannot be imported, whatever it raises, is one ModsarError
    naming it (an interrupt stays a KeyboardInterrupt, whose message names it), and leaves the registry as it
    was (a half-run plugin keeps none of its backbones)."""
    named: list[tuple[str, str]]  # (spec, how to drop it)
    if specs is None:
        named = [
            (s.strip(), f"remove it from ${PLUGINS_ENV}")
            for s in os.environ.get(PLUGINS_ENV, "").split(",")
            if s.strip()
        ]
        for point in entry_points(group="modsar.backbones"):
            package = f"package {point.dist.name}" if point.dist is not None else "the package"
            named.append(
                (
                    point.value.partition(":")[0],
                    f"uninstall {package} (its modsar.backbones entry point {point.name!r} names it)",
                )
            )
    else:  # a search worker: the plugins its driver loaded, from either source
        named = [
            (
                s,
                f"remove it from ${PLUGINS_ENV} (or uninstall the package whose modsar.backbones entry "
                "point names it)",
            )
            for s in specs
        ]
    # a .py path is made absolute: search workers run in other folders
    absolute = [(str(Path(s).resolve()) if s.endswith(".py") else s, d) for s, d in named]
    for spec, drop in absolute:
        if spec in _LOADED:
            continue
        before = dict(_ENTRIES)
        try:
            _import_plugin(spec)
        except KeyboardInterrupt:  # Ctrl-C stays an interrupt (exit 130); the line says what it stopped
            _ENTRIES.clear()
            _ENTRIES.update(before)
            raise KeyboardInterrupt(f"while importing backbone plugin {spec!r}") from None
        except (
            BaseException
        ) as exc:  # anything else its module code raises: SystemExit, BaseException subclasses
            _ENTRIES.clear()
            _ENTRIES.update(before)
            why = _why(spec, exc)
            raise ModsarError(f"backbone plugin {spec!r} cannot be loaded: {why}, or {drop}") from None
        _LOADED[spec] = set(_ENTRIES) - set(before)
    return list(_LOADED)


def _import_plugin(spec: str) -> None:
    """Run a plugin's module: a .py path under a module name of its own, else an importable module name."""
    if not spec.endswith(".py"):
        importlib.import_module(spec)
        return
    path = Path(spec)
    digest = hashlib.sha1(spec.encode()).hexdigest()[:8]  # two plugin files may share a name
    module_spec = importlib.util.spec_from_file_location(f"modsar_plugin_{path.stem}_{digest}", path)
    if module_spec is None or module_spec.loader is None or not path.is_file():
        raise FileNotFoundError(spec)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_spec.name]  # as importlib does for a module name: no half-run module stays
        raise


def _why(spec: str, exc: BaseException) -> str:
    """What went wrong and how to fix it: the plugin is missing (a wrong path or name), or its own code
    raised (the exception's type, first line and the line that raised it)."""
    if isinstance(exc, FileNotFoundError) and exc.args == (spec,):
        return "there is no such file; name an existing .py file"
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing and (spec == missing or spec.startswith(missing + ".")):
        return "no module of that name is importable here; name an importable module (see PYTHONPATH)"
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # an exception whose own __str__ raises: its type still names it
        lines = []
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
    last = frames[-1] if frames and not isinstance(exc, SyntaxError) else None  # SyntaxError names its line
    at = f" at {last.filename}:{last.lineno}" if last else ""
    return f"importing it raised {text}{at}; fix the module"


def _load_configured() -> None:
    """$MODSAR_PLUGINS and the entry points, once per value of the variable (a config check runs often): a
    broken plugin is reported whichever backbone is chosen, not only when a plugin backbone is looked up."""
    global _CONFIGURED
    now = os.environ.get(PLUGINS_ENV, "")
    if now != _CONFIGURED:
        load_plugins()
        _CONFIGURED = now


def loaded_plugins() -> list[str]:
    return list(_LOADED)


# the residual-dominance paper's names for (backbone, task): how reports and analyses label a comparison of models
PAPER_NAMES = {
    ("modular", "ar"): "SASRec",
    ("duorec", "ar"): "DuoRec",
    ("bsarec", "ar"): "BSARec",
    ("modular", "ae"): "BERT4Rec",
    ("gru4rec", "ar"): "GRU4Rec",
    ("bsarec", "ae"): "BSARec-AE",
}


def paper_name(backbone: str, task: str) -> str:
    """ "SASRec", "GRU4Rec", ...; any other pair as "<backbone> <TASK>"."""
    return PAPER_NAMES.get((backbone, task), f"{backbone} {task.upper()}")


def _check_modular(cfg: Config, bad: Bad) -> None:
    m: ModelConfig = cfg.model
    if m.positional in ("rope", "relative"):
        bad(
            f"'model.positional={m.positional}' exists only in HF backbones (llama, transfo_xl); the modular "
            "backbone has learned, sinusoidal, none or target_aligned"
        )
    absolute = m.positional in ("auto", "learned", "sinusoidal")
    if not absolute and m.pos_fusion != "add":
        bad(
            f"'model.pos_fusion={m.pos_fusion}' places an absolute position vector, and model.positional="
            f"{m.positional} has none; leave pos_fusion at add"
        )
    if not absolute and m.positions_from != "end":
        bad(
            f"'model.positions_from' counts absolute positions, and model.positional={m.positional} has none; "
            "leave it at end"
        )
    head = m.hidden_size // m.num_heads
    if m.positional == "target_aligned" and m.pos_dim > head:
        bad(
            f"'model.pos_dim' ({m.pos_dim}) is each head's query channel that meets the distance codes under "
            f"target_aligned: at most the head size hidden_size / num_heads = {head}"
        )
    if m.positional == "none" and m.pos_dim:
        bad(
            "'model.pos_dim' is the width of a position channel, and model.positional=none has none; leave it at 0"
        )
    if absolute and m.pos_fusion == "add" and m.pos_dim not in (0, m.hidden_size):
        bad(
            f"'model.pos_dim={m.pos_dim}' needs a position channel of its own: set model.pos_fusion=concat "
            "(beside the item vector) or project ([item; position] projected to the hidden size)"
        )
    if absolute and m.pos_fusion != "add":
        room = m.hidden_size - ((m.user_size or m.hidden_size // 2) if m.user_fusion == "concat" else 0)
        if not 0 < m.pos_dim < (room if m.pos_fusion == "concat" else m.hidden_size + 1):
            limit = (
                f"below {room} (the item vector needs the rest)"
                if m.pos_fusion == "concat"
                else f"at most the hidden size {m.hidden_size}"
            )
            bad(f"'model.pos_dim' with pos_fusion={m.pos_fusion} must be >= 1 and {limit}; got {m.pos_dim}")


def _refuse_unused(cfg: Config, bad: Bad, keys: tuple[str, ...], why: str) -> None:
    """Refuse a changed model knob the backbone has no use for (a silent no-op would mislead a search)."""
    default = ModelConfig()
    changed = [k for k in keys if getattr(cfg.model, k) != getattr(default, k)]
    if changed:
        bad(
            f"{cfg.model.backbone} has no 'model.{changed[0]}' ({why}); leave it at "
            f"{getattr(default, changed[0])!r}"
        )


def _check_bsarec(cfg: Config, bad: Bad) -> None:
    m: ModelConfig = cfg.model
    _refuse_unused(
        cfg,
        bad,
        (
            "head",
            "init",
            "attn_output_dropout",
            "ffn_inner_dropout",
            "scale_embedding",
            "local_heads",
            "pos_dim",
            "pos_fusion",
            "norm_eps",
        ),
        "its layers, embedding LayerNorm, N(0, 0.02) init and dot-product output are fixed, as its code",
    )
    if m.norm not in ("auto", "post"):
        bad(f"bsarec's layers are post-LN (as its code); 'model.norm={m.norm}' is not offered for it")
    if m.positional not in ("auto", "learned"):
        bad(
            f"bsarec has learned positions (as its code); 'model.positional={m.positional}' is not offered for it"
        )
    if m.user_fusion != "none":
        bad(f"bsarec has no user embedding; 'model.user_fusion={m.user_fusion}' is for the modular backbone")
    if m.bsa_cutoff < 0:
        bad(
            f"'model.bsa_cutoff' must be >= 0 (the low-pass keeps the lowest c // 2 + 1 bins); got {m.bsa_cutoff}"
        )
    if not 0.0 <= m.bsa_alpha <= 1.0:
        bad(f"'model.bsa_alpha' must be in [0, 1] (the frequency branch's weight); got {m.bsa_alpha}")


def _check_gru4rec(cfg: Config, bad: Bad) -> None:
    _refuse_unused(
        cfg,
        bad,
        (
            "norm",
            "positional",
            "local_heads",
            "head",
            "embedding_norm",
            "positions_from",
            "init",
            "attn_output_dropout",
            "ffn_inner_dropout",
            "ffn_size",
            "activation",
            "pos_dim",
            "pos_fusion",
            "norm_eps",
        ),
        "a recurrent model: no attention, positions, norms or feed-forward layers",
    )
    if cfg.model.user_fusion != "none":
        bad(
            f"gru4rec has no user embedding; 'model.user_fusion={cfg.model.user_fusion}' is for the modular backbone"
        )


register(BackboneEntry("modular", "modsar.model.modular:ModularSAR", _check_modular))  # SASRec / BERT4Rec
register(BackboneEntry("duorec", "modsar.model.duorec:DuoRec", _check_modular, tasks=("ar",)))
register(BackboneEntry("bsarec", "modsar.model.bsarec:BSARec", _check_bsarec))
register(
    BackboneEntry(
        "gru4rec",
        "modsar.model.gru4rec:GRU4Rec",
        _check_gru4rec,
        tasks=("ar",),
        attention_maps=False,
        residual_sites=False,
        recurrent=True,
    )
)
# albert, llama, transfo_xl and hf:<model type> come from hf_plugins, through the modsar.backbones entry point

BACKBONE_CHECKS.append(check_config)  # config.validate runs it from now on (modsar/__init__.py imports this)
