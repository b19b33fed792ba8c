"""`modsar search`: search a design space with Ray Tune, after printing what it will cost."""

from __future__ import annotations

import argparse
import sys
from dataclasses import MISSING, Field
from typing import TYPE_CHECKING, Any

from modsar.cli.common import Subparsers, add_command, add_data_dir, print_json
from modsar.errors import ModsarError
from modsar.outputs import to_json

if TYPE_CHECKING:
    from modsar.sweep import Plan, SearchRequest

EPILOG = """examples:
  modsar search --space local_attn --dataset beauty              # TPE, successive halving, local Ray
  modsar search --space local_attn --dataset beauty --full-grid  # the paper's full grid
  modsar search --space loss_ce --dataset synthetic --max-epochs 10 --max-t 5 --grace-period 1
  modsar search --space vanilla --dataset video --search optuna --num-samples 40 --cpus-per-trial 2
  modsar search --space my_space.yaml --dataset ml-1m --gpus-per-trial 0.25 --address ray://head:10001
  modsar search --space local_attn --dataset beauty --resume     # after the driver was killed

Rows land in <results>/<experiment>/trials/*.parquet (one per trial); see `modsar results`.
Before Ray starts, the search prints what it will cost (as `modsar spaces SPACE --dataset D`): trials, steps
per epoch, ASHA's first decision, the epochs it will train, and a wall-clock from a few seconds' probe."""


def add_parser(sub: Subparsers) -> None:
    """The `search` command: an option for each SearchRequest field (as its declaration says), in the order
    --help lists them, then the options of this command's output alone."""
    from modsar.sweep.request import OPTION_GROUPS, SEARCH_FIELDS

    search = add_command(
        sub, "search", "search a design space with Ray Tune (ASHA; grid, random, optuna)", run, EPILOG
    )
    for group in OPTION_GROUPS:
        for name, declared in SEARCH_FIELDS.items():
            if declared.metadata.get("group") == group:
                _add_option(search, name, declared)
    search.add_argument(
        "--no-estimate",
        action="store_true",
        help="skip the cost estimate printed before Ray starts (trials, steps per epoch, ASHA's first "
        "decision, the epochs it will train and a wall-clock from a few seconds' timed probe of "
        "each model size: `modsar spaces SPACE --dataset D`); never printed with --resume",
    )
    search.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_data_dir(search)


# a field's annotation -> the option's value type (a bool field is a switch)
OPTION_TYPES: dict[str, type] = {"str": str, "int": int, "float": float}


def _add_option(parser: argparse.ArgumentParser, name: str, declared: Field[Any]) -> None:
    """The option of one SearchRequest field: --<name> (or its declared flag), typed by its annotation, with
    the field's default and help."""
    from modsar.sweep.request import option_flag

    help_text = declared.metadata["help"]
    extra = {k: v for k, v in declared.metadata.get("argparse", {}).items() if k != "flag"}
    if name == "overrides":  # the positional KEY=VALUE list
        parser.add_argument(name, nargs="*", metavar="KEY=VALUE", help=help_text)
        return
    kind = str(declared.type).removesuffix(" | None")
    default = None if declared.default is MISSING else declared.default
    if kind == "bool":  # a switch: off unless given
        assert default is False, f"SearchRequest.{name}: a switch's default is False"
        parser.add_argument(option_flag(name), action="store_true", help=help_text, **extra)
    else:
        parser.add_argument(
            option_flag(name), type=OPTION_TYPES[kind], default=default, help=help_text, **extra
        )


def _request(args: argparse.Namespace) -> SearchRequest:
    """The search the options ask for: every SearchRequest field from the option of its name (the one
    declaration of what a search takes; tests/test_cli.py checks that each field has its option)."""
    from dataclasses import fields

    from modsar.sweep import SearchRequest
    from modsar.sweep.request import OPTION_DEST

    given = {f.name: getattr(args, OPTION_DEST.get(f.name, f.name)) for f in fields(SearchRequest)}
    return SearchRequest(**{**given, "overrides": list(args.overrides)})


def _plan_with_estimate(req: SearchRequest) -> tuple[Plan, dict[str, Any] | None]:
    """The search's plan and its cost estimate, after printing it (under --json on stderr, see main). A
    refused request is refused here, as run_search would."""
    from modsar.sweep import make_plan
    from modsar.sweep.cost import estimate

    plan = make_plan(req)
    try:
        cost = estimate(plan)
        print("\n".join(cost.lines()), flush=True)
        return plan, cost.to_dict()
    except ModsarError:
        raise
    except Exception as exc:  # a probe that breaks on a bug of ours must not cost the user the search
        print(f"modsar: warning: no cost estimate ({type(exc).__name__}: {exc})", file=sys.stderr)
    return plan, None


def run(args: argparse.Namespace) -> int:
    """Run the search; print its summary (the selected trial of each task or model), or the summary as JSON.
    A search that failed exits non-zero after its summary is printed."""
    from modsar.sweep import run_search

    req = _request(args)
    plan, predicted = (None, None) if args.no_estimate or args.resume else _plan_with_estimate(req)
    # under --json, the live table (and what Tune prints) goes to stderr: see main
    summary = run_search(req, plan, predicted)
    if args.json:
        print_json(args, to_json(summary, default=str))
    else:
        _print_summary(summary)
    if summary["problem"]:  # the summary is printed, but the search failed: a non-zero exit says so
        raise ModsarError(summary["problem"])
    return 0


def _print_summary(summary: dict[str, Any]) -> None:
    """The trials, errors and wall time, then the selected trial of each task (or backbone/task)."""
    print(
        f"search {summary['experiment']}: {summary['trials']} trials ({summary['errors']} errors, "
        f"{summary['diverged']} diverged) in "
        f"{summary['wall_time_s']:.0f} s; rows in {summary['results']}/trials"
    )
    if summary.get("against_estimate"):
        print(f"  {summary['against_estimate']}")
    for model, info in sorted(summary["selected"].items()):  # "ae", "ar", or "<backbone>/<task>"
        metrics = "  ".join(f"{k}={v:.4f}" for k, v in info.items() if k != "trial_id")
        print(f"  best {model if '/' in model else model.upper()}: {info['trial_id']}  {metrics}")
