"""What Tables 5 and 6 would cost on the datasets not yet run: the default search's estimate of every space in
the two tables on each dataset, one row per (dataset, space), as `modsar spaces NAME --dataset D` prints it.

    python benchmarks/table_costs.py                                   # sports, video, yelp
    python benchmarks/table_costs.py --datasets beauty --out /tmp/costs

Each estimate probes its model sizes on this machine beside the companions a search's other trials would be,
so run it on an idle machine: the rows keep the cores other processes held during each probe (`busy_cores`),
which the results page states beside the table. The estimate covers the search, not the picks' seed
re-runs (`--seeds`, whose ceiling `modsar spaces NAME --dataset D --seeds 3` prints), and does not model
patience, which ends some trials sooner.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from published import TABLE5_SPACES, TABLE6_SPACES  # the tables' spaces, as the results page reads them

from modsar.devices import cpu_identity
from modsar.errors import ModsarError
from modsar.outputs import ensure_writable_dir, write_parquet
from modsar.sweep import SearchRequest, make_plan
from modsar.sweep.cost import estimate

TABLE_OF = {**dict.fromkeys(TABLE5_SPACES, 5), **dict.fromkeys(TABLE6_SPACES, 6)}


ROOT = (
    Path(__file__).resolve().parent.parent
)  # the repository: the default --out lies in it, run from anywhere


def costs(datasets: list[str], spaces: list[str]) -> pd.DataFrame:
    """One estimate per (dataset, space), probed on this machine, as rows. Every plan is made first, so an
    unknown dataset or space is refused before an hour of probes, not after."""
    plans = {(d, s): make_plan(SearchRequest(space=s, dataset=d)) for d in datasets for s in spaces}
    rows = []
    for dataset in datasets:
        for space in spaces:
            result = estimate(plans[dataset, space])
            low, high = result.seconds_range()
            rows.append(
                {
                    "dataset": dataset,
                    "space": space,
                    "table": TABLE_OF.get(space, 0),
                    "trials": sum(d.trials for d in result.directions),
                    "epochs": sum(d.epochs() for d in result.directions),
                    "hours": result.seconds() / 3600,
                    "hours_low": low / 3600,
                    "hours_high": high / 3600,
                    "busy_cores": result.busy_cores,
                    "cpus": result.resources.cpus,
                    "parallel": result.resources.parallel,
                    "probe_device": result.device,
                    "cpu": cpu_identity(),
                    "notes": " | ".join(result.notes),
                }
            )
            print(f"{dataset:10} {space:14} {rows[-1]['hours']:5.1f} h  busy {result.busy_cores}", flush=True)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", nargs="+", default=["sports", "video", "yelp"])
    parser.add_argument("--spaces", nargs="+", default=list(TABLE_OF))
    parser.add_argument(
        "--out", default=str(ROOT / "results/published/search-cost"), help="folder of the Parquet table"
    )
    args = parser.parse_args()
    try:
        ensure_writable_dir(
            args.out, "--out"
        )  # before the probes: a result computed and then lost helps nobody
        table = costs(args.datasets, args.spaces)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_parquet(table, out / "tables56-estimates.parquet")
    except ModsarError as exc:
        raise SystemExit(f"table_costs.py: error: {exc}") from None
    print(table.pivot(index="space", columns="dataset", values="hours").round(1).to_string())


if __name__ == "__main__":
    main()
