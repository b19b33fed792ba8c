"""The Ray cluster a search runs on, kept to what the search needs: a local cluster makes no connection beyond
127.0.0.1, keeps its token private, and an `--address` is checked before Ray is asked to join it.

What a local `ray.init` reaches out to, and what turns each off (tests/test_hostile_search.py traces every
connect/sendto of a search under strace):
- the node address: Ray takes the machine's outward address by connecting a UDP socket to 8.8.8.8:53
  (`node_ip_address_from_perspective`); the local-only switch (ray_session._loopback_only) makes it
  127.0.0.1, and the same switch keeps an `--address` on this machine (127.0.0.1:PORT, localhost:PORT)
  from being rewritten to the outward address by the same probe.
- the dashboard process, started even without the dashboard for its usage-stats module, asks the cloud
  metadata servers (169.254.169.254, metadata.google.internal) which cloud it runs on, whether usage stats
  are on or not. It is started with HTTP(S) proxies that point at a closed 127.0.0.1 port, so those requests
  fail at once on loopback without resolving a name (`quiet_dashboard`); 127.0.0.1 itself is exempt.
- usage stats: off (RAY_USAGE_STATS_ENABLED=0; ray.init sets it for a local cluster too).
- the token: a local cluster turns on Ray's token authentication and writes ~/.ray/auth_token with the
  user's umask (0644: readable by every user). `private_token` writes it first, 0600 (a temporary file
  linked into place), makes an existing one private, and refuses a token path that is a symbolic link.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from modsar.errors import ModsarError
from modsar.sweep.credentials import environment, redact

PROBE_TIMEOUT_S = 3.0
LOCAL_ADDRESSES = ("auto", "local")  # Ray's own words for "the cluster on this machine" / "start one"


def probe(host: str, port: int, what: str, fix: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Refuse in one line, within `timeout` seconds, where nothing accepts a TCP connection at host:port."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        reason = exc.strerror or ("timed out" if isinstance(exc, TimeoutError) else type(exc).__name__)
        raise ModsarError(f"nothing answers at {what} ({reason}); {fix}") from None


def host_and_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a Ray address (HOST:PORT, ray://HOST:PORT, [v6]:PORT), or None where it names none."""
    if address in LOCAL_ADDRESSES:
        return None
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ModsarError(
            f"--address {redact(address)!r} is not a Ray address; use HOST:PORT (the head's GCS port, "
            "6379 by default) or ray://HOST:10001"
        )
    return parts.hostname, port


def check_address(address: str) -> None:
    """Refuse, in a few seconds and one line, an --address where nothing listens: Ray itself retries an
    unreachable address for many minutes before it gives up."""
    found = host_and_port(address)
    if found is not None:
        host, port = found
        probe(
            host,
            port,
            f"--address {redact(address)}",
            "start the cluster (`ray start --head`) or fix --address (the head's HOST:PORT)",
        )


def is_loopback(address: str) -> bool:
    """Whether an --address names a cluster on this machine by a loopback host (127.0.0.1, localhost, ::1)."""
    found = host_and_port(address)
    if found is None:
        return False
    if found[0] == "localhost":
        return True
    try:
        return ipaddress.ip_address(found[0]).is_loopback
    except ValueError:
        return False


def _closed_loopback_port() -> int:
    """A 127.0.0.1 port that refuses every connection: bound by this process and never listening."""
    global _HELD_PORT
    if _HELD_PORT is None:
        _HELD_PORT = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _HELD_PORT.bind(("127.0.0.1", 0))
    return int(_HELD_PORT.getsockname()[1])


_HELD_PORT: socket.socket | None = None


# The Ray this module's private hooks were written against and tested with (tests/test_ray_contracts.py holds
# the installed Ray to them): pyproject.toml asks for ray>=2.44 and sets no upper bound, so a newer Ray that
# drops a hook is refused in one line (`ray_hook`) rather than with a traceback.
TESTED_RAY = "2.60.0"


