"""`modsar spaces`: list the bundled design spaces, describe one, check one (the validation `modsar search`
runs before Ray starts), or estimate what searching it costs. Listing and describing stay torch-free."""

from __future__ import annotations

import argparse

from modsar.cli.common import Subparsers, add_command, add_data_dir, print_json
from modsar.errors import ModsarError
from modsar.outputs import to_json

EPILOG = """examples:
  modsar spaces                                   # every bundled space with its trials per direction
  modsar spaces local_attn                        # what a space searches
  modsar spaces my_space.yaml --check             # is every configuration valid? (before any compute)
  modsar spaces hf_llama --check --dataset video  # ... with the dataset's sizes, as `modsar search` checks
  modsar spaces vanilla --dataset video           # what searching it costs, before anything runs
  modsar spaces local_attn --dataset beauty --full-grid             # ... the paper's full grid instead
  modsar spaces local_attn --dataset beauty --scheduler asha        # ... under Ray's ASHA instead
  modsar spaces local_attn --dataset beauty --seeds 3               # ... and the picks' seed re-runs
  modsar spaces local_attn --dataset beauty --cpus-per-trial 2 --max-concurrent 8 --json

`modsar search` runs the same check before Ray starts and refuses an invalid space with every problem.
With --dataset (no --check), the estimate counts each direction's trials, steps per epoch and rungs, replays
the search's early stopping (successive halving, or Ray's ASHA scheduler) on the trials that run at once
(patience may stop trials sooner, so the epochs are an estimate), and times a few training steps and a
validation pass per model size on this machine; `modsar search` prints the same lines first."""


def add_parser(sub: Subparsers) -> None:
    """The `spaces` command and its options."""
    spaces = add_command(
        sub, "spaces", "list the bundled design spaces, describe one, or check one", run, EPILOG
    )
    spaces.add_argument("name", nargs="?", help="a space name or YAML path to describe")
    spaces.add_argument(
        "--check",
        action="store_true",
        help="validate every configuration the search would run (exit 2 if any is invalid)",
    )
    spaces.add_argument(
        "--dataset",
        help="with --check: check against this prepared dataset's sizes; without: "
        "estimate what searching it costs before anything runs (trials, steps per epoch, the first "
        "early-stopping decision, epochs, and wall-clock from a few seconds' timed probe of each model "
        "size)",
    )
    spaces.add_argument(
        "--search",
        choices=["grid", "random", "optuna"],
        help="with --check or --dataset: the search algorithm (default: the space's budget.search)",
    )
    spaces.add_argument(
        "--full-grid",
        action="store_true",
        help="with --check or --dataset: the space's full_grid protocol, as `modsar search --full-grid`",
    )
    spaces.add_argument(
        "--num-samples", type=int, help="with --check or --dataset: as `modsar search --num-samples`"
    )
    spaces.add_argument(
        "--max-epochs", type=int, help="with --check or --dataset: as `modsar search --max-epochs`"
    )
    _add_estimate_options(spaces)
    spaces.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="with --check or --dataset: overrides on the base"
    )
    add_data_dir(spaces)


def _add_estimate_options(spaces: argparse.ArgumentParser) -> None:
    """The options only the cost estimate (--dataset without --check) takes."""
    spaces.add_argument(
        "--cpus-per-trial",
        type=float,
        help="with --dataset: CPUs per trial (= the probe's torch threads; default 1)",
    )
    spaces.add_argument(
        "--gpus-per-trial",
        type=float,
        help="with --dataset: GPUs per trial (the probe runs on a GPU when given; default 0)",
    )
    spaces.add_argument(
        "--max-concurrent",
        type=int,
        help="with --dataset: trials at once (default: what this machine's CPUs and GPUs allow)",
    )
    spaces.add_argument(
        "--scheduler",
        choices=["asha", "halving"],
        help="with --dataset: the early stopping, as `modsar search --scheduler` (default: the space's)",
    )
    spaces.add_argument(
        "--seeds",
        type=int,
        metavar="K",
        help="with --dataset: also bound the picks' re-runs on seeds 0..K-1, as `modsar search --seeds K`",
    )
    spaces.add_argument("--json", action="store_true", help="with --dataset: print the estimate as JSON")


def run(args: argparse.Namespace) -> int:
    """Estimate, check, describe or list, as the options say; refuse an option that goes with another mode."""
    from modsar.sweep.spaces import bundled_spaces, describe, grid_size_by_task, load_space

    resources = {
        "--cpus-per-trial": args.cpus_per_trial,
        "--gpus-per-trial": args.gpus_per_trial,
        "--max-concurrent": args.max_concurrent,
        "--scheduler": args.scheduler,
        "--seeds": args.seeds,
        "--json": args.json or None,
    }
    if args.dataset and not args.check:
        return _estimate_space(args)
    if given := [flag for flag, value in resources.items() if value is not None]:
        raise ModsarError(
            f"{', '.join(given)} go{'es' if len(given) == 1 else ''} with --dataset without --check "
            "(the cost estimate)"
        )
    if args.check:
        return _check_space(args)
    numbers = (args.num_samples, args.max_epochs)  # 0 is given too (refused with --check or --dataset)
    if args.overrides or args.search or args.full_grid or any(n is not None for n in numbers):
        raise ModsarError(
            "--search, --full-grid, --num-samples, --max-epochs and KEY=VALUE go with --check or --dataset"
        )
    if args.name:
        print(describe(load_space(args.name)))
        return 0
    for space in bundled_spaces():
        sizes = ", ".join(f"{t.upper()} {n}" for t, n in sorted(grid_size_by_task(space).items()))
        print(f"{space.name:<14} {sizes:<18} {space.description}")
    return 0


def _estimate_space(args: argparse.Namespace) -> int:
    """`modsar spaces NAME --dataset D`: what the search would cost, before anything runs."""
    from modsar.sweep import SearchRequest, make_plan
    from modsar.sweep.cost import estimate

    if not args.name:
        raise ModsarError("--dataset needs a space: modsar spaces NAME --dataset D")
    req = SearchRequest(
        space=args.name,
        dataset=args.dataset,
        search=args.search,
        full_grid=args.full_grid,
        num_samples=args.num_samples,
        max_epochs=args.max_epochs,
        overrides=list(args.overrides),
        data_dir=args.data_dir,
        cpus_per_trial=1.0 if args.cpus_per_trial is None else args.cpus_per_trial,
        gpus_per_trial=args.gpus_per_trial or 0.0,
        max_concurrent=args.max_concurrent,
        scheduler=args.scheduler,
        seeds=args.seeds or 0,
    )
    result = estimate(make_plan(req))
    if args.json:
        print_json(args, to_json(result.to_dict()))
    else:
        print("\n".join(result.lines()))
    return 0


def _check_space(args: argparse.Namespace) -> int:
    """`modsar spaces NAME --check`: the validation `modsar search` runs before Ray starts."""
    from modsar.sweep import SearchRequest, make_plan

    if not args.name:
        raise ModsarError("--check needs a space: modsar spaces NAME --check [--dataset D]")
    result = make_plan(
        SearchRequest(
            space=args.name,
            dataset=args.dataset or "",
            search=args.search,
            full_grid=args.full_grid,
            num_samples=args.num_samples,
            max_epochs=args.max_epochs,
            overrides=list(args.overrides),
            data_dir=args.data_dir,
        ),
        check=False,
    ).check()
    if not result.ok:
        raise ModsarError(result.summary())
    print(result.summary())
    return 0
