"""Trial results as Parquet: one file per trial under ``<root>/<experiment>/trials/``.

Each file is written under a temporary name and renamed, so a crash never leaves a half file and
concurrent trials never share a writer. `root` may be a local path or a pyarrow filesystem URI.
Columns: run facts, every config value under its dotted name, ``valid.<metric>`` / ``test.<metric>``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import reprlib
import socket
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from modsar.config import Config
from modsar.data.store import dataset_identity
from modsar.devices import cpu_identity
from modsar.errors import ModsarError
from modsar.outputs import PARTIAL_PREFIX, atomic_write, check_name, is_uri, name_problem, redact

# diverged: NaN/inf loss, weights or metrics; paused: a search trial waiting at a rung of successive halving
# when its row was written (sweep.rows: rewritten when it ends)
STATUSES = ("finished", "stopped", "diverged", "error", "paused")
ROW_KIND = (b"modsar.kind", b"trial-row")  # schema metadata of every row file: `read_rows` takes nothing else
# The columns that make an unmarked (older) file a row: every column `modsar results`, `modsar report` and
# `modsar analyze --experiment` read from any row, all of which rows written by modsar 0.2.0 always carry
# (result_row: run facts and every config key).
ROW_KEYS = (
    "experiment",
    "trial_id",
    "status",
    "role",
    "selected",
    "dataset",
    "space",
    "task",
    "seed",
    "model.backbone",
    "train.monitor",
)


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("modsar", "torch", "numpy", "pyarrow", "ray", "transformers"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def result_row(
    cfg: Config,
    *,
    experiment: str,
    trial_id: str,
    status: str,
    valid: dict | None = None,
    test: dict | None = None,
    facts: dict | None = None,
    error: str | None = None,
    space: str | None = None,
    dataset_manifest: dict | None = None,
) -> dict[str, Any]:
    """One flat row: run facts, config (dotted names), ``valid.*`` and ``test.*`` metrics."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    manifest = dataset_manifest or {}
    row: dict[str, Any] = {
        "experiment": experiment,
        "trial_id": trial_id,
        "space": space,
        "status": status,
        "error": error,
        "selected": False,
        "role": "search" if space else "train",
        **dataset_identity(manifest),
        # generated datasets: the expected test metrics of the Bayes-optimal ranking (full, unfiltered)
        "dataset_optimum": json.dumps(manifest["optimum"]["test"]) if manifest.get("optimum") else None,
        "backbone": cfg.model.backbone,
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "cpu": cpu_identity(),
        "versions": json.dumps(package_versions()),
    }
    for key, value in cfg.flat().items():
        row[key] = json.dumps(value) if isinstance(value, list) else value
    row.update(facts or {})
    row.update({f"valid.{k}": v for k, v in (valid or {}).items()})
    row.update({f"test.{k}": v for k, v in (test or {}).items()})
    return row


PROTOCOL_FACTS = ("valid_targets", "test_targets", "split_valid_cut", "split_test_cut")  # train.split_facts
SPEED_FACTS = ("epoch_gflop", "output_gflop", "gflops", "mfu")  # TrialResult fields (modsar.training.flops)
# TrialResult fields: optimizer steps, and the most-popular ranking's validation value with the steps at which
# the run first cleared it (train.PLATEAU_FACTOR; None: it never left that level)
PROGRESS_FACTS = ("steps", "passes", "steps_per_epoch", "popularity_level", "escape_steps")
# TrialResult fields: where a run's time goes besides its epochs and validation passes (summed over a resumed
# run's processes, as its wall_time_s is)
TIME_FACTS = ("setup_s", "checkpoint_s")


def trial_facts(result) -> dict[str, Any]:
    """Run facts of a train.TrialResult, as row columns."""
    return {
        "best_epoch": result.best_epoch,
        "epochs_run": result.epochs_run,
        "wall_time_s": result.wall_time_s,
        "epoch_time_s": result.epoch_time_s,
        "eval_time_s": result.eval_time_s,
        "device": result.device,
        "num_parameters": result.num_parameters,
        "checkpoint": result.checkpoint,
        **{k: getattr(result, k) for k in (*SPEED_FACTS, *PROGRESS_FACTS, *TIME_FACTS)},
        **result.protocol,
        **{f"generate.{k}": v for k, v in result.generation.items()},
        "curve": json.dumps([[h["epoch"], h[f"valid.{result.monitor}"]] for h in result.history]),
        "curve_steps": json.dumps([[h["epoch"], h["steps"]] for h in result.history if "steps" in h]),
    }


