"""Generate the reference pages of the documentation from the code: every configuration key (type, default,
allowed values, meaning) from the config tree, and every bundled space from its YAML.

    python docs/gen_reference.py          # write docs/reference/config.md and docs/reference/spaces.md
    python docs/gen_reference.py --check  # exit 1 if a page is out of date (tests/test_docs.py runs this)

A key's meaning is the comment the field carries in modsar/config.py (the lines above it, or beside it), so
the reference and the code cannot say two things; a key without one is an error here.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import sys
import tokenize
import typing
from pathlib import Path
from typing import Any

import modsar
from modsar import config
from modsar.model import registry
from modsar.sweep.spaces import bundled_spaces, describe

PAGES = Path(__file__).resolve().parent / "reference"
SECTIONS = {
    "": "Run",
    "data": "Data: windows, batches, views and splits",
    "model": "Model: the backbone and its design choices",
    "loss": "Loss",
    "train": "Training: optimizer, budget, early stopping",
    "eval": "Evaluation: metrics and protocol",
}


def field_comments(path: str | None = None) -> dict[tuple[str, str], str]:
    """(dataclass name, field name) -> the comment the field carries in config.py (or in the module at
    `path`: a backbone's settings section is documented as the core's keys are)."""
    source = Path(path or config.__file__).read_text()
    lines = source.split("\n")
    raw = {
        tok.start[0]: tok.string
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    comments = {line: text.lstrip("#").strip() for line, text in raw.items()}

    def whole_line(n: int) -> bool:
        return n in raw and lines[n - 1].strip().startswith("#")

    def continued(n: int) -> bool:  # "#   more" under a field: the rest of that field's comment
        return whole_line(n) and raw[n].startswith("#  ")

    found = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                above, line = [], statement.lineno - 1
                while whole_line(line) and not continued(line):
                    above.insert(0, comments[line])
                    line -= 1
                end = statement.end_lineno or statement.lineno
                beside = [
                    comments[n] for n in range(statement.lineno, end + 1) if n in raw and not whole_line(n)
                ]
                after, line = [], end + 1
                while continued(line):
                    after.append(comments[line])
                    line += 1
                text = " ".join(above + beside + after).split("noqa:")[0].strip()
                found[(node.name, statement.target.id)] = text
    return found


def _type_name(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return text.replace("typing.", "")


def _allowed(f: dataclasses.Field) -> str:
    if "choices" in f.metadata:
        return ", ".join(f"`{choice}`" for choice in dict.fromkeys(f.metadata["choices"]))
    if "bounds" in f.metadata:
        bounds = f.metadata["bounds"]
        return bounds.says or bounds._requirement()
    return "any"


def _default(value: Any) -> str:
    value = value.value if hasattr(value, "value") and isinstance(value, str) else value
    return f"`{value!r}`" if value != "" else '`""`'


def config_rows() -> list[tuple[str, str, str, str, str]]:
    """(key, type, default, allowed, meaning) of every configuration key, in the config tree's order."""
    comments, rows = field_comments(), []
    default = config.Config()

    def walk(obj: Any, prefix: str) -> None:
        hints = typing.get_type_hints(type(obj))
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{f.name}.")
                continue
            meaning = comments.get((type(obj).__name__, f.name), "")
            rows.append((prefix + f.name, _type_name(hints[f.name]), _default(value), _allowed(f), meaning))

    walk(default, "")
    return rows


def documented(plugins: bool) -> list[registry.BackboneEntry]:
    """The backbones the page documents: the core's and hf_plugins' (the committed page is the same on every
    machine), and with `plugins`, every one loaded here too."""
    return [e for e in registry.entries() if plugins or e.build.startswith(("modsar.", "hf_plugins."))]


def section_rows(plugins: bool = False) -> list[tuple[str, str, str, str, str]]:
    """(key, type, default, allowed, meaning) of every key of the documented backbones' own sections
    (model.<backbone>.<field>), documented by the comments in the module that declares the section."""
    rows = []
    for entry in documented(plugins):
        if entry.section is None:
            continue
        comments = field_comments(inspect.getsourcefile(entry.section))
        hints = typing.get_type_hints(entry.section)
        for f in dataclasses.fields(entry.section):
            meaning = comments.get((entry.section.__name__, f.name), "")
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            key = f"model.{entry.name}.{f.name}"
            rows.append((key, _type_name(hints[f.name]), _default(default), _allowed(f), meaning))
    return rows


