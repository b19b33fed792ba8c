"""A saved checkpoint scored again (`modsar evaluate`), beside the row that records it.

A checkpoint stores its configuration and sizes, so the split, window and evaluation protocol of the run that
wrote it are rebuilt exactly. Scored with that stored protocol, on the device its row was tested on, a
checkpoint gives its row's test.* values to the last digit: the same Evaluator over the same split as
`modsar train` and a search's selection use. Any evaluation setting given here that differs from the stored
one is named in the result, since those metrics are no longer comparable with the row's."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modsar import devices
from modsar.config import Config, apply_overrides
from modsar.data.split import make_split
from modsar.data.store import StoredDataset, dataset_identity, load_dataset
from modsar.data.views import viewed
from modsar.errors import ModsarError
from modsar.evaluation.ranking import Evaluator, model_scorer
from modsar.outputs import check_name, is_uri
from modsar.records.rows import read_rows
from modsar.task import Task
from modsar.training.checkpoints import CHECKPOINT_FILE, load_checkpoint, local_checkpoint
from modsar.training.feasible import validate_for_dataset

PROTOCOL_KEYS = ("eval.ks", "eval.filter_seen", "eval.sampled_negatives")  # what `modsar evaluate` may change


def checkpoint_row(where: str | Path) -> dict[str, Any] | None:
    """The row that records this checkpoint, where it lies in its usual place: beside a `modsar train`
    checkpoint (<results>/<experiment>/checkpoints/<trial>.pt) or above a search trial's checkpoint folder
    (<results>/<experiment>/<trial folder>/checkpoint_N). None when no such row is found (a moved file, or
    a folder whose name no experiment could have: check_name)."""
    if is_uri(where):
        return None
    target = Path(where).expanduser().resolve()
    for experiment in list(target.parents)[:4]:
        if not (experiment / "trials").is_dir():
            continue
        try:
            check_name(experiment.name, "experiment")
        except ModsarError:  # an old or hand-named folder: no row of it is read, the checkpoint still scores
            return None
        rows = read_rows(str(experiment.parent), experiment.name)
        if "checkpoint" not in rows:
            return None
        for row in rows.to_dict("records"):
            recorded = row.get("checkpoint")
            if (
                isinstance(recorded, str)
                and not is_uri(recorded)
                and Path(recorded).resolve()
                in (target, target.parent if target.name == CHECKPOINT_FILE else None)
            ):
                return row
        return None
    return None


@dataclass
class CheckpointScores:
    """What `modsar evaluate` gives: the metrics of one split, the protocol they were taken under, what of it
    differs from the stored protocol, and, where the checkpoint's row was found, how they compare with it."""

    checkpoint: str
    split: str  # valid | test
    metrics: dict[str, float]
    protocol: dict[str, Any]  # eval.ks, eval.filter_seen, eval.sampled_negatives as used
    changed: dict[str, tuple[Any, Any]]  # key -> (stored, used), for every protocol setting given otherwise
    task: Task
    dataset: str
    backbone: str
    epoch: int | None  # the best validation epoch the checkpoint holds
    device: str
    device_note: str = ""  # why the device is not the one the row was tested on
    row_trial_id: str | None = None
    row_metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # the row's values of this split

    @property
    def comparable(self) -> bool:
        """Whether these metrics may be held to the row's: the cut-offs only pick which are shown, while
        filtering seen items and sampling negatives change every one."""
        return not set(self.changed) - {"eval.ks"}

    def row_differences(self) -> dict[str, tuple[float, float]]:
        """Metric -> (row, now) wherever the row records this split (finite values only, see
        evaluate_checkpoint) and the two are not equal to the last digit. Empty when they agree, when there is
        no row, or when the protocol differs."""
        if not self.comparable:
            return {}
        return {
            k: (self.row_metrics[k], v)
            for k, v in self.metrics.items()
            if k in self.row_metrics and v != self.row_metrics[k]
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "split": self.split,
            "task": self.task,
            "dataset": self.dataset,
            "backbone": self.backbone,
            "epoch": self.epoch,
            "device": self.device,
            "protocol": self.protocol,
            "protocol_changed": {k: {"stored": s, "used": u} for k, (s, u) in self.changed.items()},
            "device_note": self.device_note or None,
            "metrics": self.metrics,
            "row": self.row_trial_id,
            "comparable": self.comparable,
            "row_differences": {k: {"row": r, "now": n} for k, (r, n) in self.row_differences().items()},
        }


def tested_on(row: dict[str, Any] | None) -> str:
    """Where a row's test.* values were computed: a search tests its selected trials on the CPU after the
    search (sweep.selection.select_and_test); `modsar train` and seed re-runs test on the device they trained
    on."""
    if row is None or row.get("role") == "search" or not isinstance(row.get("device"), str):
        return "cpu"
    return str(row["device"])


