"""`modsar train`: train and evaluate one configuration, and record its row (and best checkpoint)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from modsar.cli.common import Subparsers, add_command, add_data_dir, metrics_table, print_json
from modsar.outputs import to_json

if TYPE_CHECKING:
    from modsar.config import Config
    from modsar.records.run import RecordedRun

EPILOG = """examples:
  modsar train --dataset synthetic                          # SASRec-style AR model, CE loss
  modsar train --dataset synthetic task=ae mask_prob=0.4    # the same model as a BERT4Rec-style AE
  modsar train --dataset video --config my.yaml model.num_heads=2 train.max_epochs=50
  modsar train --dataset beauty model.local_heads=1 model.num_heads=2 eval.filter_seen=history

Overrides are dotted keys (see `modsar train --list-keys`); values are read as YAML 1.2 (1e-3, true, [5,10];
010 is 10, and 1:30, on, yes are text). A --config file gives each key once, nested or dotted.
The result row is written to <results>/<experiment>/trials/<trial>.parquet and the best checkpoint
next to it under checkpoints/ (`modsar evaluate --checkpoint` scores it again). \
From Python: modsar.train()."""


def add_parser(sub: Subparsers) -> None:
    """The `train` command and its options."""
    train = add_command(sub, "train", "train and evaluate one configuration", run, EPILOG)
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
    add_data_dir(train)


def run(args: argparse.Namespace) -> int:
    """Train the configuration (--config, then the overrides), record it, print its metrics and files."""
    from modsar.config import Config, load_config
    from modsar.model import registry
    from modsar.records.run import RowNotWritten, train_and_record

    if args.list_keys:
        for key, value in Config().flat().items():
            print(f"{key} = {value}")
        for entry in registry.entries():  # the backbones' own sections (plugins loaded), under their backbone
            for key in registry.section_keys(entry):
                section = getattr(Config().model, entry.name)
                print(f"{key} = {getattr(section, key.rsplit('.', 1)[1])}  (model.backbone={entry.name})")
        return 0
    overrides = list(args.overrides)
    if args.dataset:
        overrides.append(f"dataset={args.dataset}")
    cfg = load_config(args.config, overrides)
    try:
        recorded = train_and_record(
            cfg,
            args.results,
            args.experiment,
            args.data_dir,
            checkpoint=not args.no_checkpoint,
            progress=not args.quiet,
        )
    except RowNotWritten as exc:  # a finished run's metrics are shown even when its row cannot be written
        _show(args, cfg, exc.recorded)
        raise
    _show(args, cfg, recorded)
    return 0


def _show(args: argparse.Namespace, cfg: Config, recorded: RecordedRun) -> None:
    """The run's metrics and files (its row as JSON with --json); a row not written has no path to name."""
    row, path, result, checkpoint = recorded.row, recorded.row_path, recorded.result, recorded.checkpoint
    if args.json:
        print_json(args, to_json(row, default=str))
        return
    ks = cfg.eval.ks
    print(
        f"{cfg.task.upper()} on {cfg.dataset}: best epoch {result.best_epoch} of {result.epochs_run} "
        f"({result.epoch_time_s:.2f} s/epoch, {result.gflops:.0f} GFLOP/s = MFU {result.mfu:.0%}, "
        f"{result.wall_time_s:.0f} s total, {result.device}; "
        f"ranking: {'sampled ' + str(cfg.eval.sampled_negatives) if cfg.eval.sampled_negatives else 'full'}, "
        f"filter_seen={cfg.eval.filter_seen})"
    )
    print(metrics_table(ks, {"valid": result.valid, "test": result.test}))
    if path:
        print(f"result row: {path}")
    if checkpoint:
        print(f"checkpoint: {checkpoint}")
