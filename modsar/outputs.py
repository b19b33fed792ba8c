"""Outputs: atomic files (a reader never sees a half-written row, table or figure: `atomic_write` writes a
temporary name and renames it), strict JSON, and what of a URI may be printed or written (`redact`: never
its password or a secret query value)."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from modsar.errors import ModsarError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow.fs as pafs
    from matplotlib.figure import Figure

HIDDEN = "***"  # what a password or a secret query value of a URI is shown as
# A URI within a text: a scheme, then everything up to whitespace (quotes, <, > and ` included: a password
# may hold them). Where a user name and ':' follow the scheme, the password runs to the last '@' on the line
# that comes before any other URI: it may hold spaces and '/' too (an AWS secret key pasted as it is), and a
# text that merely looks like one (`http://host:80 ... bob@corp`) has more hidden, never less.
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?:[^\s/?#@:]*:(?:(?!://)[^\r\n])*@)?\S*")
# ?token=... &password=... : query values whose name says they are secret; one hidden already (*** and the
# punctuation of the sentence it ends, `?token=***:`) is left as it is: redacting twice changes nothing
SECRET_QUERY = re.compile(
    r"(?P<name>[?&][^=&#\s]*(?:secret|token|passw|pwd|credential|signature|sig|api_?key)[^=&#\s]*=)"
    r"(?P<value>(?!\*{3}[:;,.)\]]*(?:[&#\s]|$))[^&#\s]*)",
    re.IGNORECASE,
)
CREDENTIALS_ADVICE = (
    "give the credentials through the environment or a credential file instead (for S3: AWS_ACCESS_KEY_ID "
    "and AWS_SECRET_ACCESS_KEY, or ~/.aws/credentials; for MLflow: MLFLOW_TRACKING_USERNAME and "
    "MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN) and drop them from the URI"
)
RAY_ADVICE = (
    "a Ray address takes no credentials (Ray prints and records it); the cluster's token comes from "
    "RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH"
)
# environment variables ModSAR reads a folder or an address from, and what to do instead of credentials in
# them: refused like an option where they carry some (modsar.cli.common, the Python API)
URI_VARIABLES = {
    "MODSAR_DATA": "a data folder is a local path (a shared mount on a cluster), not a URI",
    "RAY_ADDRESS": RAY_ADVICE,
    "RAY_DASHBOARD_ADDRESS": RAY_ADVICE,
}


@dataclass(frozen=True)
class Uri:
    """One URI as `uris_in` found it in a text. The user info runs to the URI's last '@' (a password may
    hold '/', '@', quotes or spaces), unless the part before its first ':' holds '/', '?' or '#' (then the
    '@' is the path's or the query's and there is no user info)."""

    text: str  # as found
    scheme: str
    user: str  # as written (percent-encoded); "" where none
    password: str | None  # as written; None where the user info has no ':'
    rest: str  # all after the user info: host, port, path, query, fragment
    secret_queries: tuple[str, ...]  # names of the query parameters whose value is secret (not hidden yet)

    @property
    def bare(self) -> str:
        """The URI without its user info."""
        return f"{self.scheme}://{self.rest}"

    @property
    def secret(self) -> bool:
        """Whether it holds a password or a secret query value that is not hidden (***) already."""
        return self.password not in (None, HIDDEN) or bool(self.secret_queries)


def _parse_uri(text: str) -> Uri:
    scheme, _, after = text.partition("://")
    info, at, rest = after.rpartition("@")
    user, colon, password = info.partition(":")
    if not at or any(char in user for char in "/?#"):
        user, colon, password, rest = "", "", "", after
    names = tuple(m.group("name").strip("?&=") for m in SECRET_QUERY.finditer(rest))
    return Uri(text, scheme, user, password if colon else None, rest, names)


def is_uri(where: object) -> bool:
    """Whether a results root, dataset folder or checkpoint place is a pyarrow URI (s3://, gs://, file://,
    ...) rather than a local path: one test for every module that reads or writes one."""
    return "://" in str(where)


def uris_in(text: str) -> list[Uri]:
    """Every URI in `text`, parsed: the one reading of a URI's password and secret query values that
    `redact`, `holds_credentials` and a search's taking of credentials (sweep.credentials) share."""
    return [_parse_uri(match.group(0)) for match in _URI.finditer(text)]


