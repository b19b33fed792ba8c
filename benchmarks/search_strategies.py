"""What each way of cheapening a search saves, from one probe: the paper's full grid, then TPE sampling, ASHA
counted in steps past the popularity plateau, a larger reduction factor, a last rung and synchronous
successive halving in place of Ray's asynchronous ASHA, each added in turn (the last is the paper spaces'
default), and the full grid under the default's successive halving to separate sampling from early stopping.

    python benchmarks/search_strategies.py --space local_attn --dataset beauty
    python benchmarks/search_strategies.py --space loss_ce --dataset ml-100k --out /tmp/strategies

The model sizes are probed once (as `modsar spaces NAME --dataset D` does) and every strategy is costed with
those timings by the estimate's replay of the scheduler (ASHA or successive halving) on this machine's
workers, so the ratios between strategies do not depend on the machine's load while the probe ran. The
validation share is the part of the trial-seconds spent in validation passes: the most that cheaper validation
at non-final rungs could save.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import pandas as pd
import yaml

from modsar.outputs import write_parquet
from modsar.sweep import SearchRequest, make_plan
from modsar.sweep.cost import CostEstimate, estimate
from modsar.sweep.spaces import load_space

PAPER_ASHA = {"max_t": 40, "grace_period": 5, "reduction_factor": 2}
STEPS = {"unit": "steps", "grace_period": 2000, "reduction_factor": 2}
BUDGET = {"max_epochs": 200, "eval_every": 5}
TPE = {"search": "optuna", "num_samples": 20, **BUDGET}
GRID = {"search": "grid", "num_samples": 1, **BUDGET}
DEFAULT_RUNGS = {**STEPS, "reduction_factor": 3, "max_t": 18000}
HALVING = {"kind": "halving", **DEFAULT_RUNGS}
STRATEGIES = [  # (name, scheduler, budget), each adding one change to the one before (the last: on its own)
    ("paper: full grid, ASHA in passes (grace 25 epochs, rf 2)", PAPER_ASHA, GRID),
    ("+ TPE, 20 trials a direction", PAPER_ASHA, TPE),
    ("+ ASHA in steps, first rung at 2,000 steps", STEPS, TPE),
    ("+ reduction factor 3", {**STEPS, "reduction_factor": 3}, TPE),
    ("+ last rung at 18,000 steps", DEFAULT_RUNGS, TPE),
    ("+ synchronous successive halving (the default)", HALVING, TPE),
    ("full grid under the default's successive halving", HALVING, GRID),
]


def costed(space_file: Path, dataset: str, timings: dict[str, tuple[float, float]]) -> CostEstimate:
    """The estimate of the space at `space_file`, with the probed timings of each model size put in."""
    result = estimate(make_plan(SearchRequest(space=str(space_file), dataset=dataset)), probe=False)
    for d in result.directions:
        for g in d.groups:
            g.step_s, g.eval_s = timings[_size(d.task, g.key)]
            g.probed = True
        d.forget()
    return result


def _size(task: str, key: dict) -> str:
    return task + repr(sorted(key.items()))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--space", default="local_attn")
    parser.add_argument("--dataset", default="beauty")
    parser.add_argument("--out", default="results/published/search-cost", help="folder of the Parquet table")
    args = parser.parse_args()

    probed = estimate(make_plan(SearchRequest(space=args.space, dataset=args.dataset, full_grid=True)))
    timings = {_size(d.task, g.key): (g.step_s, g.eval_s) for d in probed.directions for g in d.groups}
    source = yaml.safe_load(Path(load_space(args.space).path).read_text())
    lines = []
    with tempfile.TemporaryDirectory() as folder:
        for name, scheduler, budget in STRATEGIES:
            document = {k: v for k, v in source.items() if k != "full_grid"}
            document.update(scheduler=scheduler, budget=budget)
            path = Path(folder) / f"{args.space}.yaml"
            path.write_text(yaml.safe_dump(document, sort_keys=False))
            result = costed(path, args.dataset, timings)
            seconds = {d.task: d.seconds() for d in result.directions}
            trial_s = sum(
                d.replayed().seconds * d.replayed().busy * max(1, d.parallel) for d in result.directions
            )
            valid_s = sum(
                g.trials / d.trials * d.passes() * g.eval_s for d in result.directions for g in d.groups
            )
            lines.append(
                {
                    "strategy": name,
                    "space": args.space,
                    "dataset": args.dataset,
                    **{f"trials_{t}": d.trials for t, d in ((d.task, d) for d in result.directions)},
                    "epochs": sum(d.epochs() for d in result.directions),
                    **{f"hours_{t}": s / 3600 for t, s in seconds.items()},
                    "hours": sum(seconds.values()) / 3600,
                    "validation_share": valid_s / trial_s if trial_s else math.nan,
                    "parallel": result.resources.parallel,
                    "probe_device": result.device,
                }
            )
    table = pd.DataFrame(lines)
    table["saving_vs_previous"] = table["hours"].shift(1) / table["hours"]
    table.loc[len(table) - 1, "saving_vs_previous"] = math.nan  # the last line stands on its own
    table["saving_vs_paper"] = table["hours"].iloc[0] / table["hours"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_parquet(table, out / f"strategies-{args.space}-{args.dataset}.parquet")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.drop(columns=["space", "dataset", "probe_device"]).round(3).to_string(index=False))
    if probed.notes:
        print("\n".join(f"note: {n}" for n in probed.notes))


if __name__ == "__main__":
    main()
