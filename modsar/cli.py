"""`modsar` command line: data preparation and training (search, report and analysis build on these)."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path

from modsar.errors import ModsarError

EPILOG_TRAIN = """examples:
  modsar train --dataset synthetic                          # SASRec-style AR model, CE loss
  modsar train --dataset synthetic task=ae mask_prob=0.4    # the same model as a BERT4Rec-style AE
  modsar train --dataset video --config my.yaml model.num_heads=2 train.max_epochs=50
  modsar train --dataset beauty model.local_heads=1 model.num_heads=2 eval.filter_seen=history

Overrides are dotted keys (see `modsar train --list-keys`); values are read as YAML (1e-3, true, [5,10]).
The result row is written to <results>/<experiment>/trials/<trial>.parquet and the best checkpoint
next to it under checkpoints/."""

EPILOG_PREPARE = """examples:
  modsar data prepare video --source ../shared/data/amazon-video-sasrec/Video.txt.gz
  modsar data prepare beauty --download                      # fetch from the registry URL, checksum-verified
  modsar data prepare mylog --source events.csv --format ml-csv --min-user-count 5 --min-item-count 5 --kcore
  modsar data prepare digi --source train_sessions.txt.gz --source test_sessions.txt.gz --format sessions

A registry name (see `modsar data list`) brings its usual preprocessing and max length; flags override it.
Preparing again with the same sources and options reuses the stored dataset."""


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="prepared-datasets folder (default: $MODSAR_DATA or "
                        "~/.cache/modsar/datasets)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modsar", description="Modular self-attentive sequential "
                                     "recommendation: compare bidirectional (AE) and causal (AR) attention.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    data = sub.add_parser("data", help="import, prepare and inspect datasets")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    prep = data_sub.add_parser("prepare", help="import a raw log, filter it, remap ids, store it as Parquet",
                               epilog=EPILOG_PREPARE, formatter_class=argparse.RawDescriptionHelpFormatter)
    prep.add_argument("name", help="dataset name: a registry benchmark (beauty, video, ml-1m, ...), "
                      "'synthetic', or your own")
    prep.add_argument("--source", action="append", help="raw file (.gz ok); repeat to concatenate files")
    prep.add_argument("--format", default="auto", help="auto | pairs | user-lines | inter | ml-csv | ml-dat | "
                      "sessions (default: auto-detect)")
    prep.add_argument("--min-user-count", type=int, help="drop users with fewer interactions")
    prep.add_argument("--min-item-count", type=int, help="drop items with fewer interactions")
    prep.add_argument("--kcore", action=argparse.BooleanOptionalAction, default=None,
                      help="repeat the min-count filter until both counts hold (k-core)")
    prep.add_argument("--dedup-consecutive", action=argparse.BooleanOptionalAction, default=None,
                      help="drop an interaction that repeats the user's previous item")
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

    listing = data_sub.add_parser("list", help="registry benchmarks and prepared datasets")
    listing.add_argument("--json", action="store_true")
    _add_data_dir(listing)

    train = sub.add_parser("train", help="train and evaluate one configuration",
                           epilog=EPILOG_TRAIN, formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("--dataset", help="prepared dataset name (synthetic is generated on first use)")
    train.add_argument("--config", help="YAML file of config keys (nested or dotted)")
    train.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides")
    train.add_argument("--experiment", help="results group (default: train-<dataset>)")
    train.add_argument("--results", default="results", help="results root: a path or a pyarrow URI "
                       "(default: ./results)")
    train.add_argument("--no-checkpoint", action="store_true", help="do not write the best checkpoint")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument("--json", action="store_true", help="print the result row as JSON")
    train.add_argument("--list-keys", action="store_true", help="print every config key with its default")
    _add_data_dir(train)
    return parser


def _prepare(args: argparse.Namespace) -> int:
    from modsar.data.prepare import PrepareOptions
    from modsar.data.registry import get_spec
    from modsar.data.store import prepare_dataset

    spec = get_spec(args.name)
    base = spec.options() if spec else PrepareOptions().to_dict()
    given = {"min_user_count": args.min_user_count, "min_item_count": args.min_item_count, "kcore": args.kcore,
             "dedup_consecutive": args.dedup_consecutive, "min_rating": args.min_rating}
    options = PrepareOptions(**{k: (v if v is not None else base[k]) for k, v in given.items()})
    manifest, reused = prepare_dataset(args.name, args.source, args.format, options, args.data_dir, args.max_len,
                                       download_missing=args.download, url=args.url, force=args.force)
    if args.json:
        print(json.dumps(manifest, indent=2))
    else:
        s = manifest["statistics"]
        verb = "already prepared (reused)" if reused else "prepared"
        print(f"{args.name}: {verb}: {s['users']:,} users, {s['items']:,} items, {s['interactions']:,} "
              f"interactions, avg length {s['avg_length']:.2f}, density {s['density']:.6f}")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from modsar.data.store import data_root, load_dataset, read_manifest

    manifest = read_manifest(args.name, data_root(args.data_dir))
    if manifest is None:
        manifest = load_dataset(args.name, args.data_dir).manifest  # prepares synthetic, or explains
    s = manifest["statistics"]
    if args.json:
        print(json.dumps({"name": args.name, **s, "max_len": manifest["max_len"],
                          "options": manifest["options"]}, indent=2))
        return 0
    rows = [("users", f"{s['users']:,}"), ("items", f"{s['items']:,}"), ("interactions", f"{s['interactions']:,}"),
            ("avg. length", f"{s['avg_length']:.2f}"), ("length range", f"{s['min_length']}-{s['max_length']}"),
            ("density", f"{100 * s['density']:.4f}%"), ("max_len", str(manifest["max_len"])),
            ("preprocessing", json.dumps(manifest["options"]))]
    print(f"dataset {args.name}")
    for key, value in rows:
        print(f"  {key:<14} {value}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from modsar.data.registry import REGISTRY, SYNTHETIC
    from modsar.data.store import data_root, list_prepared

    prepared = {m["name"]: m for m in list_prepared(args.data_dir)}
    names = sorted(set(REGISTRY) | set(prepared) | {SYNTHETIC})
    entries = []
    for name in names:
        spec = REGISTRY.get(name)
        m = prepared.get(name)
        entries.append({"name": name, "prepared": m is not None,
                        "description": spec.description if spec else ("built-in generator" if name == SYNTHETIC
                                                                      else "user dataset"),
                        "max_len": m["max_len"] if m else (spec.max_len if spec else None),
                        "statistics": m["statistics"] if m else None})
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    print(f"datasets in {data_root(args.data_dir)}")
    for e in entries:
        status = (f"{e['statistics']['users']:,} users / {e['statistics']['items']:,} items"
                  if e["prepared"] else "not prepared")
        print(f"  {e['name']:<12} {status:<32} {e['description']}")
    return 0


def _train(args: argparse.Namespace) -> int:
    from modsar.config import Config, load_config
    from modsar.data.store import load_dataset
    from modsar.results import result_row, write_row
    from modsar.train import TrainingDiverged, run_trial

    if args.list_keys:
        for key, value in Config().flat().items():
            print(f"{key} = {value}")
        return 0
    overrides = list(args.overrides)
    if args.dataset:
        overrides.append(f"dataset={args.dataset}")
    cfg = load_config(args.config, overrides)
    dataset = load_dataset(cfg.dataset, args.data_dir)
    experiment = args.experiment or f"train-{cfg.dataset}"
    trial_id = f"{cfg.task}-{uuid.uuid4().hex[:8]}"
    checkpoint = None if args.no_checkpoint or "://" in args.results else (
        Path(args.results) / experiment / "checkpoints" / f"{trial_id}.pt")
    try:
        result = run_trial(cfg, dataset, checkpoint_path=checkpoint, progress=not args.quiet)
    except TrainingDiverged as exc:
        row = result_row(cfg, experiment=experiment, trial_id=trial_id, status="error", error=str(exc),
                         dataset_manifest=dataset.manifest)
        write_row(args.results, row)
        raise ModsarError(f"training failed: {exc}") from None
    row = result_row(cfg, experiment=experiment, trial_id=trial_id, status="finished", result=result,
                     dataset_manifest=dataset.manifest)
    path = write_row(args.results, row)
    if args.json:
        print(json.dumps(row, indent=2, default=str))
        return 0
    ks = cfg.eval.ks
    print(f"{cfg.task.upper()} on {cfg.dataset}: best epoch {result.best_epoch} of {result.epochs_run} "
          f"({result.epoch_time_s:.2f} s/epoch, {result.wall_time_s:.0f} s total, {result.device}; "
          f"ranking: {'sampled ' + str(cfg.eval.sampled_negatives) if cfg.eval.sampled_negatives else 'full'}, "
          f"filter_seen={cfg.eval.filter_seen})")
    header = "split  " + "".join(f"{m}@{k}".rjust(11) for m in ("recall", "ndcg", "mrr") for k in ks)
    print(header)
    for split, metrics in (("valid", result.valid), ("test", result.test)):
        cells = "".join(f"{metrics[f'{m}@{k}']:>11.4f}" for m in ("recall", "ndcg", "mrr") for k in ks)
        print(f"{split:<7}{cells}")
    print(f"result row: {path}")
    if checkpoint:
        print(f"checkpoint: {checkpoint}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # KEY=VALUE overrides may come after options (e.g. `train --quiet task=ae`); anything else is an error.
    stray = [a for a in extra if a.startswith("-") or "=" not in a or not hasattr(args, "overrides")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    handlers = {("data", "prepare"): _prepare, ("data", "stats"): _stats, ("data", "list"): _list,
                ("train", None): _train}
    handler = handlers[(args.command, getattr(args, "data_command", None))]
    try:
        return handler(args)
    except ModsarError as exc:
        print(f"modsar: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("modsar: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
