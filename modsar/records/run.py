"""One recorded training run: train a configuration, then write its row (and best checkpoint) under a results
root. `modsar train` and the Python API's `modsar.train()` both run exactly this."""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from modsar.config import Config
from modsar.data.store import load_dataset
from modsar.errors import ModsarError
from modsar.outputs import check_name, ensure_writable_dir, is_uri, refuse_credentials, writer_lock
from modsar.records.rows import filesystem, result_row, trial_facts, write_row
from modsar.training.trainer import TrainingDiverged, TrialResult, resolve_device, run_trial

if TYPE_CHECKING:
    import torch


@dataclass
class RecordedRun:
    row: dict[str, Any]  # what the row file holds
    row_path: str
    result: TrialResult
    checkpoint: Path | None


class RowNotWritten(ModsarError):
    """A run that trained to the end but whose row could not be written (a full disk, a read-only results
    folder): `recorded` holds its metrics (row_path empty), so that the caller still shows them; its
    checkpoint was removed, as no row names it."""

    def __init__(self, message: str, recorded: RecordedRun) -> None:
        super().__init__(message)
        self.recorded = recorded


def train_and_record(
    cfg: Config,
    results: str = "results",
    experiment: str | None = None,
    data_dir: str | None = None,
    checkpoint: bool = True,
    progress: bool = True,
) -> RecordedRun:
    """Train `cfg`, test its best validation epoch, and write the row to <results>/<experiment>/trials/ (with
    the best checkpoint in checkpoints/ beside it, unless `checkpoint` is False; a file:// root is a path,
    another URI needs `checkpoint` False). A run that diverges still writes its row (status diverged, the best
    validation epoch so far) and then raises."""
    device = resolve_device(cfg.train.device)  # a missing GPU is refused before the data is loaded
    results = _uri_results(results, checkpoint)
    check_name(cfg.dataset, "dataset")
    if experiment is None:
        experiment = check_name(
            f"train-{cfg.dataset}", "the default experiment name train-<dataset> (pass --experiment)"
        )
    check_name(experiment, "experiment")
    if not is_uri(results):  # before training: a row that cannot be written is a run lost
        for folder in ("trials", "checkpoints") if checkpoint else ("trials",):
            ensure_writable_dir(Path(results) / experiment / folder, "--results")
    # shared: trainings each add a row file of their own; a search writing this experiment excludes them
    with writer_lock(results, experiment, f"experiment '{experiment}' in {results}", shared=True):
        return _train_and_write(cfg, results, experiment, data_dir, checkpoint, progress, device)


def _train_and_write(
    cfg: Config,
    results: str,
    experiment: str,
    data_dir: str | None,
    checkpoint: bool,
    progress: bool,
    device: torch.device,
) -> RecordedRun:
    """train_and_record's work, under the experiment's lock. A checkpoint no row names (training failed or
    was interrupted, or the row could not be written) is removed."""
    dataset = load_dataset(cfg.dataset, data_dir)
    trial_id = f"{cfg.task}-{uuid.uuid4().hex[:8]}"
    path = (
        Path(results).resolve() / experiment / "checkpoints" / f"{trial_id}.pt"
        if checkpoint and not is_uri(results)
        else None
    )
    try:
        result = run_trial(cfg, dataset, checkpoint_path=path, progress=progress, device=device)
    except TrainingDiverged as exc:  # the row keeps the best validation epoch so far; nothing is tested
        _record_divergence(exc, cfg, results, experiment, trial_id, dataset.manifest, path)
    except BaseException:
        _discard(path)
        raise
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
    recorded = RecordedRun(row, "", result, path)
    try:
        recorded.row_path = write_row(results, row)
    except BaseException as error:
        _discard(path)
        if not isinstance(error, (ModsarError, OSError)):
            raise
        recorded.checkpoint = None
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise RowNotWritten(
            f"the run finished, but its row was not recorded (its metrics are shown, not saved): {first}",
            recorded,
        ) from None
    return recorded


def _record_divergence(
    exc: TrainingDiverged,
    cfg: Config,
    results: str,
    experiment: str,
    trial_id: str,
    manifest: dict[str, Any],
    path: Path | None,
) -> NoReturn:
    """Write the row of a run that diverged (the best validation epoch so far, untested), then say so."""
    partial = exc.partial
    row = result_row(
        cfg,
        experiment=experiment,
        trial_id=trial_id,
        status="diverged",
        error=str(exc),
        valid=partial.valid if partial else None,
        facts=trial_facts(partial) if partial else None,
        dataset_manifest=manifest,
    )
    try:
        written = write_row(results, row)
    except (ModsarError, OSError) as error:
        _discard(path)
        raise ModsarError(f"training diverged: {exc}; its row was not recorded: {error}") from None
    raise ModsarError(f"training diverged: {exc} (row: {written})") from None


def _uri_results(results: str, checkpoint: bool) -> str:
    """A file:// results root as the local path it names (its checkpoint is written as a path's is); any
    other URI with a checkpoint asked for is refused before training, since the checkpoint is written to a
    local file: a row would name none, and `modsar evaluate` or `analyze` would find nothing. A URI with a
    password is refused: messages would print it (credentials come from the environment or ~/.aws)."""
    refuse_credentials("--results", results)
    if results.startswith("file://"):  # a relative or malformed one is one line (filesystem), no traceback
        return filesystem(results)[1]
    if is_uri(results) and checkpoint:
        raise ModsarError(
            f"--results {results}: modsar train writes its best checkpoint to a local or shared folder, not "
            "to an object store; pass a folder (a mounted bucket works), or --no-checkpoint to record only "
            "the row there"
        )
    return results


def _discard(checkpoint: Path | None) -> None:
    """Remove a checkpoint that no row will name."""
    if checkpoint is not None:
        with contextlib.suppress(OSError):
            checkpoint.unlink(missing_ok=True)
