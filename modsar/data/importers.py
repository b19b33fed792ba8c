"""Raw interaction logs -> canonical interactions (user, item, optional timestamp, file order).

Formats (``--format``; ``auto`` detects them from the content of the first lines, see detect_format):
  pairs       ``user item`` per line, each user's lines in time order (SASRec ``Video.txt``)
  user-lines  ``user i1 i2 ...`` one user per line, items in time order (S3Rec ``Beauty.txt``)
  inter       RecBole atomic ``.inter`` with a typed header (``user_id:token item_id:token ...``)
  ml-csv      MovieLens ``ratings.csv`` (``userId,movieId,rating,timestamp``)
  ml-dat      MovieLens ``ratings.dat`` (``user::item::rating::timestamp``)
  sessions    one session per line, items in click order (the session is the "user")
``.gz`` files are read transparently. Errors name the file and line.
"""

from __future__ import annotations

import gzip
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modsar.errors import ModsarError

FORMATS = ("pairs", "user-lines", "inter", "ml-csv", "ml-dat", "sessions")


@dataclass
class Interactions:
    """Canonical log: one row per interaction. Ids are raw (ints, or strings for RecBole tokens)."""

    user: np.ndarray
    item: np.ndarray
    timestamp: np.ndarray | None = None  # float64 seconds; None when the format has no time
    rating: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.user)

    def take(self, index: np.ndarray) -> Interactions:
        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[index]

        return Interactions(self.user[index], self.item[index], pick(self.timestamp), pick(self.rating))

    @staticmethod
    def concat(parts: list[Interactions]) -> Interactions:
        def cat(name: str) -> np.ndarray | None:
            arrays = [getattr(p, name) for p in parts]
            if any(a is None for a in arrays):
                return None
            return np.concatenate(arrays)

        return Interactions(
            np.concatenate([p.user for p in parts]),
            np.concatenate([p.item for p in parts]),
            cat("timestamp"),
            cat("rating"),
        )


ID_MAX_CHARS = 256  # a longer id is a broken line or binary junk, never a user or an item
HEAD_LINES = 2000  # the lines detection looks at
# what a file that is no text log starts with (only gzip is read, transparently)
BINARY_MAGIC = {
    b"PK\x03\x04": "a zip archive",
    b"BZh": "a bzip2 file",
    b"\xfd7zXZ\x00": "an xz file",
    b"\x28\xb5\x2f\xfd": "a zstd file",
    b"PAR1": "a Parquet file",
    b"\x89HDF": "an HDF5 file",
    b"\x80\x04": "a Python pickle",
    b"\x93NUMPY": "a NumPy array",
}
GZIP_MAGIC = b"\x1f\x8b"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # no text log holds these; binary data does
_INTEGERS = re.compile(r"(?:[+-]?[0-9]+\n)*")  # the one spelling of an integer id (not 1_000, not '٣')
_NOT_ID_CHAR = re.compile(r"[^0-9+\-\n]")  # a character no integer id has (a quick scan of a whole file)


def _refuse_binary(path: Path, start: bytes) -> None:
    """A compressed or binary file is named as what it is, not reported as a bad first line."""
    for magic, what in BINARY_MAGIC.items():
        if start.startswith(magic):
            raise ModsarError(
                f"'{path}' is {what}, not a text log; extract or export the interactions as text (a .gz "
                "text file is read as it is)"
            )


def _decode(path: Path, raw: bytes) -> str:
    """UTF-8 text without byte-order marks (spreadsheet exports, files joined with theirs), control
    characters refused with their line: a file that holds them is binary, whatever its name."""
    try:
        text = raw.decode("utf-8").replace("\ufeff", "")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ModsarError(
            f"{path}:{line}: byte 0x{raw[exc.start]:02x} is not UTF-8 text: a binary or compressed file, or "
            "another encoding; pass the text log (UTF-8, or gzipped UTF-8)"
        ) from None
    if bad := _CONTROL.search(text):
        line = text.count("\n", 0, bad.start()) + 1
        raise ModsarError(
            f"{path}:{line}: control character 0x{ord(bad.group()):02x}: binary data, not a text log; "
            "pass the text log (a line per interaction, user or session)"
        )
    return text


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as stream:
        return stream.read(2) == GZIP_MAGIC


