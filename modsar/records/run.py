"""One recorded training run: train a configuration, then write its row (and best checkpoint) under a results
root. `modsar train` and the Python API's `modsar.train()` both run exactly this."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modsar.config import Config
from modsar.data.store import load_dataset
from modsar.errors import ModsarError
from modsar.outputs import ensure_writable_dir
from modsar.records.rows import result_row, trial_facts, write_row
from modsar.training.trainer import TrainingDiverged, TrialResult, resolve_device, run_trial


@dataclass
class RecordedRun:
    row: dict[str, Any]  # what the row file holds
    row_path: str
    result: TrialResult
    checkpoint: Path | None


def train_and_record(
    cfg: Config,
    results: str = "results",
    experiment: str | None = None,
    data_dir: str | None = None,
    checkpoint: bool = True,
    progress: bool = True,
) -> RecordedRun:
    """Train `cfg`, test its best validation epoch, and write the row to <results>/<experiment>/trials/ (with
    the best checkpoint in checkpoints/ beside it, unless `checkpoint` is False or results is a URI). A run
    that diverges still writes its row (status diverged, the best validation epoch so far) and then raises."""
    resolve_device(cfg.train.device)  # a missing GPU is refused before the data is loaded (or generated)
    experiment = experiment or f"train-{cfg.dataset}"
    if "://" not in results:  # before training: a row that cannot be written is a run lost
        for folder in ("trials", "checkpoints") if checkpoint else ("trials",):
            ensure_writable_dir(Path(results) / experiment / folder, "--results")
    dataset = load_dataset(cfg.dataset, data_dir)
    trial_id = f"{cfg.task}-{uuid.uuid4().hex[:8]}"
    path = (
        Path(results).resolve() / experiment / "checkpoints" / f"{trial_id}.pt"
        if checkpoint and "://" not in results
        else None
    )
    try:
        result = run_trial(cfg, dataset, checkpoint_path=path, progress=progress)
    except TrainingDiverged as exc:  # the row keeps the best validation epoch so far; nothing is tested
        partial = exc.partial
        row = result_row(
            cfg,
            experiment=experiment,
            trial_id=trial_id,
            status="diverged",
            error=str(exc),
            valid=partial.valid if partial else None,
            facts=trial_facts(partial) if partial else None,
            dataset_manifest=dataset.manifest,
        )
        raise ModsarError(f"training diverged: {exc} (row: {write_row(results, row)})") from None
    row = result_row(
        cfg,
        experiment=experiment,
        trial_id=trial_id,
        status="finished",
        valid=result.valid,
        test=result.test,
        facts=trial_facts(result),
        dataset_manifest=dataset.manifest,
    )
    return RecordedRun(row, write_row(results, row), result, path)