# config keys that say where a run ran, not what it trained: a seed re-run given a GPU is still a replica
PLACEMENT_KEYS = ("seed", "train.device", "train.threads")


def differing_keys(rows) -> list[str]:
    """Config keys (dotted names, a plugin backbone's own section's too) on which the rows of a DataFrame
    disagree, the seed and the run's placement aside: rows are replicas of one configuration when this is
    empty."""
    from modsar.config import SECTIONS

    sections = tuple(f"model.{name}." for name in SECTIONS)
    keys = [k for k in Config().flat() if k in rows and k not in PLACEMENT_KEYS]
    keys += [k for k in rows.columns if isinstance(k, str) and k.startswith(sections)]
    return [k for k in keys if rows[k].astype(str).nunique() > 1]


def replicas_differ_from(selected: pd.DataFrame, replicas: pd.DataFrame) -> list[str]:
    """Config keys on which seed re-runs differ from their selected trial (or from each other). A re-run
    stops where ASHA's last rung stopped its search trial, through train.max_steps, while the trial's own row
    says 0 or a larger budget (Tune stopped it, not its config): that smaller budget on the re-runs is the
    same configuration, given the same budget, where it let them train as far as the trial did."""
    budget = "train.max_steps"
    given = pd.to_numeric(replicas.get(budget), errors="coerce")
    if budget in selected and given is not None and given.nunique(dropna=False) == 1 and given.notna().all():
        steps = int(given.iloc[0])
        own = pd.to_numeric(selected[budget], errors="coerce").fillna(0).iloc[0]  # 0: none
        if (own == 0 or own > steps) and _lets_it_finish(selected.iloc[0], steps):  # a larger one unreached
            selected = selected.assign(**{budget: steps})
    return differing_keys(pd.concat([selected, replicas]))


def _lets_it_finish(row: pd.Series, budget: int) -> bool:
    """Whether re-runs given `budget` steps could train as far as the selected trial did: at least its steps,
    less one validation pass (token batches vary by a step or two an epoch). Rows without the step counts
    (written before they were recorded) cannot tell, and are taken as they are."""
    trained = pd.to_numeric(row.get("steps"), errors="coerce")
    per_epoch = pd.to_numeric(row.get("steps_per_epoch"), errors="coerce")
    if pd.isna(trained) or pd.isna(per_epoch):
        return True
    return budget >= trained - per_epoch * float(row.get("train.eval_every") or 1)


URI_ADVICE = (
    "name a local folder, or a URI of a filesystem pyarrow supports, installed and reachable from here "
    "(s3://bucket/path, gs://bucket/path, hdfs://host:port/path, file:///absolute/path), its credentials "
    "in the environment"
)


def filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) for a local path (made absolute) or a pyarrow URI (s3://, gs://, ...). A URI no
    filesystem opens (an unknown scheme, no bucket, an unreachable host, a missing client library) is one
    ModsarError that shows it redacted (outputs.redact), never pyarrow's traceback."""
    if not is_uri(root):
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(root))
    if not root.partition("://")[2].strip("/"):  # s3:// alone would list every bucket of the account
        raise ModsarError(
            f"cannot open the results root {redact(root)}: it names no bucket or folder; {URI_ADVICE}"
        )
    try:
        return _from_uri(root)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise root_error(root, exc, "open") from None


def root_error(root: str, exc: BaseException, verb: str = "read") -> ModsarError:
    """The one line a results root that pyarrow could not open or read becomes: the root (redacted), the
    first line of what the filesystem said, and what to pass instead."""
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return ModsarError(f"cannot {verb} the results root {redact(root)}: {redact(reason)}; {URI_ADVICE}")


def _from_uri(root: str) -> tuple[pafs.FileSystem, str]:
    """pafs.FileSystem.from_uri; for HDFS with what its native client prints meanwhile (a line for each place
    it looked for a Java runtime) held back, and printed only where the filesystem opened."""
    if root.partition("://")[0].lower() not in ("hdfs", "viewfs"):
        return pafs.FileSystem.from_uri(root)
    with tempfile.TemporaryFile() as held:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            opened = pafs.FileSystem.from_uri(root)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        held.seek(0)
        sys.stderr.write(held.read().decode(errors="replace"))
    return opened