def read_text(path: Path) -> str:
    """The whole file as text; gzip is recognised by its content, whatever the name."""
    if not path.is_file():
        raise ModsarError(f"source file '{path}' does not exist")
    try:
        raw = path.read_bytes()
        if raw.startswith(GZIP_MAGIC):
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as exc:
        raise ModsarError(f"cannot read '{path}': {exc}; is the file complete?") from None
    _refuse_binary(path, raw[:8])
    return _decode(path, raw)


def _lines(path: Path, text: str) -> list[tuple[int, str]]:
    """Non-empty lines with 1-based line numbers; an empty file is an error."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise ModsarError(f"'{path}' is empty: no interactions to import")
    return lines


def _bad_id(tok: str) -> str | None:
    """Why `tok` is no integer id, or None when it is one (64 bits, ASCII digits)."""
    if not tok:
        return "is empty"
    if len(tok) > ID_MAX_CHARS:
        return f"is {len(tok):,} characters long"
    if not _INTEGERS.fullmatch(tok + "\n"):  # '²' and '٣' are digits, not numbers; 1_000 is no id
        return "is not an integer id"
    if not -(2**63) <= int(tok) < 2**63:
        return "does not fit in 64 bits"
    return None


def _ints(
    path: Path, numbered: list[tuple[int, str]], id_tokens: list[list[str]], arrays: list[list[str]]
) -> list[np.ndarray]:
    """Convert `arrays` of id strings to int64; on failure name the first line whose `id_tokens` is bad."""
    flat = [tok for array in arrays for tok in array]
    if not _NOT_ID_CHAR.search("\n".join(flat)):  # numpy takes what int() takes: 1_000 and '٣' too
        try:
            return [np.asarray(a, dtype=np.int64) for a in arrays]
        except (ValueError, OverflowError):
            pass
    for (n, line), toks in zip(numbered, id_tokens, strict=True):
        for tok in toks:
            if (why := _bad_id(tok)) is not None:
                raise ModsarError(
                    f"{path}:{n}: id '{tok[:30]}' {why} (line: {line.strip()[:60]!r}); fix or delete that "
                    "line, or use --format inter to read ids as string tokens"
                )
    raise ModsarError(f"'{path}': ids that are not 64-bit integers; use --format inter for string tokens")


def _read_pairs(path: Path, text: str) -> Interactions:
    numbered = _lines(path, text)
    rows = [line.split() for _, line in numbered]
    for (n, line), row in zip(numbered, rows, strict=True):
        if len(row) != 2:
            raise ModsarError(
                f"{path}:{n}: expected 'user item' (2 fields), got {len(row)}: {line.strip()[:60]!r}"
                "; use --format to choose another format"
            )
    (flat,) = _ints(path, numbered, rows, [[tok for row in rows for tok in row]])
    return Interactions(flat[0::2], flat[1::2])


def _read_user_lines(path: Path, text: str) -> Interactions:
    numbered = _lines(path, text)
    rows = [line.split() for _, line in numbered]
    for (n, _), row in zip(numbered, rows, strict=True):
        if len(row) < 2:
            raise ModsarError(
                f"{path}:{n}: expected 'user item1 item2 ...', got only {len(row)} field: a user line needs "
                "a user id and at least one item; fix or delete that line"
            )
    users, items = _ints(path, numbered, rows, [[r[0] for r in rows], [t for r in rows for t in r[1:]]])
    lengths = np.array([len(r) - 1 for r in rows])
    return Interactions(np.repeat(users, lengths), items)


def _read_sessions(path: Path, text: str) -> Interactions:
    numbered = _lines(path, text)
    rows = [line.split() for _, line in numbered]
    (items,) = _ints(path, numbered, rows, [[t for r in rows for t in r]])
    lengths = np.array([len(r) for r in rows])
    return Interactions(np.repeat(np.arange(1, len(rows) + 1), lengths), items)


def _read_delimited(
    path: Path,
    numbered: list[tuple[int, str]],
    sep: str,
    columns: dict[str, int],
    ncols: int,
    token_ids: bool,
) -> Interactions:
    rows = [line.rstrip("\r\n").split(sep) for _, line in numbered]
    for (n, line), row in zip(numbered, rows, strict=True):
        if len(row) != ncols:
            raise ModsarError(
                f"{path}:{n}: expected {ncols} fields separated by {sep!r}, got {len(row)}: "
                f"{line.strip()[:60]!r}"
            )
    cols = {name: [r[i].strip() for r in rows] for name, i in columns.items()}
    _refuse_bad_tokens(path, numbered, cols)
    if token_ids:  # RecBole tokens are strings by definition; keep them as such
        user, item = np.asarray(cols["user"]), np.asarray(cols["item"])
    else:
        ids = [[u, i] for u, i in zip(cols["user"], cols["item"], strict=True)]
        user, item = _ints(path, numbered, ids, [cols["user"], cols["item"]])
    floats = {
        name: _floats(path, numbered, name, cols[name]) for name in ("timestamp", "rating") if name in cols
    }
    return Interactions(user, item, floats.get("timestamp"), floats.get("rating"))


def _refuse_bad_tokens(path: Path, numbered: list[tuple[int, str]], cols: dict[str, list[str]]) -> None:
    """An empty or overlong user or item id is refused with its line: read, '' would be one user or item
    shared by every such line, and a 10,000-character id is a broken line."""
    for name in ("user", "item"):
        for k, tok in enumerate(cols[name]):
            if not tok or len(tok) > ID_MAX_CHARS:
                n, line = numbered[k]
                why = "is empty" if not tok else f"is {len(tok):,} characters long (at most {ID_MAX_CHARS})"
                raise ModsarError(
                    f"{path}:{n}: the {name} id {why} (line: {line.strip()[:60]!r}); every line needs a user "
                    "and an item id: fix or delete that line"
                )


def _floats(path: Path, numbered: list[tuple[int, str]], name: str, values: list[str]) -> np.ndarray:
    """A timestamp or rating column as float64; a value that is no finite number, or a negative timestamp
    (a missing-value marker, or no time since 1970), is refused with its line."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except ValueError:
        bad = next(i for i, v in enumerate(values) if not _is_float(v))
        raise ModsarError(f"{path}:{numbered[bad][0]}: {name} '{values[bad][:30]}' is not a number") from None
    if not np.isfinite(array).all():  # 'nan' and 'inf' parse, but order or filter nothing
        bad = int(np.flatnonzero(~np.isfinite(array))[0])
        raise ModsarError(f"{path}:{numbered[bad][0]}: {name} '{values[bad]}' is not a finite number")
    if name == "timestamp" and (array < 0).any():
        bad = int(np.flatnonzero(array < 0)[0])
        raise ModsarError(
            f"{path}:{numbered[bad][0]}: timestamp '{values[bad]}' is negative; timestamps are seconds since "
            "1970 (a missing time cannot order a history): fix or delete that line"
        )
    return array


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _refuse_repeated_header(path: Path, numbered: list[tuple[int, str]]) -> None:
    """A header line met again further down (files joined with their headers) is refused with its line:
    read as data it would be a user 'userId' or fail with a misleading message."""
    header = numbered[0][1].strip()
    for n, line in numbered[1:]:
        if line.strip() == header:
            raise ModsarError(
                f"{path}:{n}: the header line repeats ({header[:60]!r}), as when files are joined with "
                f"their headers; delete line {n}, or pass the files as separate --source"
            )


