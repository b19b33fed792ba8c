"""Backbones by name: how to build one, how to check a config for it, and what it can do. As transformers'
Auto classes dispatch by `model_type`, ModSAR dispatches by `model.backbone` through this table. It imports no
model code: config checks import neither torch nor a model module (except that an `hf:<model_type>` check
reads transformers' config table), and a backbone's module is imported only when a model is built. Every fact
about a backbone is a field of its entry (the tasks it implements, its diagnostics, the settings it reads and
owns, its names in the papers, what its training batches need), declared by the package that provides it
(`modsar.model.backbones` for the core, `hf_plugins.backbones` for HuggingFace); the lists, messages and
checks elsewhere are derived from the entries. Adding a backbone is one module (a class with the `Recommender`
interface of `modsar.model.interface`) and one `register(BackboneEntry(...))`; plugins outside this package
register from their own module, named in the `MODSAR_PLUGINS` environment variable (module names or .py paths,
comma-separated) or in a `modsar.backbones` entry point. Search trials load the same plugins in their workers
(a .py path must exist on every node of a cluster; a remote cluster needs an importable module)."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from keyword import iskeyword
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypedDict

from modsar.config import (
    BACKBONE_CHECKS,
    FIELD_TYPES,
    SECTION_LOADERS,
    SECTIONS,
    Config,
    ModelConfig,
    annotation_name,
    field_problem,
    flatten,
)
from modsar.errors import ModsarError
from modsar.task import Task

if TYPE_CHECKING:
    from modsar.model.interface import Recommender

Bad = Callable[[str], NoReturn]
PLUGINS_ENV = "MODSAR_PLUGINS"


@dataclass(frozen=True)
class PaperName:
    """A backbone's name in the residual-dominance paper for one task, and its column in that paper's tables
    (reports and analyses order models by it; a plugin's names follow the paper's)."""

    task: Task
    name: str
    column: int = 100


@dataclass(frozen=True)
class BackboneEntry:
    """One backbone. `name` is exact ("modular") or a prefix ending in ":" ("hf:" covers "hf:bert", ...)."""

    name: str
    # "package.module:attr", called (cfg.model, num_items, num_users, max_len, task) -> Recommender
    build: str
    check: Callable[[Config, Bad], None] | None = None  # refuses what it cannot honour; must not import torch
    tasks: tuple[Task, ...] = (Task.AE, Task.AR)  # attention directions it implements
    attention_maps: bool = True  # forward(..., need_weights=True) gives per-layer maps (sparsity, rank)
    residual_sites: bool = True  # model.skip_sites() can list its attention skips (mixing, residual scaling)
    recurrent: bool = False  # no attention at all (GRU4Rec): attention diagnostics are not defined for it
    # for a prefix entry: the model types under it whose attention skips are known (others have none)
    skip_site_types: tuple[str, ...] = ()
    # What it reads, declared once: the refusals and the configuration reference follow from it.
    # settings: the shared config's keys (dotted) that only this backbone reads (DuoRec's loss.cl_*);
    # under another backbone a changed one is refused, not ignored
    settings: tuple[str, ...] = ()
    # its own settings section: a dataclass whose fields (declared with config.bounded / config.choice, as
    # the core's) are the keys model.<name>.<field>; an exact name only
    section: type | None = None
    # the shared model.* keys its code reads (`reads_all_but` declares them by what it leaves out); None: all
    reads: frozenset[str] | None = None
    # shared keys it accepts although its code does not read them (no effect; refusing them would refuse
    # spaces and records written before they were declared)
    inert: frozenset[str] = frozenset()
    unread_why: str = ""  # why a changed key outside reads and inert means nothing here, for its refusal
    paper_names: tuple[PaperName, ...] = ()
    # the ModSAR paper's modular backbone: analyses name it by its design (Vanilla-/Local-AE/AR), by its
    # paper names only beside models that have them
    named_by_design: bool = False
    # whether a training batch under this config carries a same-target partner for every row (DuoRec)
    needs_partners: Callable[[Config], bool] | None = None
    time_bias: bool = False  # implements model.time_bias (attention biased by the inputs' time gaps)
    # its own settings that change what a training step costs: a search's cost estimate probes each value
    cost_settings: tuple[str, ...] = ()
    owned_settings: tuple[str, ...] = ()  # before 0.4: `settings`' name, still read as it

    def __post_init__(self) -> None:
        if self.owned_settings:  # a plugin written for the earlier name
            merged = tuple(dict.fromkeys((*self.settings, *self.owned_settings)))
            object.__setattr__(self, "settings", merged)
            object.__setattr__(self, "owned_settings", ())

    def matches(self, name: str) -> bool:
        """Whether `name` is this backbone: its exact name, or for a prefix entry ("hf:") any name it
        starts."""
        if self.name.endswith(":"):
            return name.startswith(self.name) and len(name) > len(self.name)
        return name == self.name

    def has_skip_sites(self, name: str) -> bool:
        """Whether backbone `name` (this entry's, or a type under its prefix) has attention skips ModSAR
        knows."""
        if self.recurrent or not self.residual_sites:
            return False
        return not self.name.endswith(":") or name[len(self.name) :] in self.skip_site_types


_ENTRIES: dict[str, BackboneEntry] = {}
_LOADED: dict[str, set[str]] = {}  # plugin spec -> names it registered, in load order (search forwards them)
_CONFIGURED: str | None = None  # the $MODSAR_PLUGINS value whose plugins (and entry points) are loaded


MODEL_KEYS = tuple(key for key in Config().flat() if key.startswith("model.") and key != "model.backbone")
_DEFAULT_TREE = flatten(Config().to_dict())  # the defaults as set (an auto norm as auto)
_DEFAULT_FLAT = Config().flat()  # the defaults as rows record them


class Reads(TypedDict):
    """`BackboneEntry.reads` and `.inert`, as `reads_all_but` declares them."""

    reads: frozenset[str]
    inert: frozenset[str]


def reads_all_but(not_read: str, no_effect: str = "") -> Reads:
    """An entry's `reads` and `inert` declared by what its code leaves out, as short names split by spaces
    ("pos_dim pos_fusion"): `not_read` is refused when changed, `no_effect` accepted."""
    left_out = {f"model.{name}" for name in (*not_read.split(), *no_effect.split())}
    unknown = sorted(left_out - set(MODEL_KEYS))
    if unknown:
        raise ValueError(f"not model keys: {', '.join(unknown)}")
    return {
        "reads": frozenset(key for key in MODEL_KEYS if key not in left_out),
        "inert": frozenset(f"model.{name}" for name in no_effect.split()),
    }


def reads_only(names: str) -> Reads:
    """An entry's `reads` declared by what its code reads, as short names split by spaces ("hidden_size"):
    every other shared model key is refused when changed. (Left undeclared, `reads` accepts every one.)"""
    keys = {f"model.{name}" for name in names.split()}
    if unknown := sorted(keys - set(MODEL_KEYS)):
        raise ValueError(f"not model keys: {', '.join(unknown)}")
    return {"reads": frozenset(keys), "inert": frozenset()}


def register(entry: BackboneEntry) -> BackboneEntry:
    """Add (or replace) a backbone; returns it so a module can keep a handle. Its settings section, where it
    declares one, becomes the config keys model.<name>.*."""
    _check_declared(entry)
    if entry.section is not None:
        _check_section(entry)
        SECTIONS[entry.name] = entry.section
    else:  # a backbone registered again without its section: its keys go with it
        SECTIONS.pop(entry.name, None)
    _ENTRIES[entry.name] = entry
    return entry


def _check_declared(entry: BackboneEntry) -> None:
    """What an entry says it reads names config keys: own settings of the shared config, reads and inert keys
    of its model section (a misspelt one would be refused or let through without a word)."""
    for declared in ("settings", "reads", "inert", "cost_settings"):
        value = getattr(entry, declared)
        if isinstance(value, str) or not (value is None or isinstance(value, (tuple, list, set, frozenset))):
            raise ModsarError(f"backbone {entry.name!r}: `{declared}` must be a collection of dotted keys")
    keys = set(Config().flat())
    stray = [k for k in entry.settings if k not in keys]
    claimed = [
        k
        for k in entry.settings
        if not k.startswith(("model.", "loss.")) or k in ("model.backbone", "loss.name")
    ]
    if claimed:
        raise ModsarError(
            f"backbone {entry.name!r} claims {', '.join(claimed)} as its own, which every run reads; a "
            "setting only it reads is a model.* or loss.* key, or goes in its `section`"
        )
    stray += [k for k in (*(entry.reads or ()), *entry.inert) if k not in MODEL_KEYS]
    stray += [k for k in entry.cost_settings if k not in keys and k not in section_keys(entry)]
    if stray:
        raise ModsarError(
            f"backbone {entry.name!r} declares {', '.join(sorted(stray))}, which is no shared config key "
            "(see `modsar train --list-keys`); a setting of its own goes in its `section`"
        )


def _check_section(entry: BackboneEntry) -> None:
    """A section is a dataclass of defaulted fields of the config's types, under an exact backbone name that
    no shared model key has."""
    section = entry.section
    if not dataclasses.is_dataclass(section) or not isinstance(section, type):
        raise ModsarError(f"backbone {entry.name!r}: its section must be a dataclass class; got {section!r}")
    if section.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise ModsarError(
            f"backbone {entry.name!r}: its section {section.__name__} is frozen; keys are set on it"
        )
    name = entry.name
    if (
        not (name.isidentifier() and name.isascii())
        or iskeyword(name)
        or name[0] == "_"
        or hasattr(ModelConfig, name)
    ):
        raise ModsarError(
            f"backbone {entry.name!r} cannot have a settings section: model.{entry.name} must be a name "
            "(letters, digits, _, not first) that no model key or ModelConfig attribute has"
        )
    for f in dataclasses.fields(section):
        kind = annotation_name(f.type)
        defaulted = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if kind not in FIELD_TYPES or not defaulted:
            raise ModsarError(
                f"backbone {entry.name!r}: setting '{f.name}' must have a default and one of the types "
                f"{', '.join(FIELD_TYPES)}; got {kind}"
            )
    try:
        defaults = section()
    except Exception as exc:  # its __post_init__ (or a default factory) raised
        raise ModsarError(
            f"backbone {entry.name!r}: its section {section.__name__}() raised {exc!r}"
        ) from None
    for f in dataclasses.fields(section):
        problem = field_problem(f, getattr(defaults, f.name), f"model.{entry.name}.{f.name}")
        if problem:
            raise ModsarError(f"backbone {entry.name!r}: the default of its setting is wrong: {problem}")


def unregister(name: str) -> None:
    """Remove a backbone; a plugin left with none is forgotten, so loading it again from a .py path
    re-registers (a module name would come back from Python's module cache without registering)."""
    _ENTRIES.pop(name, None)
    SECTIONS.pop(name, None)
    for spec, registered in list(_LOADED.items()):
        registered.discard(name)
        if not registered:
            del _LOADED[spec]


def names() -> list[str]:
    """Every registered backbone name as a user types it ("hf:<model_type>" for a prefix entry), for
    messages."""
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
    """The entry of a backbone name, or one line naming the known ones (plugins loaded first)."""
    entry = find(name)
    if entry is None:
        raise ModsarError(_unknown(name))
    return entry


def entries() -> list[BackboneEntry]:
    """Every registered backbone, in registration order (plugins loaded)."""
    _load_configured()
    return list(_ENTRIES.values())


def owned_settings() -> dict[str, tuple[str, ...]]:
    """Dotted shared config key -> the backbones that alone read it (a plugin may read a core backbone's
    knob); a backbone's section keys are its own by their name."""
    owners: dict[str, tuple[str, ...]] = {}
    for entry in entries():
        for key in entry.settings:
            owners[key] = (*owners.get(key, ()), entry.name)
    return owners


def section_keys(entry: BackboneEntry) -> list[str]:
    """The dotted keys of a backbone's own settings section (none without one)."""
    if entry.section is None:
        return []
    return [f"model.{entry.name}.{f.name}" for f in dataclasses.fields(entry.section)]


def paper_names() -> list[PaperName]:
    """Every declared paper name, in the paper's column order."""
    named = [(n.column, i, n) for i, e in enumerate(entries()) for n in e.paper_names]
    return [n for _, _, n in sorted(named, key=lambda x: x[:2])]


def paper_name(backbone: str, task: str) -> str:
    """ "SASRec", "GRU4Rec", ...; any other pair as "<backbone> <TASK>"."""
    entry = find(backbone)
    named = {n.task: n.name for n in entry.paper_names} if entry is not None else {}
    return named.get(Task(task), f"{backbone} {Task(task).label}")


def named_by_paper(backbone: str) -> bool:
    """Whether analyses name this backbone by its paper names (GRU4Rec, DuoRec, BSARec), not by its design."""
    entry = find(backbone)
    return bool(entry is not None and entry.paper_names and not entry.named_by_design)


def needs_partners(cfg: Config) -> bool:
    """Whether this config's training batches carry a same-target partner for every row."""
    entry = lookup(cfg.model.backbone)
    return bool(entry.needs_partners is not None and entry.needs_partners(cfg))


def skip_site_backbones() -> list[str]:
    """The backbones (and HF model types) whose attention skips the residual diagnostics know."""
    found = []
    for entry in entries():
        if entry.name.endswith(":"):
            found += [
                entry.name + kind for kind in entry.skip_site_types if entry.has_skip_sites(entry.name + kind)
            ]
        elif entry.has_skip_sites(entry.name):
            found.append(entry.name)
    return found


def _refuse_foreign(cfg: Config, bad: Bad) -> None:
    """Another backbone's own settings, changed: refused (the backbone here would ignore them)."""
    now, before = cfg.flat(), _DEFAULT_FLAT  # dotted names, as `settings` writes them
    default = before["model.backbone"]
    here = cfg.model.backbone + (" (the default)" if cfg.model.backbone == default else "")
    foreign = [(key, owners, now[key], before[key]) for key, owners in owned_settings().items()]
    for name, values in cfg.model.changed_sections().items():
        if name != cfg.model.backbone:
            defaults = dataclasses.asdict(
                type(cfg.model.__dict__["_sections"][name])()
            )  # (its plugin may be gone)
            foreign += [(f"model.{name}.{k}", (name,), v, defaults[k]) for k, v in values.items()]
    for key, owners, value, was in foreign:
        if cfg.model.backbone not in owners and value != was:
            bad(
                f"'{key}={value}' is read by model.backbone={' or '.join(owners)} only, and the backbone "
                f"here is {here}: leave it at {was!r} (in a space that varies the backbone, set it under "
                f"when: {{model.backbone: {owners[0]}}})"
            )


def refused_keys(entry: BackboneEntry) -> list[str]:
    """The shared model keys a backbone refuses when changed: those it neither reads nor accepts with no
    effect (`reads`, `inert`), and model.time_bias where it has no time bias; other backbones' own settings
    aside (refused as theirs). What the refusals and the configuration reference both read."""
    owned = owned_settings()
    reads = set(MODEL_KEYS) if entry.reads is None else set(entry.reads)
    if not entry.time_bias:
        reads.discard("model.time_bias")
    return [k for k in MODEL_KEYS if k not in reads and k not in entry.inert and k not in owned]


def _refuse_unread(cfg: Config, entry: BackboneEntry, bad: Bad) -> None:
    """A shared model key the backbone refuses (`refused_keys`), changed: refused, since a silent no-op
    would mislead a search."""
    now, before = flatten(cfg.to_dict()), _DEFAULT_TREE  # as set: a modular auto norm is auto
    for key in refused_keys(entry):
        if now[key] != before[key]:
            why = f" ({entry.unread_why})" if entry.unread_why else ""
            bad(f"{cfg.model.backbone} has no '{key}'{why}; leave it at {before[key]!r}")


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
            f"backbone {cfg.model.backbone} implements task {' and '.join(entry.tasks)} only; got "
            f"task={cfg.task}"
        )
    if cfg.model.timed and not entry.time_bias:
        timed = " and ".join(e.name for e in entries() if e.time_bias) or "no backbone"
        bad(
            f"'model.time_bias={cfg.model.time_bias}' is an attention bias of the {timed} backbone; "
            f"backbone {cfg.model.backbone} has none: leave it at none"
        )
    if entry.check is not None:
        entry.check(cfg, bad)
    _refuse_unread(cfg, entry, bad)


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
        before, sections = dict(_ENTRIES), dict(SECTIONS)
        try:
            _import_plugin(spec)
            _refuse_replacing(spec, before)
        except KeyboardInterrupt:  # Ctrl-C stays an interrupt (exit 130); the line says what it stopped
            _restore(before, sections)
            raise KeyboardInterrupt(f"while importing backbone plugin {spec!r}") from None
        except BaseException as exc:  # anything its module code raises: SystemExit, BaseException subclasses
            _restore(before, sections)
            why = _why(spec, exc)
            raise ModsarError(f"backbone plugin {spec!r} cannot be loaded: {why}, or {drop}") from None
        _LOADED[spec] = set(_ENTRIES) - set(before)
    return list(_LOADED)


class _Replaces(Exception):
    """A plugin registered a backbone name that the core or another plugin has."""


def _refuse_replacing(spec: str, before: dict[str, BackboneEntry]) -> None:
    """Two modules registering one backbone name: the later one would silently win (a user's `llama` lost to
    hf_plugins' entry point, loaded after $MODSAR_PLUGINS)."""
    for name, entry in _ENTRIES.items():
        if name in before and entry is not before[name]:
            owner = next((s for s, names in _LOADED.items() if name in names), "ModSAR's own backbones")
            raise _Replaces(f"it registers backbone {name!r}, which {owner} registered already: rename one")


def _restore(entries: dict[str, BackboneEntry], sections: dict[str, type]) -> None:
    """The registry as it was before a plugin failed to load: its backbones and their sections."""
    _ENTRIES.clear()
    _ENTRIES.update(entries)
    SECTIONS.clear()
    SECTIONS.update(sections)


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
    if isinstance(exc, _Replaces):
        return str(exc)
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
    """The plugin modules registered so far, in order: a search hands them to its Ray workers."""
    return list(_LOADED)


BACKBONE_CHECKS.append(check_config)  # config.validate runs it from now on (modsar/__init__.py imports this)
SECTION_LOADERS.append(_load_configured)  # a plugin's section keys are known once its module has run