def write_row(root: str, row: dict[str, Any]) -> str:
    """Write one trial row atomically; returns the final path. A float NaN is written as missing: a row read
    with pandas holds NaN for a text column another row fills, and written back as a number it would clash
    with that column's text in every other row (read_rows would skip it); missing joins any type."""
    fs, base = filesystem(root)
    folder = f"{base}/{row['experiment']}/trials"
    final = f"{folder}/{row['trial_id']}.parquet"
    plain = {
        k: (None if isinstance(v, (float, np.floating)) and math.isnan(v) else v) for k, v in row.items()
    }
    table = pa.Table.from_pylist([plain]).replace_schema_metadata(dict([ROW_KIND]))
    with atomic_write(final, fs) as tmp, fs.open_output_stream(tmp) as out:
        pq.write_table(table, out)
    return final


def remove_partial_rows(root: str, experiment: str) -> int:
    """Delete the temporary files of row writes a killed driver never finished; returns how many.

    Only safe while no other writer is active: `modsar search --resume` calls it before its Tuners start."""
    fs, base = filesystem(root)
    selector = pafs.FileSelector(f"{base}/{experiment}/trials", allow_not_found=True)
    partial = [f.path for f in fs.get_file_info(selector) if f.base_name.startswith(PARTIAL_PREFIX)]
    for path in partial:
        fs.delete_file(path)
    return len(partial)


_WARNED: set[str] = set()  # the skip lines this process has printed


def read_rows(root: str, experiment: str | None = None):
    """All trial rows (a pandas DataFrame) of one experiment, or of every experiment under `root`.

    An experiment is a folder directly under `root`, and its rows are the Parquet files directly in its
    `trials` folder: `results`, `report`, `analyze` and the API all read this one definition, so rows kept
    deeper down (the committed `published/GROUP/<experiment>/` rows under `results/`) never mix with a user's
    own; pass `--results published/GROUP` to read them. A row is a file whose schema carries ROW_KIND, or,
    written before rows were marked, one without a `modsar.kind` that has the ROW_KEYS columns: the rollouts,
    profiles and diagnostics that --out writes under a results root are never rows. A file in a `trials`
    folder that cannot be read (corrupt, truncated, empty), is no row, or has a column whose type clashes with
    the other rows' is named in one warning line on stderr; the other rows count. A report makes folders and
    file names of a row's experiment and dataset, so a tampered row never places a file outside --out: rows
    whose `experiment` is not their folder's name are read as that folder's (one warning per folder: it was
    renamed or copied), and the files in a folder whose name is no name, or whose `dataset` is no name
    (check_name), are skipped (one warning per folder). A root that is a file, or that its filesystem cannot
    reach, is one ModsarError."""
    if experiment is not None:  # a name, never a path: nothing is read outside the root
        experiment = check_name(experiment, "experiment")
    fs, base = filesystem(root)
    _check_root(fs, base, root, experiment)
    try:
        listed = (
            _local_row_files(base, experiment)
            if isinstance(fs, pafs.LocalFileSystem)
            else _remote_row_files(fs, base, experiment)
        )
    except OSError as exc:  # an unreadable folder, a bucket without access
        raise root_error(root, exc) from None
    files = sorted(f for f in listed if f.endswith(".parquet") and not f.rsplit("/", 1)[-1].startswith("."))
    with ThreadPoolExecutor(max_workers=16) as pool:  # an object store answers each file after a round trip
        read = list(pool.map(lambda file: _read_row_file(fs, file), files))
    tables = {file: table for file, table in zip(files, read, strict=True) if isinstance(table, pa.Table)}
    tables, copies = _drop_copies(tables)
    tables, misnamed = _name_rows(tables, isinstance(fs, pafs.LocalFileSystem))
    tables, repeated = _drop_copies(tables)  # a renamed row may repeat a trial of its folder's experiment
    combined, clashes = _combine(tables)
    for problem in [r for r in read if isinstance(r, str)] + copies + misnamed + repeated + clashes:
        if problem not in _WARNED:  # a search reads its rows several times: one warning per file and process
            _WARNED.add(problem)
            print(f"modsar: warning: {problem}", file=sys.stderr)
    return combined.to_pandas() if combined is not None else pd.DataFrame()