RECBOLE_TYPES = ("token", "token_seq", "float", "float_seq")


def _read_inter(path: Path, text: str) -> Interactions:
    numbered = _lines(path, text)
    header = [h.strip() for h in numbered[0][1].rstrip("\r\n").split("\t")]
    if len(header) == 1 and len(header[0].split()) > 1:
        raise ModsarError(
            f"{path}:1: the .inter header {header[0][:60]!r} is separated by spaces; RecBole's fields are "
            "separated by tabs: replace the spaces between the fields of every line by tabs"
        )
    names = [h.split(":")[0] for h in header]
    if not all(":" in h for h in header):
        raise ModsarError(
            f"{path}:1: RecBole header fields must be 'name:type' separated by tabs (e.g. "
            f"user_id:token<TAB>item_id:token); got {header}"
        )
    if len(set(names)) < len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise ModsarError(f"{path}:1: the .inter header names the column '{twice}' twice: {header}")
    columns = {}
    for want, key in (("user_id", "user"), ("item_id", "item")):
        if want not in names:
            raise ModsarError(f"{path}:1: missing column '{want}:token' in the .inter header {header}")
        columns[key] = names.index(want)
    for want, key in (("timestamp", "timestamp"), ("rating", "rating")):
        if want in names:
            columns[key] = names.index(want)
    _refuse_repeated_header(path, numbered)
    return _read_delimited(path, numbered[1:] or _no_rows(path), "\t", columns, len(header), token_ids=True)