def holds_credentials(text: str) -> bool:
    """Whether `text` holds a URI with a password or a secret query value (not hidden already): a user name
    alone (hdfs://user@host) is no secret."""
    return "://" in text and any(uri.secret for uri in uris_in(text))


def redact(text: str) -> str:
    """`text` with the password of every URI in it replaced by *** (`http://user:***@host`), and the values of
    query parameters named like secrets (token, password, signature) too: what may be written or printed. The
    password runs to the URI's last '@' (`uris_in`), so one with a raw '/', '@', quote or space (an AWS
    secret key pasted as it is) is hidden whole. Redacting twice changes nothing."""

    def hide(match: re.Match) -> str:
        uri = _parse_uri(match.group(0))
        shown = f"{uri.scheme}://{uri.user}:{HIDDEN}@{uri.rest}" if uri.password is not None else uri.text
        return SECRET_QUERY.sub(rf"\g<name>{HIDDEN}", shown)

    return _URI.sub(hide, text) if "://" in text else text


def refuse_credentials(option: str, value: str | None, advice: str = CREDENTIALS_ADVICE) -> None:
    """Refuse, in one line that shows it redacted, a value of `option` holding a URI with a password or a
    secret query value: ModSAR takes no credentials in a URI where it would print them or write them to
    disk (every command but `modsar search`, which takes them out of its own URIs: sweep.credentials)."""
    if value is not None and holds_credentials(value):
        raise ModsarError(
            f"{option} {redact(value)}: a URI here may carry no password or token (ModSAR would print it or "
            f"write it to disk); {advice}"
        )


def refuse_environment_credentials(skip: tuple[str, ...] = ()) -> None:
    """Refuse, naming the variable, a URI with credentials in MODSAR_DATA, RAY_ADDRESS or
    RAY_DASHBOARD_ADDRESS (those in `skip` aside): ModSAR prints and records the folders and addresses it
    uses."""
    for name, advice in URI_VARIABLES.items():
        if name not in skip:
            refuse_credentials(f"${name}", os.environ.get(name), advice)
            if name.startswith("RAY_"):
                refuse_address_user(f"${name}", os.environ.get(name))


def refuse_address_user(option: str, address: str | None) -> None:
    """Refuse a Ray address written with a user (and maybe a password) but no scheme, `user:pw@host:6379`,
    which the URI reading (`uris_in`) does not see as one and so would print whole: a Ray address takes
    neither."""
    if address and "://" not in address and "@" in address:
        raise ModsarError(
            f"{option} {HIDDEN}@{address.rpartition('@')[2]}: {RAY_ADVICE}; drop what comes before '@'"
        )


PARTIAL_PREFIX = ".tmp-"  # a write in progress, or one a killed process left: listings skip hidden names


@contextlib.contextmanager
def atomic_write(path: str | Path, fs: pafs.FileSystem | None = None) -> Iterator[str]:
    """The name to write `path` under: a hidden temporary name beside it (".tmp-<random>-<name>", so the
    extension, which savefig reads, is kept), renamed onto `path` when the block ends and deleted when it
    raises. Every file ModSAR writes goes through here, except a prepared dataset's, which are written into a
    hidden staging folder renamed whole (data/store.py). `fs` is a pyarrow filesystem for an object store
    (its path without the scheme); local paths need none."""
    if fs is None:
        import pyarrow.fs as pafs

        fs, path = pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(str(path)))
    folder, _, name = str(path).rpartition("/")
    try:
        fs.create_dir(folder, recursive=True)
    except OSError as exc:
        raise write_error(path, exc) or exc from None
    tmp = f"{folder}/{PARTIAL_PREFIX}{uuid.uuid4().hex[:12]}-{name}"
    try:
        yield tmp
        fs.move(tmp, str(path))
    except BaseException as exc:
        with contextlib.suppress(OSError):
            fs.delete_file(tmp)
        if isinstance(exc, OSError) and (error := write_error(path, exc)) is not None:
            raise error from None  # a full disk or a read-only folder: one line, the temporary file gone
        raise


