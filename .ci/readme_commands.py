#!/usr/bin/env python3
"""The README's two set-up commands, as written: the main job (under "## Quick start") and the tests (under
"### Tests"). CI runs the tests command from here rather than a copy of it, and tests/test_readme.py runs the
main job, so the README cannot drift from what is run. Standard library only: CI calls it before any venv.

    python3 .ci/readme_commands.py main|tests
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SECTIONS = {"main": "## Quick start", "tests": "### Tests"}


def commands(readme: str) -> dict[str, str]:
    """{"main": ..., "tests": ...}: the first ```bash block of each section (between its heading and the next
    heading, so a block of a later section is never taken for it), which must hold exactly one command line
    (a README that says otherwise is refused: the test cannot guess)."""
    found = {}
    for name, heading in SECTIONS.items():
        block = re.search(r"```bash\n(.*?)```", section(readme, heading), re.S)
        if block is None:
            raise SystemExit(f"README.md's {heading!r} section has no ```bash block")
        lines = [line for line in block.group(1).splitlines() if line.strip()]
        if len(lines) != 1:
            raise SystemExit(f"README.md's {heading!r} block must be one command line; it has {len(lines)}")
        found[name] = lines[0]
    return found


def section(readme: str, heading: str) -> str:
    """The text of the section under `heading` (a line of its own), up to the next heading of any level: a
    line starting with '#' outside a ``` fence (a comment inside a bash block is no heading)."""
    lines = ("\n" + readme).splitlines(keepends=True)
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip("\r\n") == heading)
    except StopIteration:
        raise SystemExit(f"README.md has no {heading!r} section") from None
    body: list[str] = []
    fenced = False
    for line in lines[start + 1 :]:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6}(\s|$)", line):
            break
        body.append(line)
    return "".join(body)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in SECTIONS:
        raise SystemExit(f"usage: {sys.argv[0]} {'|'.join(SECTIONS)}")
    print(commands((Path(__file__).resolve().parent.parent / "README.md").read_text())[sys.argv[1]])