def backbone_rows(plugins: bool = False) -> list[tuple[str, str, str, str]]:
    """(backbone, its own settings, the shared model keys it refuses, those it accepts with no effect)."""
    rows = []
    for entry in documented(plugins):
        own = [*entry.settings, *registry.section_keys(entry)]
        inert = [k for k in registry.MODEL_KEYS if k in entry.inert]
        name = entry.name + ("<model_type>" if entry.name.endswith(":") else "")
        rows.append((name, _keys(own), _keys(registry.refused_keys(entry)), _keys(inert)))
    return rows


def _keys(keys: list[str]) -> str:
    return ", ".join(f"`{key.removeprefix('model.')}`" for key in keys) or "none"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def config_page(plugins: bool = False) -> str:
    rows = config_rows()
    undocumented = [key for key, *_, meaning in rows if not meaning]
    if undocumented:
        raise SystemExit(f"keys without a comment in modsar/config.py: {', '.join(undocumented)}")
    out = [
        "# Configuration reference",
        "",
        "Every key of a ModSAR run, as `modsar train KEY=VALUE`, a design space's `base` and `params`, and",
        "a result row's columns name it. Generated from `modsar/config.py` by `docs/gen_reference.py`: the",
        "type, default and allowed values are the fields' own declarations, the meaning is their comment.",
        "A value is read as YAML 1.2 (its core schema) wherever it is typed or written: `010` is 10, and",
        "`1:30`, `on`, `yes` and `1_000` are text, which a number or boolean key refuses. A key given twice",
        "(in one mapping, or both nested and dotted) is refused; a Config object given to the Python API is",
        "checked as the mapping of its keys is. A number is finite and, unless 0, at least 2**-126 in size",
        "(float32's smallest normal number: the model computes in float32).",
        f"ModSAR {modsar.__version__}, {len(rows)} keys.",
    ]
    for section, title in SECTIONS.items():
        chosen = [r for r in rows if (r[0].split(".")[0] if "." in r[0] else "") == section]
        out += [
            "",
            f"## {title}",
            "",
            "| Key | Type | Default | Allowed | Meaning |",
            "|---|---|---|---|---|",
        ]
        out += [
            f"| `{key}` | {_cell(kind)} | {_cell(d)} | {_cell(a)} | {_cell(m)} |"
            for key, kind, d, a, m in chosen
        ]
    out += _backbones_part(plugins)
    return "\n".join(out) + "\n"


def _backbones_part(plugins: bool) -> list[str]:
    """Which keys each backbone reads, from the declarations on its registry entry, and the keys of their own
    settings sections."""
    out = [
        "",
        "## Backbones: what each reads",
        "",
        "Declared on each backbone's registry entry (`modsar/model/backbones.py`, `hf_plugins/backbones.py`,",
        "or a plugin's own module). A backbone's own settings, set under another backbone, are refused; so",
        "is a changed key the backbone does not read. A key it accepts with no effect changes nothing in it.",
        "A shared `model.*` key listed nowhere in its row, and no other backbone's own setting, is one it",
        "reads (`model.` is left out below); it may still refuse a value it cannot honour (bsarec's layers",
        "are post-LN only; a HuggingFace model without attention dropout refuses a nonzero `attn_dropout`).",
        "",
        "| Backbone | Own settings | Refused: not read | Accepted, no effect |",
        "|---|---|---|---|",
    ]
    out += [f"| `{n}` | {own} | {refused} | {inert} |" for n, own, refused, inert in backbone_rows(plugins)]
    sections = section_rows(plugins)
    if sections:
        out += [
            "",
            "### Backbones' own settings sections",
            "",
            "| Key | Type | Default | Allowed | Meaning |",
            "|---|---|---|---|---|",
        ]
        out += [
            f"| `{k}` | {_cell(t)} | {_cell(d)} | {_cell(a)} | {_cell(m)} |" for k, t, d, a, m in sections
        ]
    return out


def spaces_page() -> str:
    out = [
        "# Bundled design spaces",
        "",
        "The spaces `modsar search --space NAME` runs, as `modsar spaces NAME` describes them. Generated",
        "from `search_spaces/*.yaml` by `docs/gen_reference.py`; each YAML file is the space itself.",
    ]
    for space in bundled_spaces():
        out += ["", f"## {space.name}", "", "```text", describe(space), "```"]
    return "\n".join(out) + "\n"


def pages() -> dict[Path, str]:
    return {PAGES / "config.md": config_page(), PAGES / "spaces.md": spaces_page()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="fail if a committed page differs")
    args = parser.parse_args(argv)
    stale = [path for path, text in pages().items() if not path.is_file() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path} is out of date: run python docs/gen_reference.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in pages().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
