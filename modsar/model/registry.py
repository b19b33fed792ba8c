"""Backbones by name: how to build one, how to check a config for it, and what it can do.

As transformers' Auto classes dispatch by `model_type`, ModSAR dispatches by `model.backbone` through this
table. It imports no model code: config checks import neither torch nor a model module (except that an
`hf:<model_type>` check reads transformers' config table), and a backbone's module is imported only when a
model is built. Every fact about a backbone is a field of its entry (the tasks it implements, its
diagnostics, the settings it owns, its names in the papers, what its training batches need), declared by the
package that provides it (`modsar.model.backbones` for the core, `hf_plugins.backbones` for HuggingFace); the
lists, messages and checks elsewhere are derived from the entries. Adding a backbone is one module (a class
with the `Recommender` interface of `modsar.model.interface`) and one `register(BackboneEntry(...))`;
plugins outside this package register from
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

from modsar.config import BACKBONE_CHECKS, Config
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
    # config keys (dotted) only this backbone reads: set under another backbone they are refused, not ignored
    owned_settings: tuple[str, ...] = ()
    paper_names: tuple[PaperName, ...] = ()
    # the ModSAR paper's modular backbone: analyses name it by its design (Vanilla-/Local-AE/AR), by its
    # paper names only beside models that have them
    named_by_design: bool = False
    # whether a training batch under this config carries a same-target partner for every row (DuoRec)
    needs_partners: Callable[[Config], bool] | None = None
    time_bias: bool = False  # implements model.time_bias (attention biased by the inputs' time gaps)
    # its own settings that change what a training step costs: a search's cost estimate probes each value
    cost_settings: tuple[str, ...] = ()

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
    """Dotted config key -> the backbones that alone read it (a plugin may read a core backbone's knob)."""
    owners: dict[str, tuple[str, ...]] = {}
    for entry in entries():
        for key in entry.owned_settings:
            owners[key] = (*owners.get(key, ()), entry.name)
    return owners


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
    default = Config()
    now, before = cfg.flat(), default.flat()  # dotted names, as owned_settings writes them
    for key, owners in owned_settings().items():
        if cfg.model.backbone not in owners and now[key] != before[key]:
            here = cfg.model.backbone
            here += " (the default)" if here == default.model.backbone else ""
            owner = " or ".join(owners)
            bad(
                f"'{key}={now[key]}' is read by model.backbone={owner} only, and the backbone here is "
                f"{here}: leave it at {before[key]!r} (in a space that varies the backbone, set it under "
                f"when: {{model.backbone: {owners[0]}}})"
            )
    if cfg.loss.name != "gbce" and cfg.loss.gbce_t != default.loss.gbce_t:
        bad(
            f"'loss.gbce_t' calibrates loss.name=gbce only, and this run's loss is {cfg.loss.name}: leave it "
            f"at {default.loss.gbce_t}"
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
        except BaseException as exc:  # anything its module code raises: SystemExit, BaseException subclasses
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
    """The plugin modules registered so far, in order: a search hands them to its Ray workers."""
    return list(_LOADED)


BACKBONE_CHECKS.append(check_config)  # config.validate runs it from now on (modsar/__init__.py imports this)
