"""A report's files in its --out folder: a second report into one folder replaces the first one's files.

A report lists what it wrote in OUTPUTS_LIST beside them; the next report into that folder removes the
listed files it does not write again (a dataset or experiment no longer covered, another --format), so
stale figures never sit beside new ones. Only names a report gives its own files are ever removed (the
report and the PNGs of `plots.py`, at the top or one experiment folder down), never another file of the
folder, whatever the list says. Each file is written in a hidden staging folder and renamed into place, and
the list names every file that may be the report's until the stale ones are gone, so an interrupted report
leaves nothing the next one does not recognise."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from modsar.outputs import to_json, write_error, write_text

OUTPUTS_LIST = ".modsar-report.json"  # the files the last report wrote here, relative to the folder
STAGING_PREFIX = ".report-staging-"
STALE_STAGING_S = 3600  # a staging folder this old was left by a killed report (writing takes seconds)
REPORT_NAME = re.compile(r"report\.(md|tex|csv|html)")  # at the top of the folder
PLOT_NAME = re.compile(r"(bars|curves|improvement)_.*\.png")  # there, or in an experiment's folder


def is_report_file(relative: str) -> bool:
    """Whether a path (relative to --out) is one a report writes: its name is the report's or a plot's, at the
    top of the folder or in one experiment folder; never a path that climbs out of the folder."""
    path = PurePosixPath(relative)
    if path.is_absolute() or not 1 <= len(path.parts) <= 2:
        return False
    if any(part in (".", "..") or part.startswith(".") for part in path.parts):
        return False
    return PLOT_NAME.fullmatch(path.name) is not None or (
        len(path.parts) == 1 and REPORT_NAME.fullmatch(path.name) is not None
    )


def previous_outputs(out: Path) -> set[str]:
    """The files an earlier report wrote in `out`: those its list names, or, in a folder written before
    reports kept a list, the files whose names are a report's."""
    listed = out / OUTPUTS_LIST
    if listed.is_file():
        try:
            names = json.loads(listed.read_text())
        except (OSError, ValueError):
            names = None
        if isinstance(names, list):
            return {n for n in names if isinstance(n, str) and is_report_file(n)}
    found = set()
    for path in [*out.glob("*"), *out.glob("*/*")]:
        relative = path.relative_to(out).as_posix()
        if path.is_file() and not path.is_symlink() and is_report_file(relative):
            found.add(relative)
    return found


def replace_outputs(out: Path, produce: Callable[[Path], list[Path]]) -> list[Path]:
    """Write a report's files with `produce` (given a staging folder, it returns the paths it wrote there),
    move them into `out`, and remove the previous report's files that were not written again; the paths in
    `out`, in `produce`'s order. A full disk, a read-only filesystem or a folder without write permission is
    one ModsarError (modsar.outputs.write_error); the staging folder goes, and so do the folders of `out`
    this call created, so a failed report leaves no folder behind and every file in `out` whole."""
    created = [folder for folder in (out, *out.parents) if not folder.exists()]  # deepest first
    staging, new = None, list[str]()
    try:
        out.mkdir(parents=True, exist_ok=True)
        _remove_stale_staging(out)
        staging = Path(tempfile.mkdtemp(dir=out, prefix=STAGING_PREFIX))
        new = [path.relative_to(staging).as_posix() for path in produce(staging)]
        _move_into(out, staging, new)
    except BaseException as exc:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if out in created:  # a folder this call made holds this report's files alone: they go with it
            for relative in (OUTPUTS_LIST, *new):
                with contextlib.suppress(OSError):
                    (out / relative).unlink()
                if (out / relative).parent != out:
                    with contextlib.suppress(OSError):
                        (out / relative).parent.rmdir()  # an experiment's plot folder, if now empty
        for folder in created:
            try:
                folder.rmdir()  # only if empty: nothing of this report, or of anyone else's, is there
            except OSError:
                break
        if isinstance(exc, OSError) and (error := write_error(out, exc)) is not None:
            raise error from None
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return [out / relative for relative in new]


def _move_into(out: Path, staging: Path, new: list[str]) -> None:
    """Move the files written in `staging` into `out` and remove the previous report's files not written
    again. The outputs list names both until the stale ones are gone, so an interruption leaves no file the
    next report does not recognise."""
    previous = previous_outputs(out)
    _write_list(out, previous | set(new))  # until the stale files are gone, every file that may be ours
    for relative in new:
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / relative, out / relative)
    for relative in sorted(previous - set(new)):
        stale = out / relative
        if stale.is_file() and not stale.is_symlink():
            stale.unlink()
        if stale.parent != out:
            with contextlib.suppress(OSError):  # an experiment folder no longer written, if now empty
                stale.parent.rmdir()
    _write_list(out, set(new))


def _write_list(out: Path, names: set[str]) -> None:
    write_text(out / OUTPUTS_LIST, to_json(sorted(names)) + "\n")


def _remove_stale_staging(out: Path) -> None:
    """The staging folders a killed report left in `out` (a live one is younger than STALE_STAGING_S)."""
    for folder in out.glob(f"{STAGING_PREFIX}*"):
        try:
            old = time.time() - folder.stat().st_mtime > STALE_STAGING_S
        except OSError:
            continue
        if old and folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
