"""Prepared datasets on disk: ``<root>/<name>/{interactions.parquet, items.parquet, manifest.json}``.

The root is ``--data-dir``, else ``$MODSAR_DATA``, else ``~/.cache/modsar/datasets``. A dataset is prepared
once and reused: preparing again with the same sources (by hash) and options is a no-op. Files are written
under temporary names in a staging folder and renamed into place, so a failure never leaves a half dataset.
"""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from modsar.data import synthetic
from modsar.data.importers import Detection, Interactions, read_interactions, resolve_format
from modsar.data.prepare import MIN_ITEMS, PreparedLog, PrepareOptions, prepare_log, statistics
from modsar.data.registry import DEFAULT_MAX_LEN, DatasetSpec, get_spec, is_generated
from modsar.data.split import LeaveOneOut
from modsar.errors import ModsarError
from modsar.limits import SIZE_LIMITS
from modsar.outputs import (
    atomic_write,
    check_name,
    ensure_writable_dir,
    is_uri,
    to_json,
    write_error,
    writer_lock,
)
from modsar.version import __version__


def data_root(override: str | Path | None = None) -> Path:
    """The prepared-datasets folder: `override` (--data-dir), else $MODSAR_DATA, else the cache. A URI is
    refused in one line naming where it came from, shown redacted: datasets are read and written as local
    files (a shared mount on a cluster), and a URI taken as a path would make a folder of its password."""
    from modsar.outputs import redact

    given = str(override) if override else os.environ.get("MODSAR_DATA")
    if given and is_uri(given):
        raise ModsarError(
            f"{'--data-dir' if override else '$MODSAR_DATA'} {redact(given)}: a data folder is a local path "
            "(a shared mount on a cluster), not a URI; name a folder"
        )
    return Path(given).expanduser() if given else Path.home() / ".cache" / "modsar" / "datasets"


@dataclass
class StoredDataset:
    """A prepared dataset as loaded from disk: chronological log with dense ids plus its manifest."""

    name: str
    user: np.ndarray  # int32, sorted ascending, 1..U
    item: np.ndarray  # int32, 1..N
    num_users: int
    num_items: int
    manifest: dict
    timestamp: np.ndarray | None = None  # float64 seconds per interaction, where the source had them

    @property
    def default_max_len(self) -> int:
        """The history window the dataset was prepared with (its manifest's)."""
        return int(self.manifest.get("max_len") or DEFAULT_MAX_LEN)


def window(max_len: int, dataset_max_len: int | None) -> int:
    """The history window a run reads: its data.max_len, or (0) the dataset's own: one answer for the
    trainer, the cost estimate and the space check."""
    return max_len or int(dataset_max_len or DEFAULT_MAX_LEN)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _manifest_path(root: Path, name: str) -> Path:
    return root / name / "manifest.json"


def read_manifest(name: str, root: Path) -> dict | None:
    path = _manifest_path(root, name)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        raise ModsarError(
            f"manifest '{path}' is corrupt; move the folder {root / name} away, then run "
            f"'modsar data prepare {name}' again"
        ) from None


def _checksum_problem(spec: DatasetSpec, path: Path) -> str | None:
    """None when `path` matches the registry checksum (or none is published); else what differs."""
    if spec.sha256:
        actual, expected = file_sha256(path), spec.sha256
    elif spec.md5:
        actual, expected = _md5(path), spec.md5
    else:
        return None
    return None if actual == expected else f"expected {expected}, got {actual}"


