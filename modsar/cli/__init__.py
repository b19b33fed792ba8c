"""`modsar` command line: one handler per command, each a thin layer over the package (the Python API in
modsar/api.py calls the same functions).

data (prepare, stats, profile, list), train, evaluate, search, spaces, results, report, analyze, generate,
submit; `modsar COMMAND --help` teaches each with examples."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from modsar.errors import ModsarError
from modsar.outputs import to_json, write_text

EPILOG_TRAIN = """examples:
  modsar train --dataset synthetic                          # SASRec-style AR model, CE loss
  modsar train --dataset synthetic task=ae mask_prob=0.4    # the same model as a BERT4Rec-style AE
  modsar train --dataset video --config my.yaml model.num_heads=2 train.max_epochs=50
  modsar train --dataset beauty model.local_heads=1 model.num_heads=2 eval.filter_seen=history

Overrides are dotted keys (see `modsar train --list-keys`); values are read as YAML (1e-3, true, [5,10]).
The result row is written to <results>/<experiment>/trials/<trial>.parquet and the best checkpoint
next to it under checkpoints/ (`modsar evaluate --checkpoint` scores it again). From Python: modsar.train()."""

EPILOG_PROFILE = """examples:
  modsar data profile video                                  # print every measure with its shuffled baseline
  modsar data profile ml-1m --compare wiki --out results/profile   # matched budget, JSON + Parquet + plots
  modsar data profile video --json | jq .top1pct_mass

Any integer-id corpus can be profiled the same way once imported, e.g. tokenized text with one document per
line: `modsar data prepare wiki --source tokens.txt --format sessions` (a dataset of your own is imported
without filters). Definitions and conventions: modsar/data/profile.py."""

EPILOG_PREPARE = """examples:
  modsar data prepare video --source ../shared/data/amazon-video-sasrec/Video.txt.gz
  modsar data prepare beauty --download                      # fetch from the registry URL, checksum-verified
  modsar data prepare ml-1m --source ml-1m.txt               # SASRec's pairs: ml-1m's filters, the file's format
  modsar data prepare mylog --source events.csv --format ml-csv --min-user-count 5 --min-item-count 5 --kcore
  modsar data prepare digi --source train_sessions.txt.gz --source test_sessions.txt.gz --format sessions

