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
    """{"main": ..., "tests": ...}: the first ```bash block after each section's heading, which must hold
    exactly one command line (a README that says otherwise is refused: the test cannot guess)."""
    found = {}
    for name, heading in SECTIONS.items():
        start = readme.find(f"\n{heading}\n")
        if start < 0:
            raise SystemExit(f"README.md has no {heading!r} section")
        block = re.search(r"```bash\n(.*?)```", readme[start:], re.S)
        if block is None:
            raise SystemExit(f"README.md's {heading!r} section has no ```bash block")
        lines = [line for line in block.group(1).splitlines() if line.strip()]
        if len(lines) != 1:
            raise SystemExit(f"README.md's {heading!r} block must be one command line; it has {len(lines)}")
        found[name] = lines[0]
    return found


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in SECTIONS:
        raise SystemExit(f"usage: {sys.argv[0]} {'|'.join(SECTIONS)}")
    print(commands((Path(__file__).resolve().parent.parent / "README.md").read_text())[sys.argv[1]])
