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
from modsar.sweep.timing import breakdown, clock_lost, trials_span_s


def predicted(stored: dict, what: str = "seconds") -> dict[str, float]:
    """Direction (and "search") -> what the search's cost estimate predicted of `what` (seconds, epochs),
    where it had one."""
    estimate = stored.get("estimate") or {}
    out = {t: d[what] for t, d in (estimate.get("directions") or {}).items() if d.get(what)}
    if estimate.get(what):
        out["search"] = estimate[what]
    return out


def spread(table: pd.DataFrame, name: str, estimate: dict) -> None:
    """Columns <name>_low_s and <name>_high_s: the search's wall-clock in the 10th and 90th percentile of the
    estimate's replays (an estimate made before they were recorded has none), on the search's line."""
    low, high = estimate.get("seconds_range") or (None, None)
    search = table["part"] == "search"
    table[f"{name}_low_s"] = pd.Series(low, index=table.index).where(search)
    table[f"{name}_high_s"] = pd.Series(high, index=table.index).where(search)


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
    table["estimate_s"] = table["part"].map(predicted(stored))
    # the estimate covers the search, not the seed re-runs after it (--seeds K): they are left out here
    estimated = table["wall_s"] - (table["seeds_s"].fillna(0.0) if "seeds_s" in table else 0.0)
    table["measured_over_estimate"] = estimated / table["estimate_s"]
    # the ratio as its two factors: how many epochs the trials ran, and the wall-clock each epoch took
    # (with its share of validation, set-up and idle slots), each against the estimate's
    table["estimate_epochs"] = table["part"].map(predicted(stored, "epochs"))
    table["epochs_over_estimate"] = table["epochs"] / table["estimate_epochs"]
    table["epoch_s_over_estimate"] = table["measured_over_estimate"] / table["epochs_over_estimate"]
    # the whole search's range over the estimate's replays (10th to 90th percentile), where it recorded one
    spread(table, "estimate", stored.get("estimate") or {})
    if args.re_estimate:
        fresh = re_estimate(stored)
        table["re_estimate_s"] = table["part"].map(predicted({"estimate": fresh}))
        table["measured_over_re_estimate"] = estimated / table["re_estimate_s"]
        spread(table, "re_estimate", fresh)
    table.insert(0, "experiment", args.experiment)
    table["status"] = stored.get("status")
    table["scheduler"] = (stored.get("asha") or {}).get("kind", "asha")  # searches before halving ran ASHA
    table["runs"] = len(stored.get("timing") or [])
    # a run killed before the clock was kept as it went lost its seconds: say so, with the trials' span (only
    # then; NaN where rows do not date the trials)
    trials = rows[rows["role"] == "search"] if "role" in rows else rows
    kind = table["scheduler"].iloc[0]
    table["clock_lost"] = clock_lost(stored.get("timing") or [], rows)
    table["trials_span_s"] = (
        table["part"]
        .map(lambda part: trials_span_s(trials if part == "search" else trials[trials["task"] == part], kind))
        .where(table["clock_lost"])
    )
    shown = table.drop(columns=["experiment"]).round(2)
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(shown.to_string(index=False))
    if table["clock_lost"].any():
        span = table["trials_span_s"].iloc[-1]
        at_least = (
            f"the wall-clock was at least the seconds in which the trials ran, {span:,.0f} s (trials_span_s)"
            if table["trials_span_s"].notna().any()
            else "under successive halving the rows do not date the trials: only the clock's seconds remain"
        )
        print(
            "\nnote: the recorded clock misses time (a run was killed before the clock was kept as it went): "
            f"the driver's seconds and the idle share are short; {at_least}"
        )
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