def _check_root(fs: pafs.FileSystem, base: str, root: str, experiment: str | None) -> None:
    """Refuse a root, or the trials folder of `experiment`, that is a file, and a root the filesystem cannot
    reach (a bucket that does not exist or refuses access, no network)."""
    try:
        root_type = fs.get_file_info(base).type
        trials_type = fs.get_file_info(f"{base}/{experiment}/trials").type if experiment else None
    except OSError as exc:
        raise root_error(root, exc) from None
    if root_type == pafs.FileType.File:  # a row file given for the folder: not a listing error
        raise ModsarError(
            f"the results root {root} is a file; pass the results folder (the one `modsar train` "
            "or `modsar search` wrote to, which holds <experiment>/trials/)"
        )
    if trials_type == pafs.FileType.File:
        raise ModsarError(
            f"{base}/{experiment}/trials is a file where the trials folder of experiment {experiment!r} "
            "belongs; move it away"
        )


def _name_rows(tables: dict[str, pa.Table], local: bool) -> tuple[dict[str, pa.Table], list[str]]:
    """The row tables with names that may become paths, and the warning lines (one per experiment folder and
    kind) on the others. `modsar report` writes <out>/<experiment>/ and bars_<dataset>_*.png, so:

    - a file whose `experiment` is not its folder's name (nor, on a local disk, the name of the folder a link
      of that name points to: `latest -> exp` reads exp's rows as exp's) is read with the folder's name as its
      experiment when that name is a name (check_name): the folder was renamed or copied;
    - a file in a folder whose name is no name, or whose `dataset` is no name (a missing one is kept: it
      makes no path), is skipped."""
    kept: dict[str, pa.Table] = {}
    renamed: dict[str, tuple[str, list]] = {}  # experiment folder -> (its name, other names its rows hold)
    skipped: dict[str, list[tuple[str, str, str]]] = {}  # experiment folder -> [(file, why, what to do)]
    for file, table in tables.items():
        trials = os.path.dirname(file)
        folder = os.path.dirname(trials)
        name = os.path.basename(folder)
        homes = {name}
        if local:
            homes.add(os.path.basename(os.path.dirname(os.path.realpath(trials))))
        homes = {home for home in homes if name_problem(home) is None}
        foreign = [v for v in _values(table, "experiment") if v not in homes]
        why, fix = _dataset_problem(table), "move such files out of the trials folder"
        if why is None and foreign and name not in homes:
            why, fix = f"the folder's name {_shown_value(name)} {name_problem(name)}", "rename the folder"
        if why is not None:
            skipped.setdefault(folder, []).append((os.path.basename(file), why, fix))
            continue
        if foreign:
            index = table.schema.get_field_index("experiment")
            table = table.set_column(index, "experiment", pa.array([name] * table.num_rows, pa.string()))
            others = renamed.setdefault(folder, (name, []))[1]
            others += [v for v in foreign if v not in others]
        kept[file] = table
    lines = [
        f"rows in {folder} name experiment {_some(others)}: read as {name!r} (the folder was renamed or "
        "copied)"
        for folder, (name, others) in renamed.items()
    ]
    lines += [
        f"skipped {len(files)} row file{'s' * (len(files) > 1)} in {folder}/trials (first {files[0][0]}: "
        f"{files[0][1]}): a report names folders and files after a row's experiment and dataset; "
        f"{files[0][2]}"
        for folder, files in skipped.items()
    ]
    return kept, lines


def _dataset_problem(table: pa.Table) -> str | None:
    """Why a row file's `dataset` may not name a file (check_name), or None when it may."""
    for value in _values(table, "dataset"):
        if value is not None and (problem := name_problem(value)) is not None:
            return f"its dataset {_shown_value(value)} {problem}"
    return None


def _values(table: pa.Table, column: str) -> list:
    """The distinct values of a column of a row table (none where a marked row lacks the column)."""
    return table.column(column).unique().to_pylist() if column in table.column_names else []


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40  # a tampered cell may hold kilobytes: its ends are enough


def _shown_value(value: object) -> str:
    """A cell value in a warning line: its repr, at most 40 characters (the middle of a longer one cut)."""
    return _SHORT.repr(value)


