"""The shape the codebase keeps (README "Where the code lives"): no function longer than a screen, no import
circle between the folders and ground-floor modules of modsar/, and a core that never imports hf_plugins."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 60  # complexity is ruff's C901 (pyproject.toml)
# the rooms of modsar/ from the ground up, as README "Where the code lives" lists them: a room imports only
# rooms on lower floors (ground-floor modules may import each other, without a circle)
FLOORS = (
    {"errors", "limits", "version", "task", "randomness", "devices", "outputs", "config"},
    {"data"},
    {"model"},
    {"memory"},
    {"evaluation"},
    {"training"},
    {"records"},
    {"sweep"},
    {"report", "analysis"},
    {"api", "cli"},
)


def _sources(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


def _imported(tree: ast.AST) -> list[str]:
    """Every module name a file imports, at its top or inside a function."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return found


def _unit(module: str) -> str | None:
    """The room of a modsar module: its folder (training, sweep, ...) or its ground-floor file (config)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "modsar" and len(parts) > 1 else None


def test_no_function_is_longer_than_a_screen():
    long = []
    for path in _sources("modsar", "hf_plugins"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "split these into named steps: " + "; ".join(long)


def _room_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in _sources("modsar"):
        if path.relative_to(ROOT).as_posix() == "modsar/__init__.py":  # the package's face: the API on top
            continue
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        room = _unit(module)
        assert room is not None
        rooms = {_unit(name) for name in _imported(ast.parse(path.read_text()))}
        graph.setdefault(room, set()).update(r for r in rooms if r and r != room)
    return graph


def _undocumented(tree: ast.AST, prefix: str = "") -> list[str]:
    """Public functions, classes and methods (of public classes) without a docstring, by qualified name."""
    missing = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ) and not node.name.startswith("_"):
            if ast.get_docstring(node) is None:
                missing.append(f"{prefix}{node.name}")
            if isinstance(node, ast.ClassDef):
                missing += _undocumented(node, f"{prefix}{node.name}.")
    return missing


def test_every_public_function_of_model_sweep_and_hf_plugins_says_why():
    """A reader of the models, the search and the HuggingFace adapters finds a docstring on every public
    function, class and method."""
    missing = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _sources("modsar/model", "modsar/sweep", "hf_plugins")
        for name in _undocumented(ast.parse(path.read_text()))
    ]
    assert missing == []


def test_an_undocumented_function_is_found():
    tree = ast.parse('class A:\n    """a"""\n    def b(self): pass\n    def _c(self): pass\ndef d(): pass\n')
    assert _undocumented(tree) == ["A.b", "d"]


BACKBONES = ("modsar.model.modular", "modsar.model.bsarec", "modsar.model.gru4rec", "modsar.model.duorec")
EXTENDS = {"modsar/model/duorec.py": "modsar.model.modular"}  # DuoRec is the modular encoder plus its views


def test_no_backbone_imports_another_backbone():
    """Masks, attention, positions and the tied output live in model/toolkit.py, which every backbone (the zoo
    and hf_plugins too) imports; a backbone imports no other, except the one it extends by definition."""
    files = [*_sources("modsar/model"), *_sources("hf_plugins")]
    crossing = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in files
        for module in _imported(ast.parse(path.read_text()))
        if module in BACKBONES
        and module != ".".join(path.relative_to(ROOT).with_suffix("").parts)
        and EXTENDS.get(str(path.relative_to(ROOT))) != module
        and path.name not in ("backbones.py", "registry.py")  # the registry names them by string only
    ]
    assert crossing == []


def test_no_import_circle_between_the_rooms_of_modsar():
    graph = _room_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(room: str, path: list[str]) -> list[str] | None:
        state[room] = 1
        for nxt in sorted(graph.get(room, ())):
            if state.get(nxt) == 1:
                return [*path, room, nxt]
            if nxt not in state and (circle := visit(nxt, [*path, room])):
                return circle
        state[room] = 2
        return None

    for room in sorted(graph):
        circle = visit(room, []) if room not in state else None
        assert circle is None, "import circle: " + " -> ".join(circle)
    assert "cli" not in set().union(*graph.values()), "nothing imports the command line"
    assert "training" in graph["sweep"]  # the graph is read: a search trains


def test_every_import_runs_down_the_floors():
    floor = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}
    graph = _room_graph()
    unplaced = sorted(set(graph) - set(floor))
    assert not unplaced, f"rooms on no floor: {unplaced}; add them to FLOORS and to the README's map"
    upward = [
        f"{room} -> {other}"
        for room, others in sorted(graph.items())
        for other in sorted(others)
        if floor[other] > floor[room] or (floor[other] == floor[room] and floor[room] > 0)
    ]
    assert not upward, f"imports that do not run down the floors: {upward}"


def test_the_core_never_imports_hf_plugins():
    importers = [
        str(path.relative_to(ROOT))
        for path in _sources("modsar")
        if any(name.split(".")[0] == "hf_plugins" for name in _imported(ast.parse(path.read_text())))
    ]
    assert not importers, f"hf_plugins registers through its entry point; these import it: {importers}"


def test_a_circle_is_found_where_there_is_one(monkeypatch):
    """The circle check itself can fail: a graph with a circle is reported."""
    import test_code_shape as shape

    monkeypatch.setattr(
        shape, "_room_graph", lambda: {"a": {"b"}, "b": {"a"}, "sweep": {"training", "evaluation"}}
    )
    try:
        shape.test_no_import_circle_between_the_rooms_of_modsar()
    except AssertionError as error:
        assert "a -> b -> a" in str(error)
    else:
        raise AssertionError("a circle went unreported")


def test_an_upward_import_is_found(monkeypatch):
    import test_code_shape as shape

    monkeypatch.setattr(shape, "_room_graph", lambda: {"data": {"model"}, "model": {"data"}})
    try:
        shape.test_every_import_runs_down_the_floors()
    except AssertionError as error:
        assert "data -> model" in str(error) and "model -> data" not in str(error)
    else:
        raise AssertionError("an upward import went unreported")
