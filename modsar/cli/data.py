"""`modsar data ACTION`: import, prepare and inspect datasets. Each action lives in its own module
(data_prepare, data_stats, data_profile, data_list); this one only groups them under `data`."""

from __future__ import annotations

from modsar.cli import data_list, data_prepare, data_profile, data_stats
from modsar.cli.common import Subparsers

ACTIONS = (data_prepare, data_stats, data_profile, data_list)  # in the order `modsar data --help` lists them


def add_parser(sub: Subparsers) -> None:
    """The `data` command and its actions."""
    data = sub.add_parser("data", help="import, prepare and inspect datasets")
    actions = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    for action in ACTIONS:
        action.add_parser(actions)