def _some(values: list) -> str:
    """The first value of `values` (shown), and how many others there are."""
    more = len(values) - 1
    return _shown_value(values[0]) + (f" and {more} other{'s' * (more > 1)}" if more else "")


def experiment_folders(root: str) -> list[str]:
    """The names of the experiments under a results root: its folders that hold a `trials` folder."""
    return _experiment_names(*filesystem(root))


def deeper_rows_hint(root: str, depth: int = 3, experiment: str | None = None) -> str:
    """For an error about a root without rows (or without `experiment`): the folders below it (up to `depth`
    levels) that are results roots themselves (that hold `experiment`), as "... pass that as --results" ("" if
    none, or if the root is not a local folder): a user who names a root one level too high is told which."""
    fs, base = filesystem(root)
    if not isinstance(fs, pafs.LocalFileSystem) or not os.path.isdir(base):
        return ""
    found: list[str] = []
    level = [base]
    for _ in range(depth):
        level = [
            os.path.join(folder, name)
            for folder in level
            for name in sorted(os.listdir(folder))
            if os.path.isdir(os.path.join(folder, name)) and name != "trials"
        ]
        found += [
            _shown(f)
            for f in level
            if (experiment in experiment_folders(f) if experiment else experiment_folders(f))
        ]
        if found or len(level) > 1000:
            break
    if not found:
        return ""
    if experiment:
        return f"; {', '.join(found[:3])} hold{'s' if len(found) == 1 else ''} it: pass that as --results"
    listed = ", ".join(found[:3]) + (" ..." if len(found) > 3 else "")
    return (
        f" (experiments are the folders directly under it; {listed} "
        f"hold{'s' if len(found) == 1 else ''} some: pass that as --results)"
    )


