"""`modsar search`: search a design space with Ray Tune, after printing what it will cost."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from modsar.cli.common import Subparsers, add_command, add_data_dir, print_json
from modsar.errors import ModsarError
from modsar.outputs import to_json

if TYPE_CHECKING:
    from modsar.sweep import Plan, SearchRequest

EPILOG = """examples:
  modsar search --space local_attn --dataset beauty              # TPE, ASHA in steps, local Ray
  modsar search --space local_attn --dataset beauty --full-grid  # the paper's full grid
  modsar search --space loss_ce --dataset synthetic --max-epochs 10 --max-t 5 --grace-period 1
  modsar search --space vanilla --dataset video --search optuna --num-samples 40 --cpus-per-trial 2
  modsar search --space my_space.yaml --dataset ml-1m --gpus-per-trial 0.25 --address ray://head:10001
  modsar search --space local_attn --dataset beauty --resume     # after the driver was killed

Rows land in <results>/<experiment>/trials/*.parquet (one per trial); see `modsar results`.
Before Ray starts, the search prints what it will cost (as `modsar spaces SPACE --dataset D`): trials, steps
per epoch, ASHA's first decision, the epochs it will train, and a wall-clock from a few seconds' probe."""


def add_parser(sub: Subparsers) -> None:
    """The `search` command and its options, in the order --help lists them."""
    search = add_command(
        sub, "search", "search a design space with Ray Tune (ASHA; grid, random, optuna)", run, EPILOG
    )
    _add_what_and_where(search)
    _add_budget(search)
    _add_resources(search)
    _add_run_options(search)
    add_data_dir(search)


def _add_what_and_where(search: argparse.ArgumentParser) -> None:
    """The space, the dataset, the overrides and where the rows go."""
    search.add_argument(
        "--space", required=True, help="bundled space name (see `modsar spaces`) or a YAML path"
    )
    search.add_argument("--dataset", required=True, help="prepared dataset name")
    search.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="config overrides on the space's base"
    )
    search.add_argument(
        "--experiment", help="results group (default: <space>-<dataset>, -full-grid added with --full-grid)"
    )
    search.add_argument(
        "--results", default="results", help="results root: a path or a pyarrow URI (s3://...)"
    )


def _add_budget(search: argparse.ArgumentParser) -> None:
    """The search algorithm, its trials and epochs, and ASHA's schedule."""
    search.add_argument(
        "--search",
        choices=["grid", "random", "optuna"],
        help="search algorithm (default: the space's budget.search)",
    )
    search.add_argument(
        "--full-grid",
        action="store_true",
        help="run the space's full_grid protocol instead of its default budget: every grid point, with the "
        "paper's ASHA schedule (the paper spaces' default is a TPE search; `modsar spaces NAME --dataset D "
        "--full-grid` says what each costs). Rows go to <space>-<dataset>-full-grid",
    )
    search.add_argument(
        "--num-samples", type=int, help="grid: repeats of the grid; random/optuna: trials (16)"
    )
    search.add_argument("--max-epochs", type=int, help="epochs per trial (default: the space's budget)")
    search.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="wall-clock budget, split evenly between the AE and AR searches",
    )
    search.add_argument(
        "--max-t",
        type=int,
        help="ASHA max_t in the space's scheduler unit: validation passes, or "
        "optimizer steps where it says unit: steps (default: from the space)",
    )
    search.add_argument("--grace-period", type=int, help="ASHA grace period, in the same unit as --max-t")
    search.add_argument("--reduction-factor", type=int, help="ASHA reduction factor")


def _add_resources(search: argparse.ArgumentParser) -> None:
    """What each trial gets, how many run at once, retries and actors."""
    search.add_argument("--cpus-per-trial", type=float, default=1.0, help="CPUs per trial (= torch threads)")
    search.add_argument(
        "--gpus-per-trial", type=float, default=0.0, help="GPUs per trial; fractions share a GPU"
    )
    search.add_argument(
        "--max-concurrent", type=int, help="trials at once (default: what the resources allow)"
    )
    search.add_argument("--max-failures", type=int, default=0, help="retries of a failing trial")
    search.add_argument(
        "--fresh-actors",
        action="store_true",
        help="start a new Ray actor for every trial. By default a finished trial's actor (torch "
        "imported, dataset loaded) runs the next one, and Tune gives it even a trial that waits "
        "for an actor starting on another node: in a short search on a cluster whose other nodes "
        "start slowly, one node can run every trial. Kept as started under --resume",
    )


def _add_run_options(search: argparse.ArgumentParser) -> None:
    """Seeds, the cluster, logging, resuming and what is printed."""
    search.add_argument(
        "--seed", type=int, default=0, help="seed of the trials and of the random/optuna sampler"
    )
    search.add_argument(
        "--seeds",
        type=int,
        default=0,
        metavar="K",
        help="afterwards re-run the selected AE and AR configs on seeds 0..K-1",
    )
    search.add_argument(
        "--address", help="join an existing Ray cluster (default: $RAY_ADDRESS, else a local Ray)"
    )
    search.add_argument("--dashboard", action="store_true", help="start the Ray dashboard (localhost only)")
    search.add_argument(
        "--mlflow",
        metavar="URI",
        help="also log every trial to MLflow, one run per trial with its "
        "params and per-epoch metrics (file:./mlruns, sqlite:///mlflow.db, http://HOST:5000); "
        "needs pip install 'modsar[mlflow]'. TensorBoard files are always in the ray/ folders",
    )
    search.add_argument("--resume", action="store_true", help="continue a killed search (Tuner.restore)")
    search.add_argument(
        "--overwrite",
        action="store_true",
        help="delete an existing search of this name first (only a folder holding a search that modsar "
        "search wrote; anything else is refused, never deleted)",
    )
    search.add_argument(
        "--quiet", action="store_true", help="no live table; print only the cost estimate and the summary"
    )
    search.add_argument(
        "--no-estimate",
        action="store_true",
        help="skip the cost estimate printed before Ray starts (trials, steps per epoch, ASHA's first "
        "decision, the epochs it will train and a wall-clock from a few seconds' timed probe of "
        "each model size: `modsar spaces SPACE --dataset D`); never printed with --resume",
    )
    search.add_argument("--json", action="store_true", help="print the summary as JSON")


def _request(args: argparse.Namespace) -> SearchRequest:
    """The search the options ask for: every SearchRequest field from the option of its name (the one
    declaration of what a search takes; tests/test_cli.py checks that each field has its option)."""
    from dataclasses import fields

    from modsar.sweep import SearchRequest
    from modsar.sweep.plan import OPTION_DEST

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
    for model, info in sorted(summary["selected"].items()):  # "ae", "ar", or "<backbone>/<task>"
        metrics = "  ".join(f"{k}={v:.4f}" for k, v in info.items() if k != "trial_id")
        print(f"  best {model if '/' in model else model.upper()}: {info['trial_id']}  {metrics}")
