"""Raw interaction logs -> canonical interactions (user, item, optional timestamp, file order).

Formats (``--format``; ``auto`` detects from the name and the first lines):
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


def read_text(path: Path) -> str:
    if not path.is_file():
        raise ModsarError(f"source file '{path}' does not exist")
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return raw.decode("utf-8-sig")  # a byte-order mark (spreadsheet exports) is not part of the first id
    except (OSError, EOFError) as exc:
        raise ModsarError(f"cannot read '{path}': {exc}") from None
    except UnicodeDecodeError as exc:
        raise ModsarError(f"'{path}' is not UTF-8 text (byte {exc.start}); is it the right file?") from None


def _lines(path: Path, text: str) -> list[tuple[int, str]]:
    """Non-empty lines with 1-based line numbers; an empty file is an error."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise ModsarError(f"'{path}' is empty: no interactions to import")
    return lines


def _ints(
    path: Path, numbered: list[tuple[int, str]], id_tokens: list[list[str]], arrays: list[list[str]]
) -> list[np.ndarray]:
    """Convert `arrays` of id strings to int64; on failure name the first line whose `id_tokens` is bad."""
    try:
        return [np.asarray(a, dtype=np.int64) for a in arrays]
    except (ValueError, OverflowError):
        for (n, line), toks in zip(numbered, id_tokens, strict=True):
            for tok in toks:
                if (
                    not tok.lstrip("-").isdecimal() or not tok.lstrip("-").isascii()
                ):  # '²' is a digit, not a number
                    raise ModsarError(
                        f"{path}:{n}: id '{tok}' is not an integer id (line: {line.strip()[:60]!r}); "
                        "use --format inter for string tokens"
                    ) from None
                if not -(2**63) <= int(tok) < 2**63:
                    raise ModsarError(
                        f"{path}:{n}: id '{tok[:30]}' does not fit in 64 bits (line: "
                        f"{line.strip()[:60]!r}); use --format inter to read ids as string tokens"
                    ) from None
        raise


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
            raise ModsarError(f"{path}:{n}: expected 'user item1 item2 ...', got only {len(row)} field")
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
    if token_ids:  # RecBole tokens are strings by definition; keep them as such
        user, item = np.asarray(cols["user"]), np.asarray(cols["item"])
    else:
        ids = [[r[columns["user"]], r[columns["item"]]] for r in rows]
        user, item = _ints(path, numbered, ids, [cols["user"], cols["item"]])
    floats = {}
    for name in ("timestamp", "rating"):
        if name in cols:
            try:
                floats[name] = np.asarray(cols[name], dtype=np.float64)
            except ValueError:
                bad = next(i for i, v in enumerate(cols[name]) if not _is_float(v))
                n = numbered[bad][0]
                raise ModsarError(f"{path}:{n}: {name} '{cols[name][bad]}' is not a number") from None
            if not np.isfinite(floats[name]).all():  # 'nan' and 'inf' parse, but order or filter nothing
                bad = int(np.flatnonzero(~np.isfinite(floats[name]))[0])
                raise ModsarError(
                    f"{path}:{numbered[bad][0]}: {name} '{cols[name][bad]}' is not a finite number"
                )
    return Interactions(user, item, floats.get("timestamp"), floats.get("rating"))


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_inter(path: Path, text: str) -> Interactions:
    numbered = _lines(path, text)
    header = [h.strip() for h in numbered[0][1].rstrip("\r\n").split("\t")]
    names = [h.split(":")[0] for h in header]
    if not all(":" in h for h in header):
        raise ModsarError(
            f"{path}:1: RecBole header fields must be 'name:type' (e.g. user_id:token); got {header}"
        )
    columns = {}
    for want, key in (("user_id", "user"), ("item_id", "item")):
        if want not in names:
            raise ModsarError(f"{path}:1: missing column '{want}:token' in the .inter header {header}")
        columns[key] = names.index(want)
    for want, key in (("timestamp", "timestamp"), ("rating", "rating")):
        if want in names:
            columns[key] = names.index(want)
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


def _readable_as(path: Path, head: list[str]) -> list[str]:
    """The formats whose reader accepts the first lines `head` as they are, in FORMATS order."""
    text = "\n".join(head) + "\n"
    fits = []
    for fmt in FORMATS:
        try:
            READERS[fmt](path, text)
        except (ModsarError, ValueError, OverflowError):
            continue
        fits.append(fmt)
    return fits


