"""Where a finished (or interrupted) search's time went, and how far its cost estimate was from it: the
driver's parts (Ray's start-up, each direction's Tuner, selection and testing, seed re-runs) from
search.json, the trials' parts (set-up, training epochs, validation passes, checkpoints, reports to Tune)
from its rows, and the slot-seconds the search held that no trial used.

    python benchmarks/search_time.py --results results --experiment quickstart-synthetic
    python benchmarks/search_time.py --results runs --experiment local_attn-beauty --out results/time

Prints one line per direction and one for the search, with the estimate beside the measured wall-clock where
the search was started with one (`modsar search` without --no-estimate; the search's seed re-runs, which the
estimate does not cover, left out of that ratio), and writes the table as Parquet under --out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from modsar.outputs import write_parquet
from modsar.records.rows import read_rows
from modsar.sweep.timing import breakdown


def predicted_seconds(stored: dict) -> dict[str, float]:
    """Direction (and "search") -> the seconds the search's cost estimate predicted, where it had one."""
    estimate = stored.get("estimate") or {}
    out = {t: d["seconds"] for t, d in (estimate.get("directions") or {}).items() if d.get("seconds")}
    if estimate.get("seconds"):
        out["search"] = estimate["seconds"]
    return out


def re_estimate(stored: dict) -> dict:
    """The cost estimate of the search search.json records, made again now (CostEstimate.to_dict)."""
    import dataclasses

    from modsar.sweep import SearchRequest, make_plan
    from modsar.sweep.cost import estimate

    names = {f.name for f in dataclasses.fields(SearchRequest)}
    request = {k: v for k, v in stored["request"].items() if k in names}
    request.update(resume=False, overwrite=False)
    return estimate(make_plan(SearchRequest(**request))).to_dict()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results", default="results")
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--out", help="folder for time-<experiment>.parquet (default: print only)")
    parser.add_argument(
        "--re-estimate",
        action="store_true",
        help="also estimate the same search again with this ModSAR on this machine (run it idle): the "
        "estimate a search started with may come from an earlier estimator",
    )
    args = parser.parse_args()

    stored = json.loads((Path(args.results) / args.experiment / "search.json").read_text())
    rows = read_rows(args.results, args.experiment)
    table = breakdown(stored.get("timing") or [], rows)
    predicted = predicted_seconds(stored)
    table["estimate_s"] = table["part"].map(predicted)
    # the estimate covers the search, not the seed re-runs after it (--seeds K): they are left out here
    estimated = table["wall_s"] - (table["seeds_s"].fillna(0.0) if "seeds_s" in table else 0.0)
    table["measured_over_estimate"] = estimated / table["estimate_s"]
    if args.re_estimate:
        again = predicted_seconds({"estimate": re_estimate(stored)})
        table["re_estimate_s"] = table["part"].map(again)
        table["measured_over_re_estimate"] = estimated / table["re_estimate_s"]
    table.insert(0, "experiment", args.experiment)
    table["status"] = stored.get("status")
    table["runs"] = len(stored.get("timing") or [])
    shown = table.drop(columns=["experiment"]).round(2)
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(shown.to_string(index=False))
    trials = rows[rows["role"] == "search"] if "role" in rows else rows
    if len(trials):
        per_trial = pd.DataFrame(
            {
                "setup_s": trials["setup_s"],
                "epoch_s": trials["epoch_time_s"],
                "validation_s": trials["eval_time_s"],
                "checkpoint_s": trials["checkpoint_s"],
                "report_s": trials.get("report_s"),
                "epochs": trials["epochs_run"],
            }
        )
        print("\nper trial (median [min, max]):")
        for column, values in per_trial.items():
            values = pd.to_numeric(values, errors="coerce").dropna()
            if len(values):
                print(f"  {column:<13} {values.median():8.2f} [{values.min():.2f}, {values.max():.2f}]")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_parquet(table, out / f"time-{args.experiment}.parquet")


if __name__ == "__main__":
    main()