def evaluate_checkpoint(
    checkpoint: str | Path,
    split: str = "test",
    *,
    filter_seen: str | None = None,
    ks: list[int] | None = None,
    sampled_negatives: int | None = None,
    device: str | None = None,
    data_dir: str | None = None,
    option: str = "--device",
) -> CheckpointScores:
    """Score a saved checkpoint on its dataset's `valid` or `test` targets. Unset options keep the stored
    protocol; the dataset must be prepared here as it was for the run (same items and users). `device` None
    is the device its row was tested on (tested_on), or the CPU where that one is not here (noted)."""
    if split not in ("valid", "test"):
        raise ModsarError(f"split '{split}' is not one of: valid, test")
    row = checkpoint_row(checkpoint)
    device, note = _scoring_device(device, row, option)
    torch_device = devices.resolve(device, option)
    with local_checkpoint(checkpoint) as path:
        model, cfg, payload = load_checkpoint(path, str(torch_device))
    stored, used = _apply_protocol(cfg, ks, filter_seen, sampled_negatives)
    dataset = viewed(load_dataset(cfg.dataset, data_dir), cfg.data.view)
    _check_same_data(checkpoint, cfg, dataset, payload, row)
    data_split = make_split(cfg, dataset)
    validate_for_dataset(cfg, dataset.num_items, "evaluate option", data_split, max_len=payload["max_len"])
    evaluator = Evaluator.of(data_split, cfg, payload["max_len"], torch_device)
    metrics = evaluator(model_scorer(model), split)
    scores = CheckpointScores(
        str(checkpoint),
        split,
        metrics,
        used,
        {k: (stored[k], used[k]) for k in PROTOCOL_KEYS if stored[k] != used[k]},
        cfg.task,
        cfg.dataset,
        cfg.model.backbone,
        payload.get("epoch"),
        str(torch_device),
        device_note=note,
    )
    if row is not None:
        scores.row_trial_id = str(row.get("trial_id"))
        # NaN where the row holds none (an untested trial)
        values = {k: row.get(f"{split}.{k}") for k in metrics}
        scores.row_metrics = {
            k: float(v)
            for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        }
    return scores


def _scoring_device(device: str | None, row: dict[str, Any] | None, option: str) -> tuple[str, str]:
    """(device, note): the one asked for, else the one the row was tested on, or the CPU where that one is
    not here, with a note saying so (its last digits may then differ from the row's)."""
    if device is not None:
        return device, ""
    device = tested_on(row)
    try:
        devices.resolve(device, option)
    except ModsarError:  # a GPU row scored on a machine without that GPU
        note = (
            f"its row was tested on {device}, which is not here: scored on the CPU, the last digits may "
            "differ"
        )
        return "cpu", note
    return device, ""


def _apply_protocol(
    cfg: Config, ks: list[int] | None, filter_seen: str | None, sampled_negatives: int | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The evaluation settings given as options set on the checkpoint's config; returns the protocol keys'
    values (stored, used), so that whatever differs is named beside the metrics."""
    stored = {key: value for key, value in cfg.flat().items() if key in PROTOCOL_KEYS}
    given: dict[str, Any] = {
        "eval.ks": ks,
        "eval.filter_seen": filter_seen,
        "eval.sampled_negatives": sampled_negatives,
    }
    metric, _, monitor_k = cfg.train.monitor.partition("@")
    # the monitor chose the training epoch; nothing here reads it
    if ks is not None and int(monitor_k) not in ks:
        given["train.monitor"] = f"{metric}@{ks[0]}"
    # stored=True: a stored config keeps settings of other backbones (no-ops there), as a row may
    apply_overrides(cfg, {k: v for k, v in given.items() if v is not None}, "evaluate option", stored=True)
    used = {key: value for key, value in cfg.flat().items() if key in PROTOCOL_KEYS}
    return stored, used


def _check_same_data(
    checkpoint: str | Path, cfg: Config, dataset: StoredDataset, payload: dict, row: dict[str, Any] | None
) -> None:
    """The dataset prepared here must be the one the checkpoint was trained on (its sizes, sources and
    preprocessing): another one's scores would be taken for the checkpoint's."""
    fix = (
        "prepare it from the same source and options (its row's dataset_sha256 and dataset_preprocessing), "
        "or pass --data-dir"
    )
    if (dataset.num_items, dataset.num_users) != (payload["num_items"], payload["num_users"]):
        raise ModsarError(
            f"checkpoint '{checkpoint}' was trained on '{cfg.dataset}' with {payload['num_items']:,} "
            f"items and {payload['num_users']:,} users; the '{cfg.dataset}' prepared here has "
            f"{dataset.num_items:,} and {dataset.num_users:,}: {fix}"
        )
    here = dataset_identity(dataset.manifest)
    recorded = {k: payload.get(k, (row or {}).get(k)) for k in here}  # checkpoints before 0.3: the row's
    differs = [k for k in here if isinstance(recorded[k], str) and recorded[k] != here[k]]
    if differs:
        what = " and ".join("its sources" if k == "dataset_sha256" else "its preprocessing" for k in differs)
        raise ModsarError(
            f"checkpoint '{checkpoint}' was trained on another '{cfg.dataset}' than the one prepared "
            f"here ({what} differ, with the same numbers of items and users): {fix}"
        )