def _no_rows(path: Path) -> list:
    raise ModsarError(f"'{path}' has a header but no interaction rows")


def _read_ml_csv(path: Path, text: str) -> Interactions:
    numbered = _lines(path, text)
    header = [h.strip() for h in numbered[0][1].split(",")]
    columns = {}
    for want, key in (("userId", "user"), ("movieId", "item")):
        if want not in header:
            raise ModsarError(
                f"{path}:1: missing column '{want}' in the CSV header {header} "
                "(expected MovieLens ratings.csv: userId,movieId,rating,timestamp)"
            )
        columns[key] = header.index(want)
    for want, key in (("timestamp", "timestamp"), ("rating", "rating")):
        if want in header:
            columns[key] = header.index(want)
    _refuse_repeated_header(path, numbered)
    return _read_delimited(path, numbered[1:] or _no_rows(path), ",", columns, len(header), token_ids=False)


def _read_ml_dat(path: Path, text: str) -> Interactions:
    numbered = _lines(path, text)
    columns = {"user": 0, "item": 1, "rating": 2, "timestamp": 3}
    return _read_delimited(path, numbered, "::", columns, 4, token_ids=False)


READERS = {
    "pairs": _read_pairs,
    "user-lines": _read_user_lines,
    "inter": _read_inter,
    "ml-csv": _read_ml_csv,
    "ml-dat": _read_ml_dat,
    "sessions": _read_sessions,
}


@dataclass(frozen=True)
class Detection:
    """The format a file is read in and why: the content's evidence, the registry's format or --format. The
    reason is printed ("read FILE as FORMAT (WHY)") and kept in the manifest."""

    format: str
    why: str


def detect_format(path: Path, text: str, prefer: str | None = None) -> Detection:
    """The format of `path`, from the content of its first lines (HEAD_LINES): a typed header, '::' or ','
    fields, or ids separated by spaces or tabs, told apart by the shape of the lines.

    The file's name is only a hint, taken where the content leaves user-lines and sessions open; `prefer` (a
    registry benchmark's format) breaks such a tie first. Content no format fits, or that two fit equally, is
    one ModsarError that names --format."""
    numbered = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()][:HEAD_LINES]
    if not numbered:
        raise ModsarError(f"'{path}' is empty: no interactions to import")
    first = numbered[0][1].strip()
    header_fields = first.split("\t") if "\t" in first else first.split()
    if any(f.strip().rpartition(":")[2] in RECBOLE_TYPES and ":" in f for f in header_fields):
        return Detection("inter", "its first line is a RecBole typed header (name:type fields)")
    if "::" in first:
        return Detection("ml-dat", "fields separated by '::', as in MovieLens ratings.dat")
    if "," in first:
        header = [h.strip() for h in first.split(",")]
        if {"userId", "movieId"} <= set(header):
            return Detection("ml-csv", "comma-separated with the MovieLens header userId,movieId,...")
        if all(_is_float(h) for h in header):
            raise ModsarError(
                f"{path}:{numbered[0][0]}: comma-separated without a header; ml-csv needs the MovieLens "
                "header as its first line (userId,movieId[,rating,timestamp]): add it, naming your columns so"
            )
        missing = "userId" if "userId" not in header else "movieId"
        raise ModsarError(
            f"{path}:{numbered[0][0]}: missing column '{missing}' in the CSV header {header[:8]} (ml-csv is "
            "MovieLens ratings.csv: userId,movieId[,rating,timestamp]); rename your columns so"
        )
    return _detect_id_lines(path, numbered, prefer)


def _name_hint(path: Path) -> str | None:
    """What the file's name says of the two formats content cannot always tell apart."""
    name = path.name.lower()
    says = {"sessions" if "session" in name else None, "user-lines" if "user" in name else None} - {None}
    return says.pop() if len(says) == 1 else None


def _non_integer(numbered: list[tuple[int, str]], rows: list[list[str]]) -> tuple[int, str, str] | None:
    """The first (line number, token, line) whose token is no integer id, or None."""
    for (n, line), row in zip(numbered, rows, strict=True):
        for tok in row:
            if _bad_id(tok) is not None:
                return n, tok, line
    return None


