"""`modsar data list`: the registry benchmarks and the prepared datasets."""

from __future__ import annotations

import argparse
from typing import Any

from modsar.cli.common import Subparsers, add_command, add_data_dir, print_json
from modsar.outputs import to_json


def add_parser(actions: Subparsers) -> None:
    """The `data list` action and its options."""
    listing = add_command(actions, "list", "registry benchmarks and prepared datasets", run)
    listing.add_argument("--json", action="store_true")
    add_data_dir(listing)


def run(args: argparse.Namespace) -> int:
    """One line (or JSON entry) per dataset: the registry's, the built-in generator and the prepared ones."""
    from modsar.data.registry import REGISTRY, SYNTHETIC
    from modsar.data.store import data_root, list_prepared

    prepared = {m["name"]: m for m in list_prepared(args.data_dir)}
    names = sorted(set(REGISTRY) | set(prepared) | {SYNTHETIC})
    entries: list[dict[str, Any]] = []
    for name in names:
        spec = REGISTRY.get(name)
        m = prepared.get(name)
        entries.append(
            {
                "name": name,
                "prepared": m is not None,
                "description": spec.description
                if spec
                else ("built-in generator" if name == SYNTHETIC else "user dataset"),
                "max_len": m["max_len"] if m else (spec.max_len if spec else None),
                "statistics": m["statistics"] if m else None,
            }
        )
    if args.json:
        print_json(args, to_json(entries))
        return 0
    print(f"datasets in {data_root(args.data_dir)}")
    width = max(len(e["name"]) for e in entries)
    for e in entries:
        status = (
            f"{e['statistics']['users']:,} users / {e['statistics']['items']:,} items"
            if e["prepared"]
            else "not prepared"
        )
        print(f"  {e['name']:<{width}} {status:<32} {e['description']}")
    return 0