A registry name (see `modsar data list`) brings its usual preprocessing and max length; flags override it.
The format of a --source file is detected from the file (the registry's only breaks a tie), unless --format
names it; --download reads the registry's own file in its known format.
Preparing again with the same sources and options reuses the stored dataset."""


def print_json(args: argparse.Namespace, document: str) -> None:
    """Print the JSON document of a --json command to the real stdout. `main` runs such a command with
    sys.stdout pointing at stderr, so that whatever plugins or libraries print, stdout parses as JSON."""
    print(document, file=getattr(args, "json_stdout", None) or sys.stdout, flush=True)


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", help="prepared-datasets folder (default: $MODSAR_DATA or ~/.cache/modsar/datasets)"
    )


EPILOG_SEARCH = """examples:
  modsar search --space local_attn --dataset beauty              # full grid, ASHA, local Ray
  modsar search --space loss_ce --dataset synthetic --max-epochs 10 --max-t 5 --grace-period 1
  modsar search --space vanilla --dataset video --search optuna --num-samples 40 --cpus-per-trial 2
  modsar search --space my_space.yaml --dataset ml-1m --gpus-per-trial 0.25 --address ray://head:10001
  modsar search --space local_attn --dataset beauty --resume     # after the driver was killed

Rows land in <results>/<experiment>/trials/*.parquet (one per trial); see `modsar results`.
Before Ray starts, the search prints what it will cost (as `modsar spaces SPACE --dataset D`): trials, steps
per epoch, ASHA's first decision, the epochs it will train, and a wall-clock from a few seconds' probe."""

EPILOG_SPACES = """examples:
  modsar spaces                                   # every bundled space with its trials per direction
  modsar spaces local_attn                        # what a space searches
  modsar spaces my_space.yaml --check             # is every configuration valid? (before any compute)
  modsar spaces hf_llama --check --dataset video  # ... with the dataset's sizes, as `modsar search` checks
  modsar spaces vanilla --dataset video           # what searching it costs, before anything runs
  modsar spaces local_attn --dataset beauty --cpus-per-trial 2 --max-concurrent 8 --json

`modsar search` runs the same check before Ray starts and refuses an invalid space with every problem.
With --dataset (no --check), the estimate counts each direction's trials, steps per epoch and ASHA's rungs
(1/reduction_factor of the trials go on at each; patience may stop trials sooner, so the epochs are an
estimate), and times a few training steps and a validation pass per model size on this machine; `modsar
search` prints the same lines first."""

EPILOG_EVALUATE = """examples:
  modsar evaluate --checkpoint results/train-video/checkpoints/ar-1234abcd.pt
  modsar evaluate --checkpoint results/vanilla-video/ray-ar/TRIAL/checkpoint_000012 --split valid
  modsar evaluate --checkpoint C --filter-seen history --ks 1,10,100 --json

With no option the checkpoint's stored protocol (its eval.* settings and window) is used, on the device its
row was tested on (the CPU for a search's selected trial, the training device for modsar train): the metrics
then equal the row's test.* values to the last digit, and the output says so when it finds the row (beside a
train checkpoint, above a search trial's folder). An option that changes the protocol is named in the output:
the row was not selected and tested under it. The dataset must be prepared here as it was for the run
(--data-dir, else $MODSAR_DATA)."""

EPILOG_RESULTS = """examples:
  modsar results --experiment loss_ce-synthetic
  modsar results --where task=ar --where status=finished --columns trial_id,model.hidden_size,valid.ndcg@10
  modsar results --where selected=true --json"""

EPILOG_REPORT = """examples:
  modsar report                                        # every experiment under ./results, Markdown to stdout
  modsar report --experiment quickstart-synthetic --out results/report
  modsar report --dataset video --format latex --out paper/

Cells are test metrics of the configuration selected on validation (mean ± std over `--seeds` re-runs
when present); missing cells show "–"; Best Improv. = (best AR - best AE) / best AE."""

EPILOG_ANALYZE = """examples:
  modsar analyze --checkpoint results/train-video/checkpoints/ar-1234abcd.pt --out results/analysis
  modsar analyze --experiment vanilla-video --diagnostic sparsity,rank,hrli,shuffle
  modsar analyze --experiment vanilla-video --experiment local_attn-video --diagnostic sparsity,rank \\
      --out results/tables-2-3          # Vanilla-AE vs Local-AE vs Vanilla-AR: heatmaps, spectra, S and k
  modsar analyze --checkpoint sasrec.pt --diagnostic hrli,shuffle,mixing,residual-scaling,nonfinal,recovery
  modsar analyze --experiment bluesky-beauty --diagnostic user   # user fusion: swapped-user drop, token mass
  modsar analyze --from results/toys-analysis --from results/beauty-analysis --out results/both
                                  # earlier --out folders side by side (one Figure 2 panel per dataset), no recompute

Prints ModSAR Tables 2-3 (S, k per layer and on average) and the residual-dominance summary side by side;
--out adds Parquet tables of every figure and PNG heatmaps, singular-value spectra and alpha sweeps.
HF backbones get every diagnostic where ModSAR knows their layers (llama, gpt2, bert, roberta, albert,
transfo_xl); for any other hf:<type>, mixing and alpha are skipped with a note.

Conventions (window, head averaging, padding, where alpha acts) are in modsar/analysis/analyze.py and in every row."""

EPILOG_GENERATE = """examples:
  modsar generate --checkpoint results/train-ml-100k/checkpoints/ar-1234abcd.pt --steps 10
  modsar generate --checkpoint C --steps 10 --strategy nucleus --top-p 0.9 --seed 1 --out results/gen-nucleus
  modsar generate --checkpoint C --steps 20 --strategy topk --top-k 5 --exclude history --json

Every test user's history is continued for H steps with the model's own picks (AE: by appending a mask
token), then compared with the user's true future: the log from the test target on. Under leave-one-out the
future is one item; train with data.split=temporal for a real multi-item future. Under
data.split_targets=every a user has a history per test timestamp, each rolled out once: the counts (and
--users) are of histories, not users. Metrics (defined in
modsar/evaluation/rollouts.py): alignment (hits, recall, NDCG, exact order), diversity (distinct ratio, immediate repeats,
distinct-2), entropy of generated vs true future items, catalogue coverage, the share of top-1% popular
items (mode collapse) and unseen transitions (oscillation). --json prints them; --out adds rollouts.parquet,
steps.parquet, metrics.json and generate.png."""

EPILOG_SUBMIT = """examples:
  modsar submit --address http://HEAD:8265 --follow -- search --space local_attn --dataset beauty \\
      --results /mnt/shared/modsar/results --gpus-per-trial 0.25 --quiet
  modsar submit --address http://HEAD:8265 --no-wait -- search --space vanilla --dataset video
  modsar submit --address http://HEAD:8265 status raysubmit_abc123
  modsar submit --address http://HEAD:8265 logs raysubmit_abc123
  modsar submit --address http://HEAD:8265 stop raysubmit_abc123

The project travels as the job's working_dir; the nodes need ModSAR's dependencies (see docker/).
Datasets must be prepared where every node can read them (a shared --data-dir or $MODSAR_DATA) and
results written to a shared path or a pyarrow URI (s3://...)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="modsar",
        description="Modular self-attentive sequential "
        "recommendation: compare bidirectional (AE) and causal (AR) attention.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    data = sub.add_parser("data", help="import, prepare and inspect datasets")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    prep = data_sub.add_parser(
        "prepare",
        help="import a raw log, filter it, remap ids, store it as Parquet",
        epilog=EPILOG_PREPARE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prep.add_argument(
        "name",
        help="dataset name: a registry benchmark (beauty, video, ml-1m, ...), 'synthetic', or your own",
    )
    prep.add_argument("--source", action="append", help="raw file (.gz ok); repeat to concatenate files")
    prep.add_argument(
        "--format",
        default="auto",
        help="auto | pairs | user-lines | inter | ml-csv | ml-dat | sessions (default: auto-detect)",
    )
    prep.add_argument("--min-user-count", type=int, help="drop users with fewer interactions")
    prep.add_argument("--min-item-count", type=int, help="drop items with fewer interactions")
    prep.add_argument(
        "--kcore",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="repeat the min-count filter until both counts hold (k-core)",
    )
    prep.add_argument(
        "--dedup-consecutive",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="drop an interaction that repeats the user's previous item",
    )
    prep.add_argument("--min-rating", type=float, help="keep only ratings >= this (formats with ratings)")
    prep.add_argument("--max-len", type=int, help="default model history length for this dataset")
    prep.add_argument("--download", action="store_true", help="fetch a registry dataset from its URL")
    prep.add_argument("--url", help="download from this mirror instead (the registry checksum still applies)")
    prep.add_argument("--force", action="store_true", help="replace an existing dataset of this name")
    prep.add_argument("--json", action="store_true", help="print the manifest as JSON")
    _add_data_dir(prep)

    stats = data_sub.add_parser("stats", help="users, items, interactions, average length, density")
    stats.add_argument("name")
    stats.add_argument("--json", action="store_true")
    _add_data_dir(stats)

    prof = data_sub.add_parser(
        "profile",
        help="entropy structure of a log: Zipf law, permutation entropy, "
        "compressibility, mutual-information decay",
        epilog=EPILOG_PROFILE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prof.add_argument("name", help="a prepared dataset (any integer-id corpus imported with `data prepare`)")
    prof.add_argument(
        "--compare", metavar="OTHER", help="profile OTHER too, both cut to the same number of symbols"
    )
    prof.add_argument(
        "--budget", type=int, help="profile only the first N symbols (whole sequences, the last cut)"
    )
    prof.add_argument("--orders", default="3,4,5,6", help="permutation-entropy orders (default 3,4,5,6)")
    prof.add_argument(
        "--max-gap",
        type=int,
        default=20,
        help="mutual information at gaps 1..G, at most the longest "
        "sequence's length - 1: no pair is further apart (default 20)",
    )
    prof.add_argument("--seed", type=int, default=0, help="seed of the shuffled baselines")
    prof.add_argument(
        "--json", action="store_true", help="print the profile as JSON (fields fixed for scripts)"
    )
    prof.add_argument("--out", help="write profile.json, profile.parquet and the PNG plots here")
    prof.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_data_dir(prof)

    listing = data_sub.add_parser("list", help="registry benchmarks and prepared datasets")
    listing.add_argument("--json", action="store_true")
    _add_data_dir(listing)

    train = sub.add_parser(
        "train",
        help="train and evaluate one configuration",
        epilog=EPILOG_TRAIN,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument("--dataset", help="prepared dataset name (synthetic is generated on first use)")
    train.add_argument("--config", help="YAML file of config keys (nested or dotted)")
    train.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides")
    train.add_argument("--experiment", help="results group (default: train-<dataset>)")
    train.add_argument(
        "--results", default="results", help="results root: a path or a pyarrow URI (default: ./results)"
    )
    train.add_argument("--no-checkpoint", action="store_true", help="do not write the best checkpoint")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument("--json", action="store_true", help="print the result row as JSON")
    train.add_argument("--list-keys", action="store_true", help="print every config key with its default")
    _add_data_dir(train)

    evaluate = sub.add_parser(
        "evaluate",
        help="the metrics of a saved checkpoint, without training again",
        epilog=EPILOG_EVALUATE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument(
        "--checkpoint",
        required=True,
        help="a .pt written by modsar train, or a search row's checkpoint folder (a path or a pyarrow URI)",
    )
    evaluate.add_argument(
        "--split", choices=["valid", "test"], default="test", help="which targets (default: test)"
    )
    evaluate.add_argument(
        "--filter-seen",
        choices=["none", "history"],
        help="drop the user's earlier items from the ranking (default: as stored)",
    )
    evaluate.add_argument("--ks", help="comma-separated cut-offs, e.g. 1,5,10,20,50 (default: as stored)")
    evaluate.add_argument(
        "--sampled-negatives",
        type=int,
        metavar="N",
        help="rank against N sampled negatives; 0 = full ranking (default: as stored)",
    )
    evaluate.add_argument(
        "--device",
        help="cpu, cuda, cuda:N or auto (default: where its row was tested: the CPU "
        "for a search's selected trial, the training device for modsar train and seed re-runs)",
    )
    evaluate.add_argument(
        "--json", action="store_true", help="print metrics, protocol and the row comparison as JSON"
    )
    _add_data_dir(evaluate)

    search = sub.add_parser(
        "search",
        help="search a design space with Ray Tune (ASHA; grid, random, optuna)",
        epilog=EPILOG_SEARCH,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    search.add_argument(
        "--space", required=True, help="bundled space name (see `modsar spaces`) or a YAML path"
    )
    search.add_argument("--dataset", required=True, help="prepared dataset name")
    search.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="config overrides on the space's base"
    )
    search.add_argument("--experiment", help="results group (default: <space>-<dataset>)")
    search.add_argument(
        "--results", default="results", help="results root: a path or a pyarrow URI (s3://...)"
    )
    search.add_argument(
        "--search",
        choices=["grid", "random", "optuna"],
        help="search algorithm (default: the space's budget.search, usually grid)",
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
        "--overwrite", action="store_true", help="delete an existing experiment of this name first"
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
    _add_data_dir(search)

    spaces = sub.add_parser(
        "spaces",
        help="list the bundled design spaces, describe one, or check one",
        epilog=EPILOG_SPACES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        "estimate what searching it costs before anything runs (trials, steps per epoch, ASHA's "
        "first decision, epochs, and wall-clock from a few seconds' timed probe of each model size)",
    )
    spaces.add_argument(
        "--search",
        choices=["grid", "random", "optuna"],
        help="with --check or --dataset: the search algorithm (default: the space's budget.search)",
    )
    spaces.add_argument(
        "--num-samples", type=int, help="with --check or --dataset: as `modsar search --num-samples`"
    )
    spaces.add_argument(
        "--max-epochs", type=int, help="with --check or --dataset: as `modsar search --max-epochs`"
    )
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
    spaces.add_argument("--json", action="store_true", help="with --dataset: print the estimate as JSON")
    spaces.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="with --check or --dataset: overrides on the base"
    )
    _add_data_dir(spaces)

    results = sub.add_parser(
        "results",
        help="list and filter trial rows (Parquet)",
        epilog=EPILOG_RESULTS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    results.add_argument("--experiment", help="one experiment (default: all under --results)")
    results.add_argument("--results", default="results", help="results root: a path or a pyarrow URI")
    results.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keep rows whose column equals the value (repeatable)",
    )
    results.add_argument("--columns", help="comma-separated columns to show")
    results.add_argument("--sort", help="column to sort by, descending (default: the validation ndcg@10)")
    results.add_argument("--limit", type=int, default=50, help="rows to show (default 50)")
    results.add_argument("--json", action="store_true", help="print rows as JSON")

    report = sub.add_parser(
        "report",
        help="the paper's AE-vs-AR tables, seed statistics and plots",
        epilog=EPILOG_REPORT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("--results", default="results", help="results root: a path or a pyarrow URI")
    report.add_argument("--experiment", action="append", help="only these experiments (repeatable)")
    report.add_argument("--space", action="append", help="only these spaces (repeatable)")
    report.add_argument("--dataset", action="append", help="only these datasets (repeatable)")
    report.add_argument("--metric", default="ndcg@10", help="headline metric for verdicts and plots")
    report.add_argument("--format", default="md", choices=["md", "latex", "csv", "html"])
    report.add_argument("--out", help="write report.<format> and PNG plots into this folder")

    analyze = sub.add_parser(
        "analyze",
        help="attention sparsity/rank and last-item-reliance diagnostics",
        epilog=EPILOG_ANALYZE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = analyze.add_mutually_exclusive_group()
    target.add_argument(
        "--checkpoint",
        action="append",
        help="a best.pt written by modsar train or search (repeat to compare models side by side)",
    )
    target.add_argument(
        "--experiment",
        action="append",
        help="the selected AE and AR trials of this search, or the best checkpoint per task of a "
        "`modsar train` experiment (repeatable: e.g. vanilla-video and local_attn-video give "
        "Vanilla-AE, Local-AE, Vanilla-AR, ...)",
    )
    analyze.add_argument(
        "--from",
        dest="from_dirs",
        action="append",
        metavar="DIR",
        help="an earlier `modsar analyze --out` folder: its models are shown beside the others "
        "from its Parquet tables, not recomputed (its notes are not stored, --diagnostic does "
        "not apply to it, and all models are shown in the papers' order); repeatable, e.g. "
        "one folder per dataset for one Figure 2 with a panel each",
    )
    analyze.add_argument("--results", default="results", help="results root (with --experiment)")
    analyze.add_argument(
        "--diagnostic",
        default="sparsity,rank,hrli,shuffle,mixing,residual-scaling",
        help="comma-separated: sparsity, rank, hrli, shuffle, mixing, residual-scaling, "
        "nonfinal, recovery, user (how much a model uses the user: NDCG@10 with users "
        "swapped, attention on a user token) (default: %(default)s)",
    )
    analyze.add_argument(
        "--users",
        type=int,
        default=2000,
        help="test users whose attention maps are measured (seeded sample; default %(default)s)",
    )
    analyze.add_argument(
        "--window", type=int, default=20, help="W: the last W positions per attention map (ModSAR: 20)"
    )
    analyze.add_argument(
        "--sigma",
        type=float,
        default=0.0,
        help="noise std added before the rank threshold "
        "(ModSAR Eq. 8; 0 = deterministic; > 0 also reports Gavish-Donoho known-sigma)",
    )
    analyze.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    analyze.add_argument("--quiet", action="store_true", help="no progress bar")
    analyze.add_argument(
        "--out", help="write diagnostics.parquet, attention_maps.parquet, spectra.parquet and PNG plots here"
    )
    _add_data_dir(analyze)

    gen = sub.add_parser(
        "generate",
        help="H-step rollouts from each test user's history vs the true future",
        epilog=EPILOG_GENERATE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gen.add_argument("--checkpoint", required=True, help="a best.pt written by modsar train or search")
    gen.add_argument("--steps", type=int, required=True, help="H, items generated per user")
    gen.add_argument("--strategy", default="greedy", help="greedy | topk | nucleus (default: %(default)s)")
    gen.add_argument("--top-k", type=int, default=10, help="topk: sample among the k best items (default 10)")
    gen.add_argument(
        "--top-p",
        type=float,
        default=0.9,
        help="nucleus: the smallest set of items holding this probability mass (default 0.9)",
    )
    gen.add_argument("--temperature", type=float, default=1.0, help="topk/nucleus: softmax temperature")
    gen.add_argument(
        "--exclude",
        default="auto",
        help="items a pick may not be: none | history | rollout (earlier "
        "picks) | all; auto (default) = history where the checkpoint's evaluation filters seen items "
        "(eval.filter_seen=history), else none",
    )
    gen.add_argument("--seed", type=int, default=0, help="sampling and --users sample seed (default 0)")
    gen.add_argument(
        "--users",
        type=int,
        default=0,
        help="a seeded sample of this many test histories, one "
        "rollout each (0 = all): one per user, or under data.split_targets=every one per user and "
        "test timestamp",
    )
    gen.add_argument("--batch-size", type=int, default=512, help="users per forward pass (default 512)")
    gen.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    gen.add_argument("--json", action="store_true", help="print the metrics as JSON")
    gen.add_argument("--quiet", action="store_true", help="no progress bar")
    gen.add_argument(
        "--out", help="write rollouts.parquet, steps.parquet, metrics.json and generate.png here"
    )
    _add_data_dir(gen)

    sub_submit = sub.add_parser(
        "submit",
        help="run a modsar command on a Ray cluster (Ray Job Submission)",
        epilog=EPILOG_SUBMIT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub_submit.add_argument(
        "--address",
        default=os.environ.get("RAY_DASHBOARD_ADDRESS"),
        help="the cluster's dashboard, e.g. http://HEAD:8265 (or $RAY_DASHBOARD_ADDRESS)",
    )
    wait = sub_submit.add_mutually_exclusive_group()
    wait.add_argument("--follow", action="store_true", help="stream the job's logs until it ends")
    wait.add_argument("--no-wait", action="store_true", help="print the job id and return at once")
    sub_submit.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable for the job (e.g. MODSAR_DATA=/mnt/shared/datasets)",
    )
    sub_submit.add_argument(
        "rest", nargs=argparse.REMAINDER, help="-- <modsar command ...>, or: status JOB | logs JOB | stop JOB"
    )
    for command, handler in (
        (prep, _prepare),
        (stats, _stats),
        (prof, _profile),
        (listing, _list),
        (train, _train),
        (evaluate, _evaluate),
        (search, _search),
        (spaces, _spaces),
        (results, _results),
        (report, _report),
        (analyze, _analyze),
        (gen, _generate),
        (sub_submit, _submit),
    ):
        command.set_defaults(handler=handler)
    return parser


def _generate(args: argparse.Namespace) -> int:
    from modsar.devices import resolve as resolve_device
    from modsar.evaluation import rollouts as generate
    from modsar.training.checkpoints import checkpoint_split, load_checkpoint

    if not Path(args.checkpoint).is_file():
        raise ModsarError(f"checkpoint '{args.checkpoint}' does not exist")
    if args.users < 0 or args.batch_size < 1:
        raise ModsarError("--users must be >= 0 and --batch-size >= 1")
    if not 0 <= args.seed < 2**32:  # numpy's and torch's seeds, as the config's 'seed'
        raise ModsarError(f"--seed must be in 0..{2**32 - 1}; got {args.seed}")
    sampler = generate.Sampler(args.strategy, args.top_k, args.top_p, args.temperature)
    sampler.check()  # before the checkpoint and the data are loaded
    device = resolve_device(args.device, "--device")
    model, cfg, payload = load_checkpoint(args.checkpoint, str(device))
    split = checkpoint_split(cfg, args.data_dir)
    exclude = generate.resolve_exclude(args.exclude, cfg.eval.filter_seen)
    result = generate.generate(
        model,
        split,
        cfg.task,
        payload["max_len"],
        args.steps,
        sampler,
        exclude,
        args.seed,
        args.users,
        args.batch_size,
        device,
        progress=not args.quiet,
    )
    facts = {
        "checkpoint": str(args.checkpoint),
        "dataset": cfg.dataset,
        "task": cfg.task,
        "split": cfg.data.split,
        "strategy": args.strategy,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "temperature": args.temperature,
        "exclude": exclude,
        "seed": args.seed,
    }
    if args.json:
        print_json(args, to_json({**facts, **result.metrics}))
    else:
        counted = result.counted()  # users, or histories where a user has several (split_targets=every)
        print(
            f"{cfg.task.upper()} {cfg.dataset} ({cfg.data.split} split), {args.strategy} rollouts of "
            f"{args.steps} steps for {counted} ({result.metrics['future_items_per_user']:.2f} true future "
            "items each"
            + ("; the users_* and *_per_user figures count histories" if "histories" in counted else "")
            + "):"
        )
        width = max(map(len, result.metrics))
        for key, value in result.metrics.items():
            if key not in ("users", "steps"):
                print(
                    f"  {key:<{width}}  {value:.4f}"
                    if isinstance(value, float)
                    else f"  {key:<{width}}  {value}"
                )
    if args.out:
        written = generate.write(result, args.out, facts)
        if not args.json:
            print(f"wrote {len(written)} file(s) to {args.out}: {', '.join(p.name for p in written)}")
    return 0


def _best_checkpoints(rows) -> list[tuple[str, str]]:
    """A search's selected AE and AR checkpoints (per backbone, where it compared backbones, and per arm of a space
    with `arms`); for `modsar train` experiments, the best-validation checkpoint per task and backbone. Each comes
    with the arm values that tell it from the others ("positional=target_aligned, user_fusion=token"; "" if none)."""
    if not len(rows):
        return []
    if "checkpoint" not in rows:  # `modsar train` rows of runs that diverged before validating have none
        rows = rows.assign(checkpoint=None)
    chosen = rows[rows["selected"].astype(bool)]
    if not len(chosen):
        trained = rows[
            (rows["role"] == "train") & (rows["status"] == "finished") & rows["checkpoint"].notna()
        ]
        from modsar.config import TrainConfig  # its monitor_key holds the hr@ -> recall@ alias

        monitor = [TrainConfig(monitor=name).monitor_key for name in trained["train.monitor"]]
        trained = trained.assign(
            score=[row[f"valid.{m}"] for (_, row), m in zip(trained.iterrows(), monitor, strict=True)]
        )
        chosen = trained.sort_values("score", ascending=False)
    arm_lists = chosen["space_arms"].dropna() if "space_arms" in chosen else []
    arms = sorted(
        {arm for keys in arm_lists for arm in json.loads(keys)}
    )  # compared models: one checkpoint each
    key = ["task", "model.backbone", *[a for a in arms if a in chosen]]
    found = []
    for _, row in chosen.drop_duplicates(key).sort_values(key).iterrows():
        path = Path(str(row["checkpoint"]))
        arm = ", ".join(f"{k.split('.')[-1]}={row[k]}" for k in key[2:])
        found.append((str(path / "best.pt" if path.is_dir() else path), arm))
    return found


def _analyze(args: argparse.Namespace) -> int:
    from modsar.analysis import analyze
    from modsar.analysis import output as analyze_output
    from modsar.devices import resolve as resolve_device
    from modsar.records.rows import read_rows

    resolve_device(args.device, "--device")  # before any checkpoint is read
    diagnostics = [d.strip() for d in args.diagnostic.split(",") if d.strip()]
    if not (args.checkpoint or args.experiment or args.from_dirs):
        raise ModsarError(
            "nothing to analyze: pass --checkpoint, --experiment or --from (see modsar analyze --help)"
        )
    if args.users < 1 or args.window < 2 or args.sigma < 0:
        raise ModsarError("--users must be >= 1, --window >= 2 and --sigma >= 0")
    targets = [(path, Path(path).stem) for path in args.checkpoint or []]
    for experiment in args.experiment or []:
        targets += [
            (path, f"{experiment}, {arm}" if arm else experiment)
            for path, arm in _best_checkpoints(read_rows(args.results, experiment))
        ]
        if not targets or not targets[-1][1].startswith(experiment):
            raise ModsarError(
                f"experiment '{experiment}' has no selected trials or trained checkpoints under "
                f"{args.results}; run `modsar search` to the end (it selects the best AE and AR) "
                "or `modsar train`"
            )
    for path, _ in targets:
        if not Path(path).is_file():
            raise ModsarError(f"checkpoint '{path}' does not exist")
    biases = [analyze.stored_time_bias(path) for path, _ in targets]
    timed = [(target, bias) for target, bias in zip(targets, biases, strict=True) if bias != "none"]
    if timed and (args.checkpoint or len(timed) == len(targets)):  # a named checkpoint, or nothing else to do
        analyze.refuse_timed(timed[0][0][0], timed[0][1])
    for (_, source), _ in timed:  # an experiment's timed arms: the others are still analysed
        print(
            f"skipping {source}: modsar analyze does not yet carry timestamps through its perturbations "
            "(model.time_bias)",
            file=sys.stderr,
        )
    targets = [t for t, bias in zip(targets, biases, strict=True) if bias == "none"]
    analyses = [
        analyze.run(
            path,
            diagnostics,
            args.data_dir,
            args.users,
            window=args.window,
            sigma=args.sigma,
            device=args.device,
            progress=not args.quiet,
        )
        for path, _ in targets
    ]
    for folder in (
        args.from_dirs or []
    ):  # shown as if computed here; a repeated kind is told apart by its folder
        loaded = analyze_output.load(Path(folder))
        analyses += loaded
        targets += [(str(a.table["checkpoint"].iloc[0]), Path(folder).resolve().name) for a in loaded]
    analyze.paper_labels(analyses)
    labels = [a.label for a in analyses]
    datasets = [a.dataset for a in analyses]
    for a, dataset, (_, source) in zip(analyses, datasets, targets, strict=True):
        if labels.count(a.label) > 1:  # two models of one kind: say which is which
            same_data = [d for d, label in zip(datasets, labels, strict=True) if label == a.label].count(
                dataset
            )
            a.label = f"{a.label} ({dataset if same_data == 1 else source})"
    for i, a in enumerate(analyses):  # still two of one name (one checkpoint given twice): never average them
        if [b.label for b in analyses].count(a.label) > 1:
            a.label = f"{a.label} #{i + 1}"
    for a in analyses:
        for frame in (a.table, a.maps, a.spectra):
            if len(frame):
                frame["model"] = a.label
    if (
        args.experiment or args.from_dirs
    ):  # the papers' orders: Vanilla-AE, Local-AE, Vanilla-AR, Local-AR; SASRec ... GRU4Rec
        analyses.sort(key=analyze_output.paper_order)
    print(analyze_output.summary(analyses))
    if args.out:
        written = analyze_output.write(analyses, Path(args.out))
        print(f"\nwrote {len(written)} file(s) to {args.out}: {', '.join(p.name for p in written)}")
    return 0


def _submit(args: argparse.Namespace) -> int:
    from modsar.sweep import submit

    if not args.address:
        raise ModsarError("--address is required (the cluster's dashboard, e.g. http://HEAD:8265)")
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if rest[:1] and rest[0] in ("status", "logs", "stop"):
        if len(rest) != 2:
            raise ModsarError(f"usage: modsar submit --address URL {rest[0]} JOB_ID")
        action, job_id = rest
        if action == "status":
            print(to_json(submit.status(args.address, job_id), default=str))
        elif action == "logs":
            print(submit.logs(args.address, job_id), end="")
        else:
            print(f"{job_id}: {'stop requested' if submit.stop(args.address, job_id) else 'not running'}")
        return 0
    env = dict(parse_env(e) for e in args.env)
    job_id, status = submit.submit(args.address, rest, env, wait=not args.no_wait, follow=args.follow)
    print(f"{job_id} {status}")
    return 0 if status in ("SUCCEEDED", "PENDING") else 1


def parse_env(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ModsarError(f"--env {text!r} is not KEY=VALUE")
    return key, value


def _report(args: argparse.Namespace) -> int:
    from modsar.records.rows import read_rows
    from modsar.report.render import REPORT_KEYS, build_reports, plot_all, render

    rows = read_rows(args.results)
    if not len(rows):
        raise ModsarError(
            f"no trial rows under {args.results}; pass --results the folder `modsar search` or "
            "`modsar train` wrote to"
        )
    if missing := [k for k in REPORT_KEYS if k not in rows]:  # marked rows a tool of one's own wrote
        others = f" (nor {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise ModsarError(
            f"the trial rows under {args.results} have no {missing[0]!r} column, which a report "
            f"reads{others}; move the files that lack {'them' if others else 'it'} out of the "
            "trials folders"
        )
    for column, wanted in (("experiment", args.experiment), ("space", args.space), ("dataset", args.dataset)):
        if wanted:
            unknown = sorted(set(wanted) - set(rows[column].dropna()))
            if unknown:
                raise ModsarError(f"--{column}: no rows for {unknown[0]!r} under {args.results}")
            rows = rows[rows[column].isin(wanted)]
    if len(rows) and "space" in rows:
        rows = rows[rows["space"].notna()]  # `modsar train` rows belong to no design space
    reports = build_reports(rows, headline=args.metric)
    text = render(reports, args.format, args.metric)
    if not args.out:
        print(text, end="")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"report.{'tex' if args.format == 'latex' else args.format}"
    write_text(target, text)
    plots = [
        path
        for r in reports  # one plot folder per experiment when the report is split by experiment
        for path in plot_all(
            r.rows, r.cells, r.datasets, r.spaces, args.metric, out / r.experiment if r.experiment else out
        )
    ]
    print(text if args.format == "md" else "\n".join(v for r in reports for v in r.verdicts))
    print(f"wrote {target} and {len(plots)} plots in {out}")
    return 0


def _search(args: argparse.Namespace) -> int:
    from modsar.sweep import SearchRequest, run_search

    req = SearchRequest(
        space=args.space,
        dataset=args.dataset,
        experiment=args.experiment,
        results=args.results,
        search=args.search,
        num_samples=args.num_samples,
        max_epochs=args.max_epochs,
        time_budget_s=args.time_budget,
        max_t=args.max_t,
        grace_period=args.grace_period,
        reduction_factor=args.reduction_factor,
        cpus_per_trial=args.cpus_per_trial,
        gpus_per_trial=args.gpus_per_trial,
        max_concurrent=args.max_concurrent,
        max_failures=args.max_failures,
        fresh_actors=args.fresh_actors,
        seed=args.seed,
        seeds=args.seeds,
        overrides=list(args.overrides),
        address=args.address,
        data_dir=args.data_dir,
        quiet=args.quiet,
        resume=args.resume,
        overwrite=args.overwrite,
        dashboard=args.dashboard,
        mlflow=args.mlflow,
    )
    plan = None
    if not args.no_estimate and not args.resume:  # what the search will cost, before Ray starts (under --json
        from modsar.sweep import make_plan  # on stderr, see main)
        from modsar.sweep.cost import estimate

        plan = make_plan(req)  # a refused request is refused here, as run_search would
        try:
            print("\n".join(estimate(plan).lines()), flush=True)
        except ModsarError:
            raise
        except Exception as exc:  # a probe that breaks on a bug of ours must not cost the user the search
            print(f"modsar: warning: no cost estimate ({type(exc).__name__}: {exc})", file=sys.stderr)
    summary = run_search(
        req, plan
    )  # under --json, the live table (and what Tune prints) goes to stderr: see main
    if args.json:
        print_json(args, to_json(summary, default=str))
        if summary["problem"]:  # the summary is printed, but the search failed: a non-zero exit says so
            raise ModsarError(summary["problem"])
        return 0
    print(
        f"search {summary['experiment']}: {summary['trials']} trials ({summary['errors']} errors, "
        f"{summary['diverged']} diverged) in "
        f"{summary['wall_time_s']:.0f} s; rows in {summary['results']}/trials"
    )
    for model, info in sorted(summary["selected"].items()):  # "ae", "ar", or "<backbone>/<task>"
        metrics = "  ".join(f"{k}={v:.4f}" for k, v in info.items() if k != "trial_id")
        print(f"  best {model if '/' in model else model.upper()}: {info['trial_id']}  {metrics}")
    if summary["problem"]:
        raise ModsarError(summary["problem"])
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
        num_samples=args.num_samples,
        max_epochs=args.max_epochs,
        overrides=list(args.overrides),
        data_dir=args.data_dir,
        cpus_per_trial=1.0 if args.cpus_per_trial is None else args.cpus_per_trial,
        gpus_per_trial=args.gpus_per_trial or 0.0,
        max_concurrent=args.max_concurrent,
    )
    result = estimate(make_plan(req))
    if args.json:
        print_json(args, to_json(result.to_dict()))
    else:
        print("\n".join(result.lines()))
    return 0


def _spaces(args: argparse.Namespace) -> int:
    from modsar.sweep.spaces import bundled_spaces, describe, grid_size_by_task, load_space

    resources = {
        "--cpus-per-trial": args.cpus_per_trial,
        "--gpus-per-trial": args.gpus_per_trial,
        "--max-concurrent": args.max_concurrent,
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
    if args.overrides or args.search or args.num_samples or args.max_epochs:
        raise ModsarError("--search, --num-samples, --max-epochs and KEY=VALUE go with --check or --dataset")
    if args.name:
        print(describe(load_space(args.name)))
        return 0
    for space in bundled_spaces():
        sizes = ", ".join(f"{t.upper()} {n}" for t, n in sorted(grid_size_by_task(space).items()))
        print(f"{space.name:<14} {sizes:<18} {space.description}")
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


def _results(args: argparse.Namespace) -> int:
    from modsar.records.rows import matching_rows

    if args.limit < 1:
        raise ModsarError(f"--limit must be >= 1 (rows to show); got {args.limit}")
    rows = matching_rows(args.results, args.experiment, args.where)
    if not len(rows) and not args.json:  # a query with no answer is an answer: said, not pandas' empty frame
        print(f"no trial row under {args.results} matches --where {' '.join(args.where)}")
        return 0
    sort = args.sort or next((c for c in ("valid.ndcg@10", "valid.recall@10") if c in rows), None)
    if sort:
        if sort not in rows:
            raise ModsarError(f"--sort: unknown column '{sort}'")
        rows = rows.sort_values(sort, ascending=False, na_position="last")
    default = [
        "trial_id",
        "task",
        "status",
        "selected",
        "epochs_run",
        "best_epoch",
        "valid.ndcg@10",
        "valid.recall@10",
        "test.ndcg@10",
        "test.recall@10",
    ]
    columns = args.columns.split(",") if args.columns else [c for c in default if c in rows]
    missing = [c for c in columns if c not in rows]
    if missing:
        raise ModsarError(f"--columns: unknown column '{missing[0]}'")
    rows = rows.head(args.limit)
    if args.json:
        print_json(args, to_json(rows.to_dict("records"), default=str))
    else:
        print(rows[columns].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from modsar.data.prepare import PrepareOptions, density_text
    from modsar.data.registry import get_spec
    from modsar.data.store import evaluation_warning, prepare_dataset

    spec = get_spec(args.name)
    base = spec.options() if spec else PrepareOptions().to_dict()
    given = {
        "min_user_count": args.min_user_count,
        "min_item_count": args.min_item_count,
        "kcore": args.kcore,
        "dedup_consecutive": args.dedup_consecutive,
        "min_rating": args.min_rating,
    }
    options = PrepareOptions(**{k: (v if v is not None else base[k]) for k, v in given.items()})
    manifest, reused = prepare_dataset(
        args.name,
        args.source,
        args.format,
        options,
        args.data_dir,
        args.max_len,
        download_missing=args.download,
        url=args.url,
        force=args.force,
    )
    warning = evaluation_warning(manifest["statistics"])
    if warning:
        print(f"modsar: warning: {args.name}: {warning}", file=sys.stderr)
    if args.json:
        print_json(args, to_json(manifest))
    else:
        s = manifest["statistics"]
        verb = "already prepared (reused)" if reused else "prepared"
        print(
            f"{args.name}: {verb}: {s['users']:,} users, {s['items']:,} items, {s['interactions']:,} "
            f"interactions, avg length {s['avg_length']:.2f}, density {density_text(s)}"
        )
    return 0


def _profile(args: argparse.Namespace) -> int:
    from modsar.data import profile, profile_output
    from modsar.data.store import load_dataset
    from modsar.outputs import write_parquet

    try:
        orders = tuple(int(m) for m in args.orders.split(","))
    except ValueError:
        orders = ()
    if not orders or min(orders) < 2 or max(orders) > 8:
        raise ModsarError(f"--orders must be comma-separated integers from 2 to 8; got {args.orders!r}")
    if args.max_gap < 1 or (args.budget is not None and args.budget < 1):
        raise ModsarError("--max-gap and --budget must be >= 1")
    corpora = [
        profile.Corpus.of_dataset(load_dataset(name, args.data_dir))
        for name in [args.name] + ([args.compare] if args.compare else [])
    ]
    budget = min([len(c.items) for c in corpora] + ([args.budget] if args.budget else []))
    corpora = [c.truncated(budget) for c in corpora]
    # a gap of the longest sequence's length or more has no pair (its row would be null): measured up to there
    longest = max(int((c.offsets[1:] - c.offsets[:-1]).max(initial=0)) for c in corpora)
    max_gap = min(args.max_gap, max(1, longest - 1))
    found = [profile.profile(c, orders, max_gap, args.seed, progress=not args.quiet) for c in corpora]
    # the first corpus's fields at the top level; --compare adds the other under "compare" (file and stdout alike)
    document = to_json({**found[0], **({"compare": found[1]} if args.compare else {})})
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "profile.json", document + "\n")
        written = [
            out / "profile.json",
            write_parquet(profile_output.long_table(found), out / "profile.parquet"),
        ]
        written += profile_output.plot(found, corpora, out)
    if args.json:
        print_json(args, document)
    else:
        print(profile_output.summary(found))
    if args.out:
        print(
            f"wrote {len(written)} file(s) to {args.out}: {', '.join(p.name for p in written)}",
            file=sys.stderr if args.json else sys.stdout,
        )
    return 0


def _stats(args: argparse.Namespace) -> int:
    from modsar.data.prepare import density_text, statistics
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
    print(f"dataset {args.name}")
    for key, value in rows:
        print(f"  {key:<14} {value}")
    return 0


def _list(args: argparse.Namespace) -> int:
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


def _train(args: argparse.Namespace) -> int:
    from modsar.config import Config, load_config
    from modsar.records.run import train_and_record

    if args.list_keys:
        for key, value in Config().flat().items():
            print(f"{key} = {value}")
        return 0
    overrides = list(args.overrides)
    if args.dataset:
        overrides.append(f"dataset={args.dataset}")
    cfg = load_config(args.config, overrides)
    run = train_and_record(
        cfg,
        args.results,
        args.experiment,
        args.data_dir,
        checkpoint=not args.no_checkpoint,
        progress=not args.quiet,
    )
    row, path, result, checkpoint = run.row, run.row_path, run.result, run.checkpoint
    if args.json:
        print_json(args, to_json(row, default=str))
        return 0
    ks = cfg.eval.ks
    print(
        f"{cfg.task.upper()} on {cfg.dataset}: best epoch {result.best_epoch} of {result.epochs_run} "
        f"({result.epoch_time_s:.2f} s/epoch, {result.gflops:.0f} GFLOP/s = MFU {result.mfu:.0%}, "
        f"{result.wall_time_s:.0f} s total, {result.device}; "
        f"ranking: {'sampled ' + str(cfg.eval.sampled_negatives) if cfg.eval.sampled_negatives else 'full'}, "
        f"filter_seen={cfg.eval.filter_seen})"
    )
    print(metrics_table(ks, {"valid": result.valid, "test": result.test}))
    print(f"result row: {path}")
    if checkpoint:
        print(f"checkpoint: {checkpoint}")
    return 0


def metrics_table(ks: list[int], splits: dict[str, dict[str, float]]) -> str:
    """Recall, NDCG and MRR at every k, one line per split (what `train` and `evaluate` print)."""
    names = [f"{m}@{k}" for m in ("recall", "ndcg", "mrr") for k in ks]
    lines = ["split  " + "".join(name.rjust(11) for name in names)]
    lines += [
        f"{split:<7}" + "".join(f"{metrics[name]:>11.4f}" for name in names)
        for split, metrics in splits.items()
    ]
    return "\n".join(lines)


def _ks(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",")]
    except ValueError:
        raise ModsarError(
            f"--ks {text!r} is not a comma-separated list of cut-offs (e.g. --ks 1,5,10,20,50)"
        ) from None
    if not ks or min(ks) < 1:
        raise ModsarError(f"--ks {text!r}: every cut-off must be >= 1")
    if len(set(ks)) < len(ks):
        raise ModsarError(f"--ks {text!r} names a cut-off twice; give each once")
    return ks


def _evaluate(args: argparse.Namespace) -> int:
    from modsar.records.rescore import evaluate_checkpoint

    scores = evaluate_checkpoint(
        args.checkpoint,
        args.split,
        filter_seen=args.filter_seen,
        ks=_ks(args.ks) if args.ks is not None else None,
        sampled_negatives=args.sampled_negatives,
        device=args.device,
        data_dir=args.data_dir,
    )
    if args.json:
        print_json(args, to_json(scores.to_dict()))
        return 0
    protocol = scores.protocol
    ranking = (
        f"sampled {protocol['eval.sampled_negatives']}" if protocol["eval.sampled_negatives"] else "full"
    )
    epoch = f" (best epoch {scores.epoch})" if scores.epoch is not None else ""
    print(
        f"{scores.task.upper()} ({scores.backbone}) on {scores.dataset}, {scores.checkpoint}{epoch}: "
        f"{scores.split}, ranking: {ranking}, filter_seen={protocol['eval.filter_seen']}, {scores.device}"
    )
    print(metrics_table(protocol["eval.ks"], {scores.split: scores.metrics}))
    changes = ", ".join(f"{key}={used} (stored: {stored})" for key, (stored, used) in scores.changed.items())
    if not scores.comparable:
        print(
            f"protocol: not the one this checkpoint's run was selected and tested under: {changes}; these "
            f"metrics are not comparable with its row's {scores.split}.* values"
        )
    elif scores.changed:
        print(f"protocol: the stored one, at other cut-offs: {changes}")
    if scores.device_note:
        print(f"device: {scores.device_note}")
    if scores.row_trial_id is None:
        print(
            "row: none found beside the checkpoint (moved, or written to a URI), so nothing to compare with"
        )
    elif not scores.comparable:
        print(
            f"row {scores.row_trial_id}: not compared, its {scores.split}.* values were taken under the stored "
            "protocol"
        )
    elif not scores.row_metrics:
        print(
            f"row {scores.row_trial_id}: it holds no {scores.split}.* values (a search tests only the trials "
            "it selects)"
        )
    elif scores.row_differences():
        far = ", ".join(f"{k} {row:.6g} -> {now:.6g}" for k, (row, now) in scores.row_differences().items())
        print(f"row {scores.row_trial_id}: differs from its {scores.split}.* values: {far}")
    else:
        print(f"row {scores.row_trial_id}: equal to its {scores.split}.* values to the last digit")
    return 0


def _check_folders(args: argparse.Namespace) -> None:
    """Refuse a folder option that names, or lies under, a file, or (where the command writes there) a folder
    that cannot be written: --out, the --results of train and search, the --data-dir of data prepare."""
    from modsar.outputs import ensure_writable_dir

    if getattr(
        args, "data_dir", None
    ):  # only `data prepare` must write there; the others may read a shared copy
        ensure_writable_dir(
            args.data_dir, "--data-dir", write=getattr(args, "data_command", None) == "prepare"
        )
    if getattr(args, "out", None):
        ensure_writable_dir(args.out, "--out")
    if args.command in ("train", "search") and not getattr(args, "list_keys", False):
        ensure_writable_dir(args.results, "--results")
        if args.experiment and "://" not in args.results:
            ensure_writable_dir(Path(args.results) / args.experiment, "--results")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # KEY=VALUE overrides may come after options (e.g. `train --quiet task=ae`); anything else is an error.
    stray = [a for a in extra if a.startswith("-") or "=" not in a or not hasattr(args, "overrides")]
    if args.command == "submit":
        stray = []
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    # with --json, stdout is the JSON document alone: the command runs with sys.stdout pointing at stderr, so
    # nothing a plugin, Ray or another library prints can corrupt it, and print_json writes to the real one
    args.json_stdout = sys.stdout
    try:
        _check_folders(args)  # before any work: a result computed and then lost to a bad path helps nobody
        with (
            contextlib.redirect_stdout(sys.stderr)
            if getattr(args, "json", False)
            else contextlib.nullcontext()
        ):
            return args.handler(args)
    except ModsarError as exc:
        print(f"modsar: error: {exc}", file=sys.stderr)
        return 2
    except (
        KeyboardInterrupt
    ) as exc:  # Ctrl-C has no message; one raised where it struck says where (a plugin)
        print(f"modsar: interrupted{f' {exc}' if str(exc) else ''}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