def _detect_id_lines(path: Path, numbered: list[tuple[int, str]], prefer: str | None) -> Detection:
    """pairs, user-lines or sessions: lines of integer ids separated by spaces or tabs."""
    rows = [line.split() for _, line in numbered]
    if (bad := _non_integer(numbered, rows)) is not None:
        n, tok, line = bad
        if n == numbered[0][0] and len(rows) > 1 and _non_integer(numbered[1:], rows[1:]) is None:
            raise ModsarError(
                f"{path}:{n}: the first line {numbered[0][1].strip()[:60]!r} looks like a header, and ids "
                "separated by spaces or tabs (pairs, user-lines, sessions) have none; delete that line, or "
                "give the file a RecBole header (user_id:token<TAB>item_id:token) and --format inter"
            )
        if _non_integer(numbered[:1], rows[:1]) is None:  # the first line is ids: this line is broken
            raise ModsarError(
                f"{path}:{n}: id '{tok[:30]}' {_bad_id(tok)} (line: {line.strip()[:60]!r}); "
                "fix or delete that line (or pass --format inter to read ids as string tokens)"
            )
        raise ModsarError(
            f"cannot tell the format of '{path}' from its first lines: none of the formats reads them "
            f"(line {n}: '{tok[:30]}' {_bad_id(tok)}; ids must be integers except in .inter files); pass "
            f"--format with one of: {', '.join(FORMATS)}"
        )
    _refuse_table(path, numbered, rows)
    counts = [len(r) for r in rows]
    firsts = [int(r[0]) for r in rows]
    distinct = len(set(firsts)) == len(firsts)
    hint = _name_hint(path)
    pairs = counts.count(2) >= 0.9 * len(rows) or (max(counts) == 2 and counts.count(2) > counts.count(1))
    if not distinct and pairs:  # an odd line is then named by the reader
        return Detection("pairs", "2 ids per line and the first ids repeat: one (user, item) per line")
    others = {int(tok) for r in rows for tok in r[1:]}
    increasing = distinct and len(rows) > 1 and all(a < b for a, b in itertools.pairwise(firsts))
    disjoint = len(rows) > 1 and not set(firsts) & others
    strong = (increasing and disjoint) or (len(rows) >= 5 and (increasing or disjoint))
    fits = ["user-lines", "sessions"] if min(counts) >= 2 else ["sessions"]
    if 2 == min(counts) == max(counts):
        fits.insert(0, "pairs")  # one item per user: pairs and user-lines read it alike
    if strong and prefer != "sessions":  # a line of a user without items is then named by the reader
        why = (
            "the first ids increase line by line and never repeat"
            if increasing
            else "the first ids never appear among the other ids"
        ) + ": a user id, then that user's items"
        if "session" in path.name.lower():
            why += "; not sessions, as the name suggests: pass --format sessions if each line is a session"
        return Detection("user-lines", why)
    return _tie(path, fits, prefer, hint, distinct, len(rows), numbered, counts)


def _tie(
    path: Path,
    fits: list[str],
    prefer: str | None,
    hint: str | None,
    distinct: bool,
    lines: int,
    numbered: list[tuple[int, str]],
    counts: list[int],
) -> Detection:
    """Lines of ids the content does not place: the one format that reads them, else the registry's, else the
    name's, else user-lines where many first ids never repeat; else a refusal naming --format."""
    if fits == ["sessions"]:
        n = numbered[counts.index(1)][0]
        return Detection("sessions", f"line {n} holds a single id, which only a one-item session can be")
    shared = " or ".join(fits)
    if prefer in fits:
        return Detection(str(prefer), f"the lines read as {shared}; the registry's format is {prefer}")
    if hint in fits:
        return Detection(str(hint), f"the lines read as {shared}; the file's name says {hint}")
    if distinct and lines >= 20 and "user-lines" in fits:
        return Detection("user-lines", f"the first ids of {lines} lines never repeat: a user id per line")
    could = ", ".join(fits[:-1]) + f" or {fits[-1]}"
    others = [f for f in FORMATS if f != fits[0]]
    raise ModsarError(
        f"cannot tell the format of '{path}' from its first lines: it could be {could}; pass "
        f"--format {fits[0]} (or another of: {', '.join(others)})"
    )