def _shown(path: str) -> str:
    """A path as a user would type it: relative to the working folder when it lies below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _experiment_names(fs: pafs.FileSystem, base: str) -> list[str]:
    """`experiment_folders` of a root already resolved to (filesystem, path)."""
    if isinstance(fs, pafs.LocalFileSystem):
        if not os.path.isdir(base):
            return []
        return sorted(n for n in os.listdir(base) if os.path.isdir(os.path.join(base, n, "trials")))
    children = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    return sorted(
        c.base_name
        for c in children
        if c.type == pafs.FileType.Directory
        and fs.get_file_info(f"{c.path}/trials").type == pafs.FileType.Directory
    )


def _local_row_files(base: str, experiment: str | None) -> list[str]:
    """The files directly in the trials folder of `experiment` (of every experiment when None), each real
    file once: a symlinked experiment folder counts (one kept on another disk), but an alias of one already
    listed (`latest -> exp`) does not list its files again."""
    names = [experiment] if experiment else _experiment_names(pafs.LocalFileSystem(), base)
    seen: set[str] = set()
    found: list[str] = []
    # real folders before aliases, so that a file is listed under its own experiment's name
    for name in sorted(names, key=lambda n: (os.path.islink(os.path.join(base, n)), n)):
        folder = os.path.join(base, name, "trials")
        real = os.path.realpath(folder)
        if real in seen or not os.path.isdir(folder):
            continue
        seen.add(real)
        found += [
            os.path.join(folder, f) for f in os.listdir(folder) if os.path.isfile(os.path.join(folder, f))
        ]
    return found


def _remote_row_files(fs: pafs.FileSystem, base: str, experiment: str | None) -> list[str]:
    """As `_local_row_files`, on a pyarrow filesystem (no symlinks there)."""
    names = [experiment] if experiment else _experiment_names(fs, base)
    found: list[str] = []
    for name in names:
        selector = pafs.FileSelector(f"{base}/{name}/trials", allow_not_found=True)
        found += [f.path for f in fs.get_file_info(selector) if f.type == pafs.FileType.File]
    return found


def _drop_copies(tables: dict[str, pa.Table]) -> tuple[dict[str, pa.Table], list[str]]:
    """One file per (experiment, trial_id), and a warning line for each other file that holds the same trial
    (a backup copy of an experiment folder): the file where `write_row` puts that row is kept, else the first
    by name."""
    by_trial: dict[tuple, list[str]] = {}
    for file, table in tables.items():
        first = table.slice(0, 1).to_pylist()[0]
        key = (first["experiment"], first["trial_id"])
        by_trial.setdefault(key if None not in key else (file, None), []).append(file)
    skip: set[str] = set()
    pairs: dict[tuple[str, str, str], list[str]] = {}  # (kept, copy, experiment) -> trial ids: a line each
    for (experiment, trial_id), files in by_trial.items():
        home = f"/{experiment}/trials/{trial_id}.parquet"
        kept = next((f for f in files if f.endswith(home)), files[0])
        for copy in files:
            if copy != kept:
                skip.add(copy)
                same = os.path.dirname(copy) == os.path.dirname(kept)  # one folder: name the files
                where = (kept, copy) if same else (os.path.dirname(kept), os.path.dirname(copy))
                pairs.setdefault((*where, str(experiment)), []).append(str(trial_id))
    lines = [
        f"skipped {len(ids)} file{'s' if len(ids) > 1 else ''} in {copy} (trial{'s' if len(ids) > 1 else ''} "
        f"{', '.join(ids[:3])}{f' and {len(ids) - 3} more' if len(ids) > 3 else ''} of experiment "
        f"{experiment!r}): {kept} holds the same trials, read once from there; move the copy out of the "
        "results root"
        if not copy.endswith(".parquet")
        else f"skipped {copy}: it holds trial {ids[0]} of experiment {experiment!r}, as {kept} does, read "
        "once from there; move the copy out of the results root"
        for (kept, copy, experiment), ids in pairs.items()
    ]
    return {f: t for f, t in tables.items() if f not in skip}, lines


def _combine(tables: dict[str, pa.Table]) -> tuple[pa.Table | None, list[str]]:
    """The row tables as one table, and a skip line for each file whose column types cannot join the others.

    Permissive promotion joins what rows of different versions differ in (error rows lack metrics; an int
    column held as double). A type no promotion reconciles (a status of int64 beside string) would break every
    row, so the file that holds it is left out: marked files are kept first, then files whose types agree with
    most files' types, so one odd file never costs the rows that agree with each other, whatever its name."""
    if not tables:
        return None, []
    try:
        return pa.concat_tables(list(tables.values()), promote_options="permissive"), []
    except pa.ArrowException:
        pass
    votes = Counter(
        (f.name, str(f.type)) for t in tables.values() for f in t.schema if not pa.types.is_null(f.type)
    )
    usual: dict[str, str] = {}
    for (name, kind), _ in votes.most_common():
        usual.setdefault(name, kind)

    def order(file: str) -> tuple[bool, int, str]:
        table = tables[file]
        marked = (table.schema.metadata or {}).get(ROW_KIND[0]) == ROW_KIND[1]
        unusual = sum(not pa.types.is_null(f.type) and usual[f.name] != str(f.type) for f in table.schema)
        return not marked, unusual, file

    schema: pa.Schema | None = None
    kept: set[str] = set()
    clashes: list[str] = []
    for file in sorted(tables, key=order):
        if schema is not None and (clash := _clash(schema, tables[file].schema)):
            clashes.append(f"skipped {file}: {clash}; move it out of the trials folder")
            continue
        schema = (
            tables[file].schema
            if schema is None
            else pa.unify_schemas([schema, tables[file].schema], promote_options="permissive")
        )
        kept.add(file)
    return pa.concat_tables(
        [t for f, t in tables.items() if f in kept], promote_options="permissive"
    ), clashes


def _clash(schema: pa.Schema, other: pa.Schema) -> str | None:
    """Why `other` cannot join rows of `schema` (its first column of an irreconcilable type), or None."""
    try:
        pa.unify_schemas([schema, other], promote_options="permissive")
        return None
    except pa.ArrowException as exc:
        for field in other:
            if field.name in schema.names:
                known = schema.field(field.name)
                try:
                    pa.unify_schemas([pa.schema([known]), pa.schema([field])], promote_options="permissive")
                except pa.ArrowException:
                    return (
                        f"its column {field.name!r} holds {field.type} where the other rows hold {known.type}"
                    )
        return f"its columns do not combine with the other rows' ({str(exc).splitlines()[0][:200]})"


