"""Saved checkpoints: load one, find the row that records it, and score it again (`modsar evaluate`).

A checkpoint stores its configuration and sizes, so the split, window and evaluation protocol of the run that
wrote it are rebuilt exactly. Scored with that stored protocol, on the device its row was tested on, a
checkpoint gives its row's test.* values to the last digit: the same Evaluator over the same split as `modsar train` and
a search's selection use. Any evaluation setting given here that differs from the stored one is named in the
result, since those metrics are no longer comparable with the row's."""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import torch

from modsar import devices
from modsar.config import Config, apply_overrides
from modsar.data.split import make_split
from modsar.data.store import dataset_identity, load_dataset
from modsar.data.views import viewed
from modsar.errors import ModsarError
from modsar.feasible import validate_for_dataset
from modsar.memory import check_model
from modsar.model.interface import Recommender
from modsar.model.registry import build

CHECKPOINT_FILE = "best.pt"  # what a search trial's checkpoint folder holds
PROTOCOL_KEYS = ("eval.ks", "eval.filter_seen", "eval.sampled_negatives")  # what `modsar evaluate` may change


def load_checkpoint_payload(path: str | Path, device: str = "cpu") -> dict:
    """A checkpoint's stored dict, checked to be ModSAR's; one clear line for anything else."""
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError:
        raise ModsarError(f"checkpoint '{path}' does not exist") from None
    except IsADirectoryError:
        raise ModsarError(f"checkpoint '{path}' is a folder without a {CHECKPOINT_FILE}; pass a .pt file written "
                          "by modsar train, or a search row's checkpoint folder") from None
    except Exception as error:  # pickle/zip errors of a file that is not a torch checkpoint at all
        raise ModsarError(f"{path}: not a ModSAR checkpoint ({type(error).__name__}); pass a .pt written by "
                          "modsar train or modsar search") from None
    if not isinstance(payload, dict):
        raise ModsarError(f"{path}: not a ModSAR checkpoint (it holds a {type(payload).__name__}); pass a .pt "
                          "written by modsar train or modsar search")
    missing = {"config", "state_dict", "num_items", "num_users", "max_len"} - set(payload)
    if missing:
        hint = " (a search's resume state: pass the best.pt beside it)" if "optimizer" in payload else ""
        raise ModsarError(f"{path}: not a ModSAR checkpoint (no {', '.join(sorted(missing))}){hint}; pass a .pt "
                          "written by modsar train or modsar search")
    sizes = {k: payload[k] for k in ("num_items", "num_users", "max_len")}
    broken = [k for k, v in sizes.items() if not isinstance(v, int) or isinstance(v, bool) or v < 1]
    if broken or not isinstance(payload["state_dict"], dict) or not isinstance(payload["config"], dict):
        what = f"{broken[0]}={sizes[broken[0]]!r}" if broken else \
            "a state_dict that is no mapping" if not isinstance(payload["state_dict"], dict) else "a config that is no mapping"
        raise ModsarError(f"{path}: a damaged ModSAR checkpoint ({what}); it was changed after modsar wrote it")
    return payload


def load_checkpoint(path: str | Path, device: str = "cpu") -> tuple[Recommender, Config, dict]:
    """The model (in eval mode, on `device`), its configuration and the stored dict of a checkpoint file."""
    payload = load_checkpoint_payload(path, device)
    try:
        cfg = Config.from_stored(payload["config"], where=str(path))
    except (AttributeError, TypeError, ValueError) as error:  # sections that are no mappings, values of no type
        raise ModsarError(f"{path}: a damaged ModSAR checkpoint (its config: {type(error).__name__}: {error}); it "
                          "was changed after modsar wrote it") from None
    check_model(cfg, payload["num_items"], payload["num_users"], payload["max_len"], str(path))  # before allocating
    model = build(cfg, payload["num_items"], payload["num_users"], payload["max_len"])
    try:
        model.load_state_dict(payload["state_dict"])
    except RuntimeError as error:  # weights of another shape or name than the stored config and sizes build
        first = str(error).split("\n\t")[1] if "\n\t" in str(error) else str(error)
        raise ModsarError(f"{path}: its weights do not fit the model its stored config and sizes build ({first}); "
                          "the file was changed after modsar wrote it, or another program wrote it") from None
    return model.to(device).eval(), cfg, payload