def download(spec: DatasetSpec, root: Path, url: str | None = None) -> Path:
    """Fetch the registry file (or `url`, a mirror) into ``<root>/_downloads`` and verify its checksum."""
    url = url or spec.url
    if not url:
        raise ModsarError(f"'{spec.name}' has no download source; {spec.description}")
    folder = root / "_downloads" / spec.name
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / url.rstrip("/").split("/")[-1]
    if not target.is_file() or _checksum_problem(spec, target):
        with atomic_write(target) as tmp:  # a failed or mismatched download leaves nothing behind
            try:
                with open(tmp, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
                    shutil.copyfileobj(response, out)
            except (urllib.error.URLError, OSError) as exc:
                if not isinstance(exc, urllib.error.URLError) and (full := write_error(target, exc)):
                    raise full from None  # the disk, not the network: say so
                raise ModsarError(
                    f"download of '{spec.name}' from {url} failed: {exc}; check the network, or "
                    "download it yourself and pass --source PATH"
                ) from None
            problem = _checksum_problem(spec, Path(tmp))
            if problem:
                raise ModsarError(
                    f"checksum mismatch for '{spec.name}' from {url}: {problem}; the file was discarded"
                )
    if spec.member:
        extracted = folder / Path(spec.member).name
        if not extracted.is_file():
            with (
                zipfile.ZipFile(target) as archive,
                archive.open(spec.member) as src,
                atomic_write(extracted) as tmp,
                open(tmp, "wb") as out,
            ):
                shutil.copyfileobj(src, out)
        return extracted
    return target


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def prepare_dataset(
    name: str,
    sources: list[str | Path] | None = None,
    fmt: str = "auto",
    options: PrepareOptions | None = None,
    root: str | Path | None = None,
    max_len: int | None = None,
    download_missing: bool = False,
    url: str | None = None,
    force: bool = False,
    spec: DatasetSpec | None = None,
    wait: bool = False,
    announce: Callable[[str], None] | None = None,
) -> tuple[dict, bool]:
    """Import + prepare `name` and store it. Returns (manifest, reused_existing).

    For a registry name the usual preprocessing and max length apply unless `options`/`max_len` are given.
    The format is `fmt` where given; else the registry's for its own download, and for any other file
    (`sources`) the one detected from that file's content, the registry's format only breaking a tie
    (detect_format); once the dataset is stored (or reused), `announce` is given "read FILE as FORMAT
    (WHY)" for each file, so that no format is chosen unseen. One process prepares a name at a time (an OS
    lock beside the dataset's folder): another is refused in one line, or with `wait` (a generated dataset
    made on first use) waits and then finds it prepared.
    """
    name = check_name(name, "dataset name")
    _check_max_len(max_len)
    root = data_root(root)
    ensure_writable_dir(root, "the data folder")  # before a source is read: nothing could be stored
    with writer_lock(root, name, f"dataset '{name}' in {root}", wait=wait):
        return _prepare_locked(
            name, sources, fmt, options, root, max_len, download_missing, url, force, spec, announce
        )


def _prepare_locked(
    name: str,
    sources: list[str | Path] | None,
    fmt: str,
    options: PrepareOptions | None,
    root: Path,
    max_len: int | None,
    download_missing: bool,
    url: str | None,
    force: bool,
    spec: DatasetSpec | None,
    announce: Callable[[str], None] | None = None,
) -> tuple[dict, bool]:
    """prepare_dataset's work, while this process holds the dataset's lock: whatever it finds stored (a
    manifest, a killed prepare's staging folder) no other live process is writing."""
    remove_stale_staging(root, name)  # what a killed prepare of this name left behind
    _refuse_foreign_folder(root, name)  # before any source is read: nothing of the user's is replaced
    spec = spec or get_spec(name)
    generated = is_generated(name) and not sources
    given = fmt
    spec, options, max_len, fmt = _registry_defaults(name, spec, sources, options, max_len, fmt)
    detected: list[Detection] = []
    if generated:
        paths: list[Path] = []
        source_facts, formats = [synthetic.GENERATORS[name].facts()], ["synthetic"]
    else:
        paths = _source_paths(name, spec, sources, root, download_missing, url)
        detected = _formats(name, paths, given, fmt, spec)
        formats = [d.format for d in detected]
        source_facts = [{"path": str(p.resolve()), "sha256": file_sha256(p)} for p in paths]
        _refuse_repeated_sources(paths, source_facts)
    max_len = max_len or DEFAULT_MAX_LEN
    existing = read_manifest(name, root)
    request = {
        "sources": [{k: v for k, v in s.items() if k != "path"} for s in source_facts],
        "options": options.to_dict(),
        "max_len": max_len,
        "format": fmt,
    }
    if existing is not None and not force and not _stale_generated(name, existing):
        if _same_preparation(existing, request, formats):
            _announce(announce, paths, detected)
            return existing, True
        raise ModsarError(
            f"dataset '{name}' already exists in {root} with other sources or options; "
            "pass --force to replace it, or choose another name"
        )
    raw = _raw_interactions(name, generated, paths, detected, options.drop_timestamps)
    where = ", ".join(str(s.get("path", f"the '{name}' generator")) for s in source_facts)
    _refuse_unrated(name, spec, options, raw, where, formats)
    log = prepare_log(raw, options, source=where)
    stats = _trainable_statistics(log, where)
    manifest = _manifest(name, source_facts, formats, options, max_len, stats, len(raw), request, log)
    if generated and options == PrepareOptions():  # filtering would break the planted structure's optimum
        generator = synthetic.GENERATORS[name]
        manifest["optimum"] = synthetic.optimum(generator.model(**generator.options), log)
    _write(root, name, log, manifest)
    _announce(announce, paths, detected)
    return manifest, False


def _refuse_foreign_folder(root: Path, name: str) -> None:
    """`<root>/<name>` is replaced only when it is absent, an empty folder, or a prepared dataset (a folder
    with a readable manifest.json): anything else there (a folder of the user's own files, a file, a link)
    is refused in one line, with or without --force, and left as it is."""
    final = root / name
    if final.is_symlink():
        what = "a symbolic link"
    elif not final.exists():
        return
    elif not final.is_dir():
        what = "a file, not a dataset folder"
    elif not any(final.iterdir()):
        return
    elif not _manifest_path(root, name).is_file():
        what = "a folder with no manifest.json, not a prepared dataset"
    elif _readable_manifest(root, name) is None:
        what = "a folder whose manifest.json cannot be read"
    else:
        return
    raise ModsarError(
        f"{final} is {what}; it is left as it is (--force replaces only a prepared dataset): "
        f"choose another dataset name, or move it out of {root}"
    )


def _readable_manifest(root: Path, name: str) -> dict | None:
    """The manifest.json in `<root>/<name>` when it reads as a JSON object, else None."""
    try:
        manifest = json.loads(_manifest_path(root, name).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _formats(name: str, paths: list[Path], given: str, fmt: str, spec: DatasetSpec | None) -> list[Detection]:
    """The format each file is read in, and why: `fmt` where given (--format, or the registry's for its own
    download, `given` being 'auto'), else detected from the file's content. A user's file under a registry
    name is read in the format it is in (SASRec's pairs for ml-1m, say); the registry's breaks a tie."""
    detected = [resolve_format(p, fmt, spec.format if spec is not None else None) for p in paths]
    if given == "auto" and fmt != "auto":  # the registry's own file, in the registry's format
        detected = [Detection(d.format, f"the registry's format of {name}") for d in detected]
    return detected


def _announce(announce: Callable[[str], None] | None, paths: list[Path], detected: list[Detection]) -> None:
    """Say which format each file was read in and why (a detected format is never used unseen)."""
    for path, found in zip(paths, detected, strict=True):
        if announce is not None:
            announce(f"read {path} as {found.format} ({found.why})")


def _check_max_len(max_len: int | None) -> None:
    """A stated history length must be one a model can use: refused before anything is read or written."""
    limit = SIZE_LIMITS["data.max_len"]
    if max_len is not None and not 1 <= max_len <= limit:
        raise ModsarError(
            f"--max-len must be between 1 and {limit:,} (the history items a model sees); got {max_len}"
        )


def _registry_defaults(
    name: str,
    spec: DatasetSpec | None,
    sources: list[str | Path] | None,
    options: PrepareOptions | None,
    max_len: int | None,
    fmt: str,
) -> tuple[DatasetSpec | None, PrepareOptions, int | None, str]:
    """(spec, options, max_len, fmt) with the registry's preprocessing, max length and format filled in where
    not given: a benchmark name promises the benchmark's preparation unless the caller says otherwise."""
    if is_generated(name) and sources:  # a generator's name, but the user's own file: no generator defaults
        spec = None
    if spec is not None:
        options = options or PrepareOptions(**spec.options())
        max_len = max_len or spec.max_len
        if not sources:  # the registry's own file (download) or generator: its format is known
            fmt = spec.format if fmt == "auto" else fmt
    return spec, options or PrepareOptions(), max_len, fmt


def _source_paths(
    name: str,
    spec: DatasetSpec | None,
    sources: list[str | Path] | None,
    root: Path,
    download_missing: bool,
    url: str | None,
) -> list[Path]:
    """The files to read: the given ones, else the registry's download (only when asked for); each must
    exist, so a typo fails before anything is hashed or read."""
    if not sources:
        if spec is None:
            raise ModsarError(f"'{name}' is not a known benchmark, so it needs --source PATH")
        if not download_missing:
            raise ModsarError(
                f"no --source given for '{name}'; pass --source PATH to a local copy, or "
                f"--download to fetch it from {spec.url or 'its source'}"
            )
        sources = [download(spec, root, url)]
    paths = [Path(s).expanduser() for s in sources]
    for path in paths:
        if path.is_dir():
            raise ModsarError(f"--source {path} is a folder; pass the log file in it")
        if not path.is_file():
            raise ModsarError(f"source file '{path}' does not exist")
    return paths


def _refuse_repeated_sources(paths: list[Path], facts: list[dict]) -> None:
    """Two --source files of the same content (one file given twice, or a copy) would count every
    interaction twice: refused, naming both."""
    seen: dict[str, Path] = {}
    for path, fact in zip(paths, facts, strict=True):
        if fact["sha256"] in seen:
            raise ModsarError(
                f"--source {path} holds the same bytes as --source {seen[fact['sha256']]}: joined, every "
                "interaction would count twice; pass each file once"
            )
        seen[fact["sha256"]] = path


def _raw_interactions(
    name: str, generated: bool, paths: list[Path], detected: list[Detection], drop_timestamps: bool = False
) -> Interactions:
    """The log before any filtering: the generator's output, or the files read and joined into one. A file's
    error says the format it was read in; files with and without timestamps are joined only when
    `drop_timestamps` says so: else the timestamps would be dropped unseen and every history ordered by its
    lines."""
    if generated:
        return synthetic.GENERATORS[name].generate(**synthetic.GENERATORS[name].options)
    formats = [d.format for d in detected]
    if "sessions" in formats and len(set(formats)) > 1:
        raise ModsarError(
            f"--source {paths[formats.index('sessions')]} is read as sessions and "
            f"{paths[next(i for i, f in enumerate(formats) if f != 'sessions')]} is not: session numbers "
            "would merge with user ids; prepare them apart, or pass --format for both"
        )
    parts = []
    for path, found in zip(paths, detected, strict=True):
        try:
            parts.append(read_interactions(path, found.format)[0])
        except ModsarError as error:
            if found.why == "--format":
                raise
            raise ModsarError(f"{error} (read as {found.format}: {found.why})") from None
    timed = [part.timestamp is not None for part in parts]
    if len(set(timed)) > 1 and not drop_timestamps:
        raise ModsarError(
            f"--source {paths[timed.index(True)]} has timestamps and {paths[timed.index(False)]} has "
            "none: joined, the times would be dropped and every history ordered by file lines; "
            "prepare them apart, or pass --drop-timestamps to order all of them by their lines "
            "(recorded in the manifest)"
        )
    if drop_timestamps:
        parts = [Interactions(p.user, p.item, None, p.rating) for p in parts]
    raw = Interactions.concat(parts) if len(parts) > 1 else parts[0]
    if "sessions" in formats and len(parts) > 1:  # session ids restart per file: make them distinct
        offset, users = 0, []
        for part in parts:
            users.append(part.user + offset)
            offset += int(part.user.max())
        raw.user = np.concatenate(users)
    return raw


def _refuse_unrated(
    name: str,
    spec: DatasetSpec | None,
    options: PrepareOptions,
    raw: Interactions,
    where: str,
    formats: list[str],
) -> None:
    """A benchmark's rating filter on a file without ratings is refused rather than skipped.

    A benchmark name promises the benchmark's preprocessing, and a file without ratings (say SASRec's pairs)
    cannot say which rows the filter would have dropped; skipping it would store another dataset under the
    benchmark's name, compared with papers as if it were theirs."""
    if (
        spec is not None
        and options.min_rating is not None
        and options.min_rating == spec.min_rating
        and raw.rating is None
    ):
        raise ModsarError(
            f"'{name}' keeps only ratings >= {spec.min_rating:g} (its registry preprocessing), but "
            f"{where} ({', '.join(dict.fromkeys(formats))}) has no rating column; pass a file with "
            "ratings (or --download), or prepare this file under a name of your own, which has "
            "no rating filter"
        )


def _trainable_statistics(log: PreparedLog, where: str) -> dict:
    """The prepared log's statistics, once it is known to leave leave-one-out something to validate, test
    and train on: a dataset that cannot be trained is refused before it is stored."""
    stats = statistics(log.user, log.num_users, log.num_items)
    if stats["items"] < MIN_ITEMS:
        raise ModsarError(
            f"{where}: only {stats['items']} item after preparation (raw id {log.raw_items[0]}): every "
            "ranking puts it first, so every metric would be 1.0; the data needs 2+ items (lower "
            "--min-item-count / --min-rating if filtering removed them)"
        )
    if not stats["evaluable_users"]:
        who = f"{stats['users']:,} user{'s' * (stats['users'] != 1)}"
        raise ModsarError(
            f"{where}: no user has 3+ interactions after preparation ({who}, longest "
            f"history {stats['max_length']}), so leave-one-out has nothing to validate or "
            "test; the data needs users with 3+ interactions (lower --min-user-count / "
            "--min-item-count / --min-rating if filtering removed them)"
        )
    split = LeaveOneOut.from_log(log.user, log.item, log.num_users, log.num_items)
    if not (split.train_ends - split.starts >= 2).any():  # a training row needs an input and a label
        raise ModsarError(
            f"{where}: no user has 2 training items (an input and its label) once the last two "
            "items of each user are held out for validation and test, so there is nothing to "
            "train on; the data needs some users with 4+ interactions"
        )
    return stats


def _manifest(
    name: str,
    source_facts: list[dict],
    formats: list[str],
    options: PrepareOptions,
    max_len: int,
    stats: dict,
    raw_interactions: int,
    request: dict,
    log: PreparedLog,
) -> dict:
    """What manifest.json records of a preparation: where it came from (each source with the format it was
    read in), how, and what it holds; `request` is what a later prepare of the same name is compared with
    (_same_preparation)."""
    for fact, used in zip(source_facts, formats, strict=True):
        fact["format"] = used
    return {
        "name": name,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "modsar_version": __version__,
        "sources": source_facts,
        "options": options.to_dict(),
        "max_len": max_len,
        "statistics": stats,
        "raw_interactions": raw_interactions,
        "request": request,
        "has_timestamp": log.timestamp is not None,
    }


def _same_preparation(existing: dict, request: dict, formats: list[str]) -> bool:
    """Whether a stored dataset came from the same files, options and max length, read in the same formats.
    Whether a format was named (--format) or detected does not matter, only the format each file was read in
    (recorded per source); a manifest without those compares the requested format."""
    old = existing.get("request") or {}
    if {k: v for k, v in old.items() if k != "format"} != {k: v for k, v in request.items() if k != "format"}:
        return False
    used = [s.get("format") for s in existing.get("sources", [])]
    return used == formats if used and all(used) else old.get("format") == request.get("format")


def evaluation_warning(statistics: dict) -> str | None:
    """A warning when most users (> 50%) cannot be evaluated: their metrics would rest on a minority."""
    evaluable, users = statistics.get("evaluable_users"), statistics["users"]
    if evaluable is None or not users or (users - evaluable) / users <= 0.5:
        return None
    lost = users - evaluable
    return (
        f"{lost:,} of {users:,} users ({lost / users:.1%}) have fewer than 3 interactions and cannot be "
        f"evaluated (leave-one-out); validation and test rest on the other {evaluable:,}"
    )


STALE_STAGING_S = 6 * 3600  # a staging folder this old is left over, whoever made it (writing takes minutes)
_TEMP_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_")  # tempfile.mkdtemp's random suffix (8 of them)


def _temp_folder(root: Path, prefix: str) -> Path:
    """A new hidden folder `<prefix><8 random>` under root that records its owner (host, process) for
    remove_stale_staging. Its mode follows the umask, as a folder mkdir makes: mkdtemp's 0700 would become
    the dataset folder's, unreadable to the other users of a shared data folder."""
    folder = Path(tempfile.mkdtemp(dir=root, prefix=prefix))
    try:
        folder.chmod(0o777 & ~_umask())
        (folder / ".owner").write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
    except OSError:  # a full disk: no empty folder left behind
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def _owner_gone(folder: Path) -> bool:
    """Whether the process that made `folder` has ended: known only for one on this host that recorded
    itself."""
    try:
        owner = json.loads((folder / ".owner").read_text())
        if owner["host"] != socket.gethostname():
            return False
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError, KeyError, TypeError):  # no owner file (older versions), or unreadable
        return False
    return False


def remove_stale_staging(root: Path, name: str) -> list[Path]:
    """Delete the staging (and replaced-copy) folders of `name` that a killed `data prepare` left under root:
    those whose owner process on this host is gone, and any older than STALE_STAGING_S (another host's, or one
    from a version that recorded no owner). A live prepare's folder is kept. Returns what was removed."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for prefix in (f".staging-{name}-", f".old-{name}-"):
        for folder in root.glob(f"{glob.escape(prefix)}*"):
            suffix = folder.name[len(prefix) :]  # exactly mkdtemp's 8 characters: not another dataset's
            if (
                len(suffix) != 8
                or not set(suffix) <= _TEMP_CHARS
                or not folder.is_dir()
                or folder.is_symlink()
            ):
                continue
            try:
                old = time.time() - folder.stat().st_mtime > STALE_STAGING_S
            except OSError:
                continue
            if old or _owner_gone(folder):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


def _umask() -> int:
    """This process's umask, read without changing it where Linux shows it (os.umask can only set it, and
    setting it for a moment races other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write(root: Path, name: str, log: PreparedLog, manifest: dict) -> None:
    """Store the dataset whole or not at all: a full disk or read-only folder is one line, with the staging
    folder (and any earlier copy of the dataset) as they were."""
    try:
        _write_staged(root, name, log, manifest)
    except OSError as exc:
        raise write_error(root / name, exc) or exc from None


def _write_staged(root: Path, name: str, log: PreparedLog, manifest: dict) -> None:
    root.mkdir(parents=True, exist_ok=True)
    staging = _temp_folder(root, f".staging-{name}-")
    try:
        columns = {"user": pa.array(log.user), "item": pa.array(log.item)}
        if log.timestamp is not None:
            columns["timestamp"] = pa.array(log.timestamp)
        pq.write_table(pa.table(columns), staging / "interactions.parquet")
        raw_items = log.raw_items.astype(str) if log.raw_items.dtype.kind in "OUS" else log.raw_items
        pq.write_table(
            pa.table(
                {
                    "item": pa.array(np.arange(1, log.num_items + 1, dtype=np.int32)),
                    "raw_id": pa.array(raw_items),
                }
            ),
            staging / "items.parquet",
        )
        (staging / "manifest.json").write_text(to_json(manifest) + "\n")
        (staging / ".owner").unlink()  # the dataset's folder holds its files only
        final = root / name
        _refuse_foreign_folder(root, name)  # checked again: replaced only while it is still a dataset
        if final.exists():
            trash = _temp_folder(root, f".old-{name}-")
            os.replace(final, trash / name)
            try:
                os.replace(staging, final)
            except OSError:
                os.replace(trash / name, final)  # the earlier copy stays the dataset
                raise
            finally:
                shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _stale_generated(name: str, manifest: dict | None) -> bool:
    """A generated dataset whose stored copy came from other generator options or code: regenerate it."""
    if manifest is None or not is_generated(name):
        return False
    sources = manifest.get("sources", [])
    return (
        bool(sources)
        and "generator" in sources[0]
        and sources[0] != {**synthetic.GENERATORS[name].facts(), "format": "synthetic"}
    )


def load_dataset(name: str, root: str | Path | None = None) -> StoredDataset:
    """Load a prepared dataset; built-in generated ones are generated on first use (and when stale): a
    process that finds another generating it waits for it (the stale copy is regenerated unforced, so the
    second of two finds the first's fresh one)."""
    name = check_name(name, "dataset")
    root = data_root(root)
    manifest = read_manifest(name, root)
    if manifest is not None and _stale_generated(
        name, manifest
    ):  # keep the user's preparation options, refresh the data
        manifest, _ = prepare_dataset(
            name,
            options=PrepareOptions(**manifest["options"]),
            root=root,
            max_len=manifest["max_len"],
            wait=True,
        )
    if manifest is None:
        if is_generated(name):
            manifest, _ = prepare_dataset(name, root=root, wait=True)
        else:
            hint = f"modsar data prepare {name} --source PATH"
            if get_spec(name) is not None:
                hint += " (or --download)"
            raise ModsarError(
                f"dataset '{name}' is not prepared in {root}; run '{hint}' (see 'modsar data list')"
            )
    table = pq.read_table(root / name / "interactions.parquet")
    stats = manifest["statistics"]
    timestamp = table.column("timestamp").to_numpy() if "timestamp" in table.column_names else None
    return StoredDataset(
        name,
        table.column("user").to_numpy(),
        table.column("item").to_numpy(),
        stats["users"],
        stats["items"],
        manifest,
        timestamp,
    )


def list_prepared(root: str | Path | None = None) -> list[dict]:
    root = data_root(root)
    if not root.is_dir():
        return []
    found = []
    for child in sorted(root.iterdir()):
        listed = (
            child.is_dir()
            and not child.name.startswith((".", "_"))
            and _is_name(child.name)
            and (child / "manifest.json").is_file()
        )
        if listed and (manifest := read_manifest(child.name, root)) is not None:
            found.append(manifest)
    return found


def _is_name(name: str) -> bool:
    """Whether a folder's name is a dataset name (a folder a user made by hand, say, may not be)."""
    try:
        check_name(name, "dataset")
    except ModsarError:
        return False
    return True


def _source_hash(source: dict) -> str:
    """A source file's SHA-256; for generated data, a hash of the generator's facts (name, options, version),
    so rows of two generator versions never pass for the same data."""
    if "sha256" in source:
        return source["sha256"]
    facts = json.dumps({k: v for k, v in source.items() if k != "path"}, sort_keys=True)
    return "generated:" + hashlib.sha256(facts.encode()).hexdigest()[:16]


def dataset_identity(manifest: dict) -> dict[str, str | None]:
    """What tells one preparation of a dataset from another: the sources' SHA-256 and the preprocessing
    options. Rows record it (dataset_sha256, dataset_preprocessing) and checkpoints too, so a checkpoint is
    never scored on a dataset prepared otherwise under the same name (modsar evaluate)."""
    return {
        "dataset_preprocessing": json.dumps(manifest.get("options")) if manifest else None,
        "dataset_sha256": ",".join(map(_source_hash, manifest.get("sources", []))) or None,
    }