# errno -> what a write that failed with it met; anything else is not the disk's doing and stays as raised
WRITE_FAULTS = {
    errno.ENOSPC: "no space left on the device (the disk is full)",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the filesystem is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "the operation is not permitted",
    errno.EFBIG: "the file is too large for the filesystem",
}


def write_fault(exc: BaseException) -> str | None:
    """What a full disk, a read-only filesystem or a folder without write permission did to a write, from
    `exc`'s errno (pyarrow's errors carry it too); None for any other error."""
    return WRITE_FAULTS.get(exc.errno or 0) if isinstance(exc, OSError) else None


def fault_line(exc: BaseException) -> str | None:
    """The one line (no `modsar: error:` prefix) that an OSError of a full disk, a read-only filesystem or a
    denied permission becomes where it reached the CLI unhandled; None for any other error. Permission is
    denied to reads too, so EACCES and EPERM are said as `cannot access`, never as a write's fault."""
    fault = write_fault(exc)
    if fault is None or not isinstance(exc, OSError):
        return None
    where = f" {redact(str(exc.filename))}" if exc.filename else ""
    verb = "cannot access" if exc.errno in (errno.EACCES, errno.EPERM) else "cannot write"
    return f"{verb}{where}: {fault}"


def write_error(path: str | Path, exc: BaseException) -> ModsarError | None:
    """The one line a write fault becomes (None where `exc` is no write fault): which file, what happened,
    and that nothing was left half-written, so a full disk or a read-only root never ends in a traceback."""
    fault = write_fault(exc)
    if fault is None:
        return None
    return ModsarError(
        f"cannot write {path}: {fault}; nothing was left half-written. Free some space, or write to a "
        "folder you can write to, and run the command again"
    )


NAME_BYTES = 128  # every file name made from a name (".staging-<name>-XXXXXXXX", "curves_<name>.png" under
# atomic_write's ".tmp-<12>-" prefix) then stays well under the 255 bytes filesystems allow
NAME_PUNCTUATION = "-_.+@=,~()"  # besides letters, digits and inner spaces
NAME_RULE = (
    f"a name is 1 to {NAME_BYTES} bytes of letters, digits, spaces and {' '.join(NAME_PUNCTUATION)}, "
    "starting with a letter or digit and not ending in a space"
)


def check_name(value: object, what: str) -> str:
    """`value` as a dataset or experiment name, or one ModsarError naming `what` (the option or key), the
    value and the rule. A name becomes a folder under a root (<data-dir>/<name>, <results>/<name>), so it
    may not be a path ('..', 'a/b'), hide itself ('.x', skipped by listings), read as an option ('-x'), hold
    control characters or look-alike slashes, or make a file name longer than filesystems allow. One check
    for every place a name enters: CLI options, the Python API, config values, data prepare, search, train."""
    problem = _name_problem(value)
    if problem is None:
        return str(value)
    shown = repr(value) if not isinstance(value, str) or len(value) <= 60 else f"{value[:40]!r}..."
    raise ModsarError(f"{what} {shown} {problem}; {NAME_RULE}")


def _name_problem(value: object) -> str | None:
    """What makes `value` no name (see check_name), or None."""
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not text (in YAML, quote it)"
    if not value.strip():
        return "is empty" if not value else "is only spaces"
    if value in (".", ".."):
        return "is a path (the folder itself or the one above), not a name"
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > NAME_BYTES:
        return f"is {size} bytes long"
    for char in value:
        if char in "/\\" or char in "\u2044\u2215\u29f8\uff0f\uff3c":
            return f"holds the path separator {char!r}"
        if not char.isprintable():
            return f"holds the control or invisible character {char!r}"
        if not (char.isalnum() or char == " " or char in NAME_PUNCTUATION):
            return f"holds the character {char!r}"
    if not value[0].isalnum():
        return f"starts with {value[0]!r}"
    if value[-1] == " ":
        return "ends in a space"
    return None


name_problem = _name_problem  # public: check_name's reason that a value is no name, or None (a name)


LOCK_PREFIX = ".lock-"  # `<root>/.lock-<name>`: hidden, so no listing of datasets or experiments shows it
_UNLOCKABLE = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}  # filesystems without flock