def _refuse_table(path: Path, numbered: list[tuple[int, str]], rows: list[list[str]]) -> None:
    """Lines of 3 to 5 columns each that are tab-separated, hold a column of timestamps, or whose first ids
    repeat are a table (user, item, rating, time): read as lists of ids, ratings and times would become
    items. A user's or a session's items vary in number; a table's columns do not."""
    width = len(rows[0])
    if len(rows) < 3 or not 3 <= width <= 5 or any(len(r) != width for r in rows):
        return
    timed = [
        j for j in range(1, width) if all(9 <= len(r[j].lstrip("-")) <= 13 for r in rows)
    ]  # seconds or milliseconds since 1970 have 9 to 13 digits
    firsts = [r[0] for r in rows]
    if timed and not all(9 <= len(first) <= 13 for first in firsts):
        what = f"column {timed[0] + 1} looks like timestamps"
    elif "\t" in numbered[0][1]:
        what = "they are tab-separated"
    elif len(set(firsts)) < len(firsts):
        what = "the first ids repeat"
    else:
        return
    raise ModsarError(
        f"cannot tell the format of '{path}' from its first lines: every line has {width} columns and "
        f"{what}, like a table (user, item, rating, time), not lists of ids; give it a RecBole header "
        "(user_id:token<TAB>item_id:token<TAB>...) and --format inter, or pass --format if the lines are ids"
    )


def resolve_format(path: Path, fmt: str = "auto", prefer: str | None = None) -> Detection:
    """The format `path` is read in, and why: `fmt` itself unless it is 'auto', else detected from the
    file's content (with `prefer` breaking ties, see detect_format)."""
    if fmt != "auto" and fmt not in READERS:
        raise ModsarError(f"unknown format '{fmt}'; choose one of: auto, {', '.join(FORMATS)}")
    return detect_format(path, read_head(path), prefer) if fmt == "auto" else Detection(fmt, "--format")


def read_head(path: Path, size: int = 1 << 20) -> str:
    """The first `size` bytes of the (decompressed) file, cut after the last whole line: enough to detect
    the format without decoding a 20M-line file into one Python string."""
    if not path.is_file():
        raise ModsarError(f"source file '{path}' does not exist")
    try:
        with gzip.open(path, "rb") if _is_gzip(path) else path.open("rb") as stream:
            raw = stream.read(size)
            if stream.read(1):  # more follows: drop the partial last line
                raw = raw[: raw.rfind(b"\n") + 1] or raw
    except (OSError, EOFError) as exc:
        raise ModsarError(f"cannot read '{path}': {exc}; is the file complete?") from None
    _refuse_binary(path, raw[:8])
    if len(raw) == size and b"\n" not in raw:
        raise ModsarError(
            f"{path}:1: the first line is over {size // 2**20} MiB long: not a log of one line per "
            "interaction, user or session"
        )
    return _decode(path, raw)


ML_CSV_TYPES = {"userId": "int64", "movieId": "int64", "rating": "float64", "timestamp": "float64"}


def fast_ml_csv(path: Path) -> Interactions | None:
    """A well-formed MovieLens ratings.csv through pyarrow's multithreaded CSV reader (no Python per line);
    None when anything is off (header, field counts, ids that are not integers, missing, non-finite or
    negative numbers), so that the line-by-line reader can name the offending line."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    try:  # a .gz name is decompressed by pyarrow itself; quotes are not MovieLens's, so they fail as ids do
        table = pacsv.read_csv(
            path,
            parse_options=pacsv.ParseOptions(quote_char=False),
            convert_options=pacsv.ConvertOptions(column_types=ML_CSV_TYPES),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
        return None
    names = table.column_names
    if not {"userId", "movieId"} <= set(names) or len(set(names)) < len(names) or not table.num_rows:
        return None
    columns = {
        key: table[name]
        for name, key in (
            ("userId", "user"),
            ("movieId", "item"),
            ("timestamp", "timestamp"),
            ("rating", "rating"),
        )
        if name in names
    }
    if any(c.null_count for c in columns.values()):
        return None
    arrays = {k: c.to_numpy() for k, c in columns.items()}
    if any(not pc.all(pc.is_finite(columns[k])).as_py() for k in ("timestamp", "rating") if k in columns):
        return None
    if "timestamp" in arrays and (arrays["timestamp"] < 0).any():
        return None
    return Interactions(arrays["user"], arrays["item"], arrays.get("timestamp"), arrays.get("rating"))


def read_interactions(path: str | Path, fmt: str = "auto") -> tuple[Interactions, str]:
    """Read one raw file; returns the interactions and the format used."""
    path = Path(path)
    fmt = resolve_format(path, fmt).format
    if fmt == "ml-csv" and (fast := fast_ml_csv(path)) is not None:
        return fast, fmt
    return READERS[fmt](path, read_text(path)), fmt