def checkpoint_split(cfg: Config, data_dir: str | None = None):
    """The split a checkpoint was trained and evaluated on: its dataset, view and protocol."""
    return make_split(cfg, viewed(load_dataset(cfg.dataset, data_dir), cfg.data.view))


@contextmanager
def local_checkpoint(where: str | Path) -> Iterator[Path]:
    """A checkpoint as a local file: a .pt path as it is, a search trial's folder (what its row's `checkpoint`
    holds) as its best.pt, and either on an object store (s3://...) copied to a temporary folder first."""
    where = str(where)
    if not where.strip():
        raise ModsarError("no checkpoint given: pass a .pt written by modsar train, or a search row's checkpoint folder")
    if "://" not in where:
        path = Path(where).expanduser()
        if path.is_dir() and not (path / CHECKPOINT_FILE).is_file():
            inside = sorted(p.name for p in path.glob("checkpoint_*") if (p / CHECKPOINT_FILE).is_file())
            hint = f" (a trial's folder: pass one of its {', '.join(inside[-3:])})" if inside else ""
            raise ModsarError(f"checkpoint folder '{where}' holds no {CHECKPOINT_FILE}{hint}; pass a .pt written by "
                              "modsar train, or a search row's checkpoint folder")
        yield path / CHECKPOINT_FILE if path.is_dir() else path
        return
    try:
        fs, path = pafs.FileSystem.from_uri(where)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as error:
        raise ModsarError(f"checkpoint '{where}': {str(error).splitlines()[0]}; pass a local path or a URI pyarrow "
                          "can open (file://, s3://, gs://, hdfs://)") from None
    name = path.rstrip("/").rsplit("/", 1)[-1]
    source = path if name.endswith(".pt") else f"{path.rstrip('/')}/{CHECKPOINT_FILE}"
    try:
        found = fs.get_file_info(source).type
    except OSError as error:
        raise ModsarError(f"checkpoint '{where}': {str(error).splitlines()[0]}") from None
    if found != pafs.FileType.File:
        raise ModsarError(f"checkpoint '{where}' does not exist (looked for {source})")
    with tempfile.TemporaryDirectory() as folder:
        try:
            pafs.copy_files(source, f"{folder}/{CHECKPOINT_FILE}", source_filesystem=fs)
        except OSError as error:
            raise ModsarError(f"checkpoint '{where}': {str(error).splitlines()[0]}") from None
        yield Path(folder) / CHECKPOINT_FILE


def checkpoint_row(where: str | Path) -> dict[str, Any] | None:
    """The row that records this checkpoint, where it lies in its usual place: beside a `modsar train`
    checkpoint (<results>/<experiment>/checkpoints/<trial>.pt) or above a search trial's checkpoint folder
    (<results>/<experiment>/<trial folder>/checkpoint_N). None when no such row is found (a moved file)."""
    from modsar.rows import read_rows

    if "://" in str(where):
        return None
    target = Path(where).expanduser().resolve()
    for experiment in list(target.parents)[:4]:
        if not (experiment / "trials").is_dir():
            continue
        rows = read_rows(str(experiment.parent), experiment.name)
        if "checkpoint" not in rows:
            return None
        for row in rows.to_dict("records"):
            recorded = row.get("checkpoint")
            if isinstance(recorded, str) and "://" not in recorded and \
                    Path(recorded).resolve() in (target, target.parent if target.name == CHECKPOINT_FILE else None):
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
    task: str
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
        return {k: (self.row_metrics[k], v) for k, v in self.metrics.items()
                if k in self.row_metrics and v != self.row_metrics[k]}

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "split": self.split, "task": self.task, "dataset": self.dataset,
                "backbone": self.backbone, "epoch": self.epoch, "device": self.device, "protocol": self.protocol,
                "protocol_changed": {k: {"stored": s, "used": u} for k, (s, u) in self.changed.items()},
                "device_note": self.device_note or None,
                "metrics": self.metrics, "row": self.row_trial_id, "comparable": self.comparable,
                "row_differences": {k: {"row": r, "now": n} for k, (r, n) in self.row_differences().items()}}


def tested_on(row: dict[str, Any] | None) -> str:
    """Where a row's test.* values were computed: a search tests its selected trials on the CPU after the
    search (sweep.tuner.select_and_test); `modsar train` and seed re-runs test on the device they trained on."""
    if row is None or row.get("role") == "search" or not isinstance(row.get("device"), str):
        return "cpu"
    return str(row["device"])