@contextlib.contextmanager
def writer_lock(
    root: str | Path, name: str, what: str, *, shared: bool = False, wait: bool = False
) -> Iterator[None]:
    """Hold an OS lock (flock) on `<root>/.lock-<name>` while the block writes `<root>/<name>`, so that a
    second writer of the same dataset or experiment is refused in one line naming `what` (with `wait`: waits
    for the first) instead of racing it. `shared` writers never collide with one another (a training adds
    one row file of its own) and share the lock; an exclusive holder (a search, which rewrites rows and may
    delete its folder; a dataset's preparation) excludes every other. The kernel frees the lock of a killed
    process. The last holder removes the lock file, and a process that locked a file removed meanwhile
    locks the new one, so no two writers ever hold two different files; a root the lock had to create is
    removed again if the block left it empty (a refused command leaves nothing). A URI root (s3://...) has
    no such lock and is written unlocked."""
    if is_uri(root):
        yield
        return
    folder = Path(root).expanduser().absolute()
    missing = [f for f in (folder, *folder.parents) if not f.exists()]  # deepest first
    fd, locked = _take_lock(folder / f"{LOCK_PREFIX}{name}", what, shared, wait)
    try:
        yield
    finally:
        _release_lock(fd, folder / f"{LOCK_PREFIX}{name}", locked)
        for created in missing:
            try:
                created.rmdir()  # only if empty: the block (or another writer) wrote nothing there
            except OSError:
                break


# A holder's release takes the lock exclusive for a moment (flock has no atomic upgrade: _release_lock tries
# LOCK_EX to learn whether it is the last holder), so a lock refused without `wait` is tried again for this
# long before the refusal: a writer that starts while another one ends is not turned away.
RELEASE_GRACE_S = 0.5


def _take_lock(lock: Path, what: str, shared: bool, wait: bool) -> tuple[int, bool]:
    """(descriptor, whether it is locked) of the lock file, locked shared or exclusive; refused in one line
    where another process holds it (unless `wait`). A filesystem without flock is said once, and written
    unguarded. Each try opens the file afresh and keeps its lock only while that file is still the one at
    the path (a releasing holder may have removed it meanwhile): no two writers hold two different files."""
    import fcntl

    refuse_at = time.monotonic() + RELEASE_GRACE_S
    for _attempt in range(1000):
        fd = _open_or_refuse(lock)
        if fd is None:  # another writer's empty root, removed between mkdir and open
            continue
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            os.close(fd)
            if isinstance(exc, BlockingIOError):
                if time.monotonic() < refuse_at:  # maybe a holder ending: its exclusive moment passes
                    time.sleep(0.01)
                    continue
                raise ModsarError(
                    f"{what} is being written by another modsar process right now (it holds {lock}); "
                    "wait for that one to end, or choose another name"
                ) from None
            if exc.errno not in _UNLOCKABLE:
                raise
            print(
                f"modsar: warning: {lock.parent} cannot be locked ({exc.strerror}); writing {what} "
                "unguarded against a second writer",
                file=sys.stderr,
            )
            return -1, False
        if _same_file(fd, lock):
            return fd, True
        os.close(fd)  # its last holder removed it while this process waited: lock the file there now
    raise ModsarError(f"cannot lock {lock}: other processes keep removing it; run the command again")