def ray_hook(module: str, name: str) -> Any:
    """`module.name` of Ray's private API, or one ModsarError naming the Ray versions ModSAR supports."""
    import importlib

    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        import ray

        raise ModsarError(
            f"Ray {ray.__version__} has no {module}.{name}, which ModSAR needs to start a local cluster "
            f"that stays off the network; install a supported Ray (>=2.44, tested with {TESTED_RAY}): "
            f"pip install 'ray[default,tune]=={TESTED_RAY}'"
        ) from None


@contextlib.contextmanager
def quiet_dashboard() -> Iterator[None]:
    """While a local cluster starts: its dashboard process is started with HTTP(S) proxies at a closed
    127.0.0.1 port (and 127.0.0.1, localhost and ::1 exempt), so that its cloud-metadata requests end at once
    on loopback; the other Ray processes are started with the environment as it was. Ray's Node starts the
    dashboard through the module attribute `ray._private.services.start_api_server`, swapped here for the
    while (a private API: `ray_hook` refuses a Ray without it)."""
    start_api_server = ray_hook("ray._private.services", "start_api_server")
    from ray._private import services

    dead = f"http://127.0.0.1:{_closed_loopback_port()}"
    proxies = {name: dead for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
    exempt = {name: "127.0.0.1,localhost,::1" for name in ("no_proxy", "NO_PROXY")}

    def start_dashboard(*args: Any, **kwargs: Any) -> Any:  # Ray's (webui url, process info), passed on
        with environment({**proxies, **exempt}):
            return start_api_server(*args, **kwargs)

    services.start_api_server = start_dashboard
    try:
        with environment({"RAY_USAGE_STATS_ENABLED": "0"}):
            yield
    finally:
        services.start_api_server = start_api_server


def token_path() -> Path:
    """Where Ray keeps the token it makes for a local cluster (ray's authentication_token_setup)."""
    return Path.home() / ".ray" / "auth_token"


@contextlib.contextmanager
def private_token() -> Iterator[None]:
    """Around a local ray.init: Ray's token file, readable by its user only (0600). Ray writes a missing one
    with the umask's mode, so it is written here first, as Ray would (a random hex token), then Ray reads it;
    one that exists (written by an earlier Ray) is made private afterwards. Nothing is done where the token
    comes from elsewhere (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH) or authentication is off.

    The token is written whole to a temporary file beside it, created 0600 (never through a link), and
    linked into place, so Ray never reads half a token and one another process wrote first is kept. A token
    path that is a symbolic link is refused in one line: no mode is changed where a link points."""
    path = token_path()
    ours = os.environ.get("RAY_AUTH_MODE", "token").lower() != "disabled" and not (
        os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
    )
    if ours and path.is_symlink():
        raise ModsarError(
            f"Ray's token file {path} is a symbolic link (to {os.path.realpath(path)}); ModSAR makes the "
            "token private and changes no file through a link: replace the link with the file itself, or "
            "set RAY_AUTH_TOKEN_PATH to the file"
        )
    if ours and not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_token(path)
    try:
        yield
    finally:
        if ours:
            _make_private(path)


def _write_token(path: Path) -> None:
    """A random hex token in `path`, written 0600 under a temporary name beside it and linked into place: a
    token that another process wrote there first is kept (and made private afterwards)."""
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(6)}")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_hex(32))
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, path)  # atomic, and never over a token another process wrote first
        except FileExistsError:
            pass
        except OSError:  # a filesystem without hard links: renamed into place where still missing
            if not os.path.lexists(path):
                os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _make_private(path: Path) -> None:
    """Mode 0600 for the user's own token file; a missing file, or a link made while Ray ran, is left."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # no wait on a FIFO
    except OSError:  # missing, or a symbolic link (ELOOP): nothing is changed through it
        return
    try:
        info = os.fstat(descriptor)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077:
            os.fchmod(descriptor, 0o600)
    finally:
        os.close(descriptor)