def evaluate_checkpoint(checkpoint: str | Path, split: str = "test", *, filter_seen: str | None = None,
                        ks: list[int] | None = None, sampled_negatives: int | None = None,
                        device: str | None = None, data_dir: str | None = None,
                        option: str = "--device") -> CheckpointScores:
    """Score a saved checkpoint on its dataset's `valid` or `test` targets. Unset options keep the stored
    protocol; the dataset must be prepared here as it was for the run (same items and users). `device` None
    is the device its row was tested on (tested_on), or the CPU where that one is not here (noted)."""
    from modsar.evaluation import Evaluator, model_scorer

    if split not in ("valid", "test"):
        raise ModsarError(f"split '{split}' is not one of: valid, test")
    row = checkpoint_row(checkpoint)
    note = ""
    if device is None:
        device = tested_on(row)
        try:
            devices.resolve(device, option)
        except ModsarError:  # a GPU row scored on a machine without that GPU
            note = f"its row was tested on {device}, which is not here: scored on the CPU, the last digits may differ"
            device = "cpu"
    torch_device = devices.resolve(device, option)
    with local_checkpoint(checkpoint) as path:
        model, cfg, payload = load_checkpoint(path, str(torch_device))
    stored = {key: value for key, value in cfg.flat().items() if key in PROTOCOL_KEYS}
    given: dict[str, Any] = {"eval.ks": ks, "eval.filter_seen": filter_seen, "eval.sampled_negatives": sampled_negatives}
    metric, _, monitor_k = cfg.train.monitor.partition("@")
    if ks is not None and int(monitor_k) not in ks:  # the monitor chose the training epoch; nothing here reads it
        given["train.monitor"] = f"{metric}@{ks[0]}"
    # stored=True: a stored config keeps settings of other backbones (no-ops there), as a row may
    apply_overrides(cfg, {k: v for k, v in given.items() if v is not None}, "evaluate option", stored=True)
    used = {key: value for key, value in cfg.flat().items() if key in PROTOCOL_KEYS}
    dataset = viewed(load_dataset(cfg.dataset, data_dir), cfg.data.view)
    fix = ("prepare it from the same source and options (its row's dataset_sha256 and dataset_preprocessing), or "
           "pass --data-dir")
    if (dataset.num_items, dataset.num_users) != (payload["num_items"], payload["num_users"]):
        raise ModsarError(f"checkpoint '{checkpoint}' was trained on '{cfg.dataset}' with {payload['num_items']:,} "
                          f"items and {payload['num_users']:,} users; the '{cfg.dataset}' prepared here has "
                          f"{dataset.num_items:,} and {dataset.num_users:,}: {fix}")
    here = dataset_identity(dataset.manifest)
    recorded = {k: payload.get(k, (row or {}).get(k)) for k in here}  # checkpoints before 0.3: the row's
    differs = [k for k in here if isinstance(recorded[k], str) and recorded[k] != here[k]]
    if differs:
        what = " and ".join("its sources" if k == "dataset_sha256" else "its preprocessing" for k in differs)
        raise ModsarError(f"checkpoint '{checkpoint}' was trained on another '{cfg.dataset}' than the one prepared "
                          f"here ({what} differ, with the same numbers of items and users): {fix}")
    data_split = make_split(cfg, dataset)
    validate_for_dataset(cfg, dataset.num_items, "evaluate option", data_split, max_len=payload["max_len"])
    evaluator = Evaluator.of(data_split, cfg, payload["max_len"], torch_device)
    metrics = evaluator(model_scorer(model), split)
    scores = CheckpointScores(str(checkpoint), split, metrics, used,
                              {k: (stored[k], used[k]) for k in PROTOCOL_KEYS if stored[k] != used[k]},
                              cfg.task, cfg.dataset, cfg.model.backbone, payload.get("epoch"), str(torch_device),
                              device_note=note)
    if row is not None:
        scores.row_trial_id = str(row.get("trial_id"))
        values = {k: row.get(f"{split}.{k}") for k in metrics}  # NaN where the row holds none (an untested trial)
        scores.row_metrics = {k: float(v) for k, v in values.items()
                              if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    return scores