def detect_format(path: Path, text: str, prefer: str | None = None) -> str:
    """Guess the format from the file name, then from the first 2,000 non-empty lines.

    `prefer` (a registry benchmark's usual format) only breaks a tie the file leaves open: where the name
    and the lines decide, they win; where they do not and the file reads as `prefer`, `prefer` is used."""
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".inter"):
        return "inter"
    if name.endswith(".csv"):
        return "ml-csv"
    head = [line for line in text.splitlines()[:2000] if line.strip()]
    if not head:
        raise ModsarError(f"'{path}' is empty: no interactions to import")
    if "::" in head[0]:
        return "ml-dat"
    if ":token" in head[0]:
        return "inter"
    if "," in head[0] and "userId" in head[0]:
        return "ml-csv"
    if "session" in name:
        return "sessions"
    rows = [line.split() for line in head]
    firsts = [r[0] for r in rows]
    if all(len(r) == 2 for r in rows) and len(set(firsts)) < len(firsts):
        return "pairs"
    if len(set(firsts)) == len(firsts) and all(len(r) >= 2 for r in rows):
        # one line per user and one line per session look alike (distinct first ids): a registry of sessions
        # (diginetica) means sessions, where reading them as user-lines would drop each session's first item
        return "sessions" if prefer == "sessions" else "user-lines"
    fits = _readable_as(path, head)
    if prefer in fits:
        return str(prefer)
    if not fits:
        raise ModsarError(
            f"cannot tell the format of '{path}' from its first lines: none of the formats reads "
            f"them (ids must be integers except in .inter files); pass --format with one of: "
            f"{', '.join(FORMATS)}"
        )
    others = [f for f in FORMATS if f != fits[0]]
    could = fits[0] if len(fits) == 1 else f"{', '.join(fits[:-1])} or {fits[-1]}"
    raise ModsarError(
        f"cannot tell the format of '{path}' from its first lines: it could be {could}; pass "
        f"--format {fits[0]} (or another of: {', '.join(others)})"
    )


def resolve_format(path: Path, fmt: str = "auto", prefer: str | None = None) -> str:
    """The format `path` is read in: `fmt` itself unless it is 'auto', else detected from the file (with
    `prefer` breaking ties, see detect_format)."""
    if fmt != "auto" and fmt not in READERS:
        raise ModsarError(f"unknown format '{fmt}'; choose one of: auto, {', '.join(FORMATS)}")
    return detect_format(path, read_head(path), prefer) if fmt == "auto" else fmt


def read_head(path: Path, size: int = 1 << 20) -> str:
    """The first `size` bytes of the (decompressed) file, cut after the last whole line: enough to detect
    the format without decoding a 20M-line file into one Python string."""
    if not path.is_file():
        raise ModsarError(f"source file '{path}' does not exist")
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as stream:
            raw = stream.read(size)
            if stream.read(1):  # more follows: drop the partial last line
                raw = raw[: raw.rfind(b"\n") + 1] or raw
        return raw.decode("utf-8-sig", errors="replace")
    except (OSError, EOFError) as exc:
        raise ModsarError(f"cannot read '{path}': {exc}") from None


ML_CSV_TYPES = {"userId": "int64", "movieId": "int64", "rating": "float64", "timestamp": "float64"}


def fast_ml_csv(path: Path) -> Interactions | None:
    """A well-formed MovieLens ratings.csv through pyarrow's multithreaded CSV reader (no Python per line);
    None when anything is off (header, field counts, ids that are not integers, missing or non-finite
    numbers), so that the line-by-line reader can name the offending line."""
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
    return Interactions(arrays["user"], arrays["item"], arrays.get("timestamp"), arrays.get("rating"))


def read_interactions(path: str | Path, fmt: str = "auto") -> tuple[Interactions, str]:
    """Read one raw file; returns the interactions and the format used."""
    path = Path(path)
    fmt = resolve_format(path, fmt)
    if fmt == "ml-csv" and (fast := fast_ml_csv(path)) is not None:
        return fast, fmt
    return READERS[fmt](path, read_text(path)), fmt