def _read_row_file(fs: pafs.FileSystem, file: str) -> pa.Table | str:
    """The row table of one file in a `trials` folder, or why it is skipped (a line that names the file)."""
    try:
        with fs.open_input_file(file) as handle:
            table = pq.ParquetFile(handle).read()
    except (pa.ArrowException, OSError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return f"skipped {file}: not a readable Parquet file ({reason}); delete it or re-run that trial"
    kind = (table.schema.metadata or {}).get(ROW_KIND[0])
    lacks = [k for k in ROW_KEYS if k not in table.column_names]
    if kind is not None and kind != ROW_KIND[1]:
        return (
            f"skipped {file}: not a trial row (marked {ROW_KIND[0].decode()}="
            f"{kind.decode(errors='replace')}); move it out of the trials folder"
        )
    if kind is None and lacks:
        mark = f"{ROW_KIND[0].decode()}={ROW_KIND[1].decode()}"
        return (
            f"skipped {file}: not a trial row (no {mark} mark, nor every column of an older row: it lacks "
            f"{', '.join(lacks)}); move it out of the trials folder"
        )
    if not table.num_rows:
        return f"skipped {file}: the trial file holds no row; delete it or re-run that trial"
    return table


def matching_rows(
    root: str, experiment: str | None = None, where: list[str] | None = None, option: str = "--where"
) -> pd.DataFrame:
    """The rows of `experiment` (every experiment under `root` when None) whose columns equal each KEY=VALUE
    of `where`: numbers by value (`train.lr=1e-3` is 0.001, `seed=0` is 0.0), other values as lower-case text
    (`selected=true`, `task=ar`), an empty VALUE a missing one (`test.ndcg@10=`). What
    `modsar results` and `modsar.results()` show; a root without rows, an unknown column or a malformed
    condition is one ModsarError, naming `option` (the CLI's --where, the API's where)."""
    where = list(where or [])
    malformed = next((cond for cond in where if "=" not in cond), None)
    if malformed is not None:
        raise ModsarError(f"{option} {malformed!r} is not KEY=VALUE (e.g. task=ar, selected=true)")
    rows = read_rows(root, experiment)
    if not len(rows):
        folder = f"{root}/{experiment}" if experiment else root
        named = ("--results", "--experiment") if option.startswith("-") else ("root", "experiment")
        raise ModsarError(
            f"no trial rows under {folder}; pass {named[0]} the folder `modsar search` or "
            f"`modsar train` wrote to{f' and an {named[1]} in it' if experiment else ''}"
            f"{'' if experiment else deeper_rows_hint(root)}"
        )
    for cond in where:
        key, _, value = cond.partition("=")
        if key not in rows:
            raise ModsarError(
                f"{option}: unknown column '{key}' (e.g. task, status, selected, model.hidden_size)"
            )
        rows = rows[_equals(rows[key], value)]
    return rows


def _equals(column: pd.Series, value: str) -> pd.Series:
    """Which cells of `column` hold `value` as a user typed it on the command line. A list (`[1,5,10]`, as
    overrides spell it) is compared by value with list cells, which rows hold as JSON text ("[1, 5, 10]"):
    as text the spacing would decide."""
    if value == "":
        return column.isna() | (column.astype(str) == "")
    if value.strip().startswith("["):
        wanted = _list_value(value)
        if wanted is not None:
            return column.map(lambda cell: _same_list(_list_value(cell), wanted)).astype(bool)
    if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
        try:
            return column == float(value)
        except ValueError:
            pass
    return column.astype(str).str.lower() == value.lower()


def _list_value(cell: Any) -> list | None:
    """A list cell or typed list as a list (JSON or YAML text, or a list), else None."""
    import yaml

    if isinstance(cell, str):
        try:
            cell = json.loads(cell)  # what rows hold: quick
        except ValueError:
            try:
                cell = yaml.safe_load(cell)  # what a user types: a YAML flow list ([a, 1e-3])
            except yaml.YAMLError:
                return None
    if hasattr(cell, "tolist") and not isinstance(cell, str):
        cell = cell.tolist()
    return list(cell) if isinstance(cell, (list, tuple)) else None


def _same_list(cell: list | None, wanted: list) -> bool:
    """Element by element: numbers by value (5 is 5.0, 1e-3 is 0.001), other values as lower-case text."""

    def norm(item: Any) -> Any:
        if isinstance(item, bool) or item is None:
            return str(item).lower()
        try:
            return float(item)
        except (TypeError, ValueError):
            return str(item).lower()

    return cell is not None and [norm(c) for c in cell] == [norm(w) for w in wanted]
