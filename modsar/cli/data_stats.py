"""`modsar data stats`: users, items, interactions, average length, density of a prepared dataset."""

from __future__ import annotations

import argparse
import json
from typing import Any

from modsar.cli.common import Subparsers, add_command, add_data_dir, print_json
from modsar.outputs import to_json


def add_parser(actions: Subparsers) -> None:
    """The `data stats` action and its options."""
    stats = add_command(actions, "stats", "users, items, interactions, average length, density", run)
    stats.add_argument("name")
    stats.add_argument("--json", action="store_true")
    add_data_dir(stats)


def run(args: argparse.Namespace) -> int:
    """Print the dataset's statistics (from its manifest) as a table, or as JSON."""
    from modsar.data.prepare import statistics
    from modsar.data.registry import is_generated
    from modsar.data.store import data_root, load_dataset, read_manifest

    manifest = read_manifest(args.name, data_root(args.data_dir))
    if manifest is None or is_generated(args.name):  # generates (or refreshes) built-in data, or explains
        manifest = load_dataset(args.name, args.data_dir).manifest
    s = manifest["statistics"]
    if "evaluable_users" not in s:  # prepared by an older version: count from the stored log
        data = load_dataset(args.name, args.data_dir)
        s = statistics(data.user, data.num_users, data.num_items)
    optimum = manifest.get("optimum")
    if args.json:
        extra = {"optimum": optimum} if optimum else {}
        print_json(
            args,
            to_json(
                {
                    "name": args.name,
                    **s,
                    "max_len": manifest["max_len"],
                    "options": manifest["options"],
                    **extra,
                }
            ),
        )
        return 0
    print(f"dataset {args.name}")
    for key, value in _table(s, manifest, optimum):
        print(f"  {key:<14} {value}")
    return 0


def _table(
    s: dict[str, Any], manifest: dict[str, Any], optimum: dict[str, Any] | None
) -> list[tuple[str, str]]:
    """The (measure, value) lines of the text output."""
    from modsar.data.prepare import density_text

    rows = [
        ("users", f"{s['users']:,}"),
        ("items", f"{s['items']:,}"),
        ("interactions", f"{s['interactions']:,}"),
        ("avg. length", f"{s['avg_length']:.2f}"),
        ("length range", f"{s['min_length']}-{s['max_length']}"),
        (
            "evaluable",
            f"{s['evaluable_users']:,} of {s['users']:,} users "
            f"({s['evaluable_users'] / max(s['users'], 1):.1%}) have 3+ interactions",
        ),
        ("density", density_text(s)),
        ("max_len", str(manifest["max_len"])),
        ("preprocessing", json.dumps(manifest["options"])),
    ]
    if optimum:  # built-in generators: the best any model can expect, to read results against
        v, t = optimum["valid"], optimum["test"]
        rows.append(
            (
                "Bayes-optimal",
                f"test NDCG@10 {t['ndcg@10']:.4f}, Recall@10 {t['recall@10']:.4f}; "
                f"valid NDCG@10 {v['ndcg@10']:.4f}, Recall@10 {v['recall@10']:.4f} "
                f"(expected, filter_seen={optimum['filter_seen']})",
            )
        )
    return rows