def _open_or_refuse(lock: Path) -> int | None:
    """A descriptor of the lock file (its folder made where missing), None where the folder vanished
    meanwhile, or one ModsarError: a write fault where the folder or file cannot be written, a read fault
    (never said to be a write's) where another user's lock file cannot even be read."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        return _open_lock(lock)
    except FileNotFoundError:
        return None
    except _UnreadableLock as exc:
        raise ModsarError(
            f"cannot read the lock file {lock}: {exc.strerror or exc} (another user's file, not readable to "
            "you); ask its owner to make it readable (chmod a+r), or write to another folder"
        ) from None
    except OSError as exc:
        raise write_error(lock, exc) or ModsarError(
            f"cannot open the lock file {lock}: {exc.strerror or exc}; remove what is there, or write "
            "to another folder"
        ) from None


def _same_file(fd: int, lock: Path) -> bool:
    """Whether the descriptor is still the file at `lock`'s path."""
    try:
        here = os.stat(lock, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _release_lock(fd: int, lock: Path, locked: bool) -> None:
    """Remove the lock file where this process is its last holder (the exclusive lock taken without waiting
    says so), then release it by closing the descriptor. The upgrade of a shared lock is not atomic (the
    kernel drops the shared lock first): a failed one leaves this process no lock, which it is giving up
    anyway, and the exclusive moment of a successful one is what `_take_lock`'s grace period waits out."""
    import fcntl

    if fd < 0:
        return
    try:
        if locked:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock.unlink(missing_ok=True)
    except OSError:  # another holder of a shared lock: the last one removes it
        pass
    finally:
        os.close(fd)


class _UnreadableLock(PermissionError):
    """The lock file exists and this user may neither write nor read it: a read's fault, not a write's."""


def _open_lock(lock: Path) -> int:
    """A descriptor of the lock file, created if missing (0666 less the umask, so other users of a shared
    folder can lock it too), never through a symlink; read-only where another user's file is not writable
    (flock locks a read-only descriptor as well)."""
    flags = os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(lock, flags | os.O_RDWR, 0o666)
    except PermissionError:
        if not lock.is_file():
            raise  # the folder refuses a new file: a write fault
    try:
        return os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except PermissionError as exc:
        raise _UnreadableLock(exc.errno, exc.strerror, str(lock)) from None


def write_text(path: str | Path, text: str) -> Path:
    with atomic_write(path) as tmp:
        Path(tmp).write_text(text)
    return Path(path)


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the headless Agg backend (clusters and CI have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def refuse_empty_folder(option: str, value: str | Path | None) -> None:
    """Refuse a folder option given as '' (or blanks): to one part of a command the current folder, to
    another the filesystem's root, so a search once wrote its rows here and its state under /."""
    if value is not None and not str(value).strip():
        raise ModsarError(f"{option} is empty: name a folder, or leave {option} out for its default")


def ensure_writable_dir(path: str | Path, flag: str, *, write: bool = True) -> None:
    """Refuse, in one line naming `flag`, a folder path that cannot be one: it is, or lies under, an existing
    file; with `write`, also a local folder (the path or its nearest existing parent) that this user cannot
    write. Commands call it before any work, so that no result is computed and then lost. URIs (s3://...) are
    left to their filesystem."""
    if "\x00" in str(path):  # no filesystem takes one; Path.exists would raise ValueError
        raise ModsarError(f"{flag} {str(path)!r} holds a NUL byte, which no path can; name a folder")
    if is_uri(path):
        return
    given = Path(path).expanduser()
    folder = given.absolute()
    while not folder.exists() and folder != folder.parent:
        if folder.is_symlink():  # a dangling link: mkdir would fail on it
            raise ModsarError(
                f"{flag} {path}: {folder} is a broken link; name a folder (it is created if missing)"
            )
        folder = folder.parent
    if not folder.is_dir():
        where = "is a file" if folder == given.absolute() else f"lies under the file {folder}"
        raise ModsarError(f"{flag} {path} {where}, not a folder; name a folder (it is created if missing)")
    if write and not os.access(folder, os.W_OK | os.X_OK):
        raise ModsarError(
            f"{flag} {path}: cannot write to the folder {folder} (permissions or a read-only "
            "filesystem); name a folder you can write to"
        )


def save_figure(fig: Figure, path: Path) -> Path:
    plt = pyplot()
    try:
        with atomic_write(path) as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)
    return path


def write_parquet(frame: pd.DataFrame, path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_write(path) as tmp:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)
    return path


def finite(value: Any) -> Any:
    """`value` with every NaN or infinite float (numpy scalars included) as None and numpy scalars and arrays
    as Python values, inside dicts, lists and tuples: strict JSON readers (jq, JavaScript, Go) refuse NaN and
    Infinity, and a measure undefined on short data or a missing metric is NaN."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar or array
        return finite(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(value: Any, *, indent: int | None = 2, default: Any = None) -> str:
    """The one way ModSAR writes JSON (--json output, every .json file): strict, non-finite numbers null."""
    return json.dumps(finite(value), indent=indent, default=default, allow_nan=False)
