"""`modsar evaluate`: the metrics of a saved checkpoint, without training again, compared with its row."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from modsar.cli.common import Subparsers, add_command, add_data_dir, metrics_table, print_json
from modsar.errors import ModsarError
from modsar.outputs import to_json

if TYPE_CHECKING:
    from modsar.records.rescore import CheckpointScores

EPILOG = """examples:
  modsar evaluate --checkpoint results/train-video/checkpoints/ar-1234abcd.pt
  modsar evaluate --checkpoint results/vanilla-video/ray-ar/TRIAL/checkpoint_000012 --split valid
  modsar evaluate --checkpoint C --filter-seen history --ks 1,10,100 --json

With no option the checkpoint's stored protocol (its eval.* settings and window) is used, on the device its
row was tested on (the CPU for a search's selected trial, the training device for modsar train): the metrics
then equal the row's test.* values to the last digit, and the output says so when it finds the row (beside a
train checkpoint, above a search trial's folder). An option that changes the protocol is named in the output:
the row was not selected and tested under it. The dataset must be prepared here as it was for the run
(--data-dir, else $MODSAR_DATA)."""


def add_parser(sub: Subparsers) -> None:
    """The `evaluate` command and its options."""
    evaluate = add_command(
        sub, "evaluate", "the metrics of a saved checkpoint, without training again", run, EPILOG
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
    add_data_dir(evaluate)


def parse_ks(text: str) -> list[int]:
    """The --ks option: distinct cut-offs >= 1, comma-separated."""
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


def run(args: argparse.Namespace) -> int:
    """Score the checkpoint again; print its metrics, the protocol used and how they compare with its row."""
    from modsar.records.rescore import evaluate_checkpoint

    scores = evaluate_checkpoint(
        args.checkpoint,
        args.split,
        filter_seen=args.filter_seen,
        ks=parse_ks(args.ks) if args.ks is not None else None,
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
    print(_row_comparison(scores))
    return 0


def _row_comparison(scores: CheckpointScores) -> str:
    """The last line: whether the checkpoint's row was found, and whether its metrics equal the new ones."""
    if scores.row_trial_id is None:
        return (
            "row: none found beside the checkpoint (moved, or written to a URI), so nothing to compare with"
        )
    if not scores.comparable:
        return (
            f"row {scores.row_trial_id}: not compared, its {scores.split}.* values were taken under the "
            "stored protocol"
        )
    if not scores.row_metrics:
        return (
            f"row {scores.row_trial_id}: it holds no {scores.split}.* values (a search tests only the trials "
            "it selects)"
        )
    if scores.row_differences():
        far = ", ".join(f"{k} {row:.6g} -> {now:.6g}" for k, (row, now) in scores.row_differences().items())
        return f"row {scores.row_trial_id}: differs from its {scores.split}.* values: {far}"
    return f"row {scores.row_trial_id}: equal to its {scores.split}.* values to the last digit"
