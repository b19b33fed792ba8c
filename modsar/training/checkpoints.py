"""Saved checkpoints, loaded: a checkpoint file (or a search trial's folder, local or on an object store)
back into the model, configuration and sizes that wrote it. Apart from the trainer, so that everything that
only reads a checkpoint (`modsar evaluate`, `modsar analyze`, `modsar generate`, the Python API, a search's
selection) needs no training code."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import torch

from modsar.config import Config
from modsar.data.split import make_split
from modsar.data.store import load_dataset
from modsar.data.views import viewed
from modsar.errors import ModsarError
from modsar.memory import check_model
from modsar.model.interface import Recommender
from modsar.model.registry import build
from modsar.outputs import is_uri

CHECKPOINT_FILE = "best.pt"  # what a search trial's checkpoint folder holds


def load_checkpoint_payload(path: str | Path, device: str = "cpu") -> dict:
    """A checkpoint's stored dict, checked to be ModSAR's; one clear line for anything else."""
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError:
        raise ModsarError(f"checkpoint '{path}' does not exist") from None
    except IsADirectoryError:
        raise ModsarError(
            f"checkpoint '{path}' is a folder without a {CHECKPOINT_FILE}; pass a .pt file written "
            "by modsar train, or a search row's checkpoint folder"
        ) from None
    except Exception as error:  # pickle/zip errors of a file that is not a torch checkpoint at all
        raise ModsarError(
            f"{path}: not a ModSAR checkpoint ({type(error).__name__}); pass a .pt written by "
            "modsar train or modsar search"
        ) from None
    if not isinstance(payload, dict):
        raise ModsarError(
            f"{path}: not a ModSAR checkpoint (it holds a {type(payload).__name__}); pass a .pt "
            "written by modsar train or modsar search"
        )
    missing = {"config", "state_dict", "num_items", "num_users", "max_len"} - set(payload)
    if missing:
        hint = " (a search's resume state: pass the best.pt beside it)" if "optimizer" in payload else ""
        raise ModsarError(
            f"{path}: not a ModSAR checkpoint (no {', '.join(sorted(missing))}){hint}; pass a .pt "
            "written by modsar train or modsar search"
        )
    sizes = {k: payload[k] for k in ("num_items", "num_users", "max_len")}
    broken = [k for k, v in sizes.items() if not isinstance(v, int) or isinstance(v, bool) or v < 1]
    if broken or not isinstance(payload["state_dict"], dict) or not isinstance(payload["config"], dict):
        what = (
            f"{broken[0]}={sizes[broken[0]]!r}"
            if broken
            else "a state_dict that is no mapping"
            if not isinstance(payload["state_dict"], dict)
            else "a config that is no mapping"
        )
        raise ModsarError(
            f"{path}: a damaged ModSAR checkpoint ({what}); it was changed after modsar wrote it"
        )
    return payload


def load_checkpoint(path: str | Path, device: str = "cpu") -> tuple[Recommender, Config, dict]:
    """The model (in eval mode, on `device`), its configuration and the stored dict of a checkpoint file."""
    payload = load_checkpoint_payload(path, device)
    try:
        cfg = Config.from_stored(payload["config"], where=str(path))
    except (AttributeError, TypeError, ValueError) as error:  # sections that are no mappings, wrong types
        raise ModsarError(
            f"{path}: a damaged ModSAR checkpoint (its config: {type(error).__name__}: {error}); it "
            "was changed after modsar wrote it"
        ) from None
    # before allocating
    check_model(cfg, payload["num_items"], payload["num_users"], payload["max_len"], str(path))
    model = build(cfg, payload["num_items"], payload["num_users"], payload["max_len"])
    try:
        model.load_state_dict(payload["state_dict"])
    except RuntimeError as error:  # weights of another shape or name than the stored config and sizes build
        first = str(error).split("\n\t")[1] if "\n\t" in str(error) else str(error)
        raise ModsarError(
            f"{path}: its weights do not fit the model its stored config and sizes build ({first}); "
            "the file was changed after modsar wrote it, or another program wrote it"
        ) from None
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
        raise ModsarError(
            "no checkpoint given: pass a .pt written by modsar train, or a search row's checkpoint folder"
        )
    if not is_uri(where):
        path = Path(where).expanduser()
        if path.is_dir() and not (path / CHECKPOINT_FILE).is_file():
            inside = sorted(p.name for p in path.glob("checkpoint_*") if (p / CHECKPOINT_FILE).is_file())
            hint = f" (a trial's folder: pass one of its {', '.join(inside[-3:])})" if inside else ""
            raise ModsarError(
                f"checkpoint folder '{where}' holds no {CHECKPOINT_FILE}{hint}; pass a .pt written by "
                "modsar train, or a search row's checkpoint folder"
            )
        yield path / CHECKPOINT_FILE if path.is_dir() else path
        return
    try:
        fs, path = pafs.FileSystem.from_uri(where)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as error:
        raise ModsarError(
            f"checkpoint '{where}': {str(error).splitlines()[0]}; pass a local path or a URI pyarrow "
            "can open (file://, s3://, gs://, hdfs://)"
        ) from None
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
