"""Credentials a user writes into a URI (`--mlflow http://user:token@host`, `--results s3://key:secret@bucket`)
never reach a file or a printed line.

A search writes its request to search.json and Tune pickles its callbacks (with the MLflow URI) into
tuner.pkl; errors and tracebacks print the URIs they met. So the request a search runs on holds no secret:
`SearchRequest` takes the credentials out of its URIs as it is made (`take_secrets`), and keeps them in this
process only. The MLflow URI becomes its redacted form (`http://user:***@host`, what search.json records and
messages show); the MLflow client gets the URI without user info and the credentials in its documented
environment variables, MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (`mlflow_env`), while the search
runs. An S3 results URI becomes `s3://bucket/...` with the keys in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY,
which pyarrow's S3 filesystem reads (`results_env`); a Ray address takes no credentials at all (a cluster's
token is RAY_AUTH_TOKEN). Other URIs with a password are refused in one line.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit, urlunsplit

from modsar.errors import ModsarError

HIDDEN = "***"
# a URI within a text: up to whitespace or a quote
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"`<>]*")
# ?token=... &password=... : query values whose name says they are secret
_SECRET_QUERY = re.compile(
    r"(?P<name>[?&][^=&#\s]*(?:secret|token|passw|pwd|credential|signature|sig|api_?key)[^=&#\s]*=)"
    r"(?P<value>[^&#\s]*)",
    re.IGNORECASE,
)

_MLFLOW: dict[str, tuple[str, str, str]] = {}  # redacted URI -> (URI without user info, user, password)
_RESULTS: dict[str, tuple[str, str]] = {}  # S3 URI without user info -> (access key, secret key)


def redact(text: str) -> str:
    """`text` with the password of every URI in it replaced by *** (`http://user:***@host`), and the values of
    query parameters named like secrets (token, password, signature) too: what may be written or printed. The
    password runs to the URI's last '@', so one with a raw '/' or '@' (an AWS secret key pasted as it is) is
    hidden whole."""

    def hide(match: re.Match) -> str:
        scheme, _, rest = match.group(0).partition("://")
        info, at, host = rest.rpartition("@")
        user, colon, _ = info.partition(":")
        if at and colon and "/" not in user:
            rest = f"{user}:{HIDDEN}@{host}"
        return _SECRET_QUERY.sub(rf"\g<name>{HIDDEN}", f"{scheme}://{rest}")

    return _URI.sub(hide, text)


def _split(uri: str) -> tuple[str, str, str | None]:
    """(URI without user info, user, password or None) of `uri`."""
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri, "", None
    info, _, host = parts.netloc.rpartition("@")
    user, sep, password = info.partition(":")
    return urlunsplit(parts._replace(netloc=host)), unquote(user), unquote(password) if sep else None


def take_secrets(option: str, uri: str | None) -> str | None:
    """The form of `option`'s URI a search may keep, write and print; its credentials stay in this process.

    --mlflow: the redacted URI (the MLflow client gets the credentials from `mlflow_env`, or, for a database
    URI, which has no such variables, the URI itself from `mlflow_uri`); --results: an S3 URI without its keys
    (`results_env`); --address, and any other URI with a password: refused in one line."""
    if uri is None or "://" not in uri:
        return uri
    if f":{HIDDEN}@" in uri or f"={HIDDEN}" in uri:  # copied from search.json or a message: no secret left
        if option == "--mlflow" and uri in _MLFLOW:  # a request made again from one this process holds
            return uri
        raise ModsarError(
            f"{option} {uri}: the password is hidden (***); give the URI with its password, or the "
            "credentials through the environment and a URI without them"
        )
    if redact(uri) == uri:  # no password: a user name alone (hdfs://user@host) is no secret
        return uri
    shown, (clean, user, password) = redact(uri), _split(uri)
    if option == "--mlflow":
        web = urlsplit(uri).scheme in ("http", "https")
        _MLFLOW[shown] = (clean, user, password or "") if web else (uri, "", "")
        return shown
    if (
        option == "--results"
        and urlsplit(uri).scheme == "s3"
        and password is not None
        and redact(clean) == clean
    ):
        _RESULTS[clean] = (user, password)
        return clean
    where = "RAY_AUTH_TOKEN (the cluster's token)" if option == "--address" else "the environment"
    raise ModsarError(
        f"{option} {shown} carries a secret, which ModSAR would write into the search's files; give it "
        f"through {where} instead and drop it from the URI"
    )


def mlflow_uri(shown: str) -> str:
    """The URI the MLflow client is given for the --mlflow URI a request holds: without user info where the
    credentials were taken out (they come from `mlflow_env`)."""
    return _MLFLOW[shown][0] if shown in _MLFLOW else shown


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`values` set in os.environ while the block runs; the variables as they were afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def mlflow_env(shown: str | None) -> dict[str, str]:
    """MLflow's credential variables for a --mlflow URI that carried credentials, else {}."""
    _, user, password = _MLFLOW.get(shown or "", ("", "", ""))
    return {"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password} if user else {}


def results_env(results: str) -> dict[str, str]:
    """The S3 keys an --results URI carried, as the variables pyarrow's S3 filesystem reads, else {}."""
    for clean, (key, secret) in _RESULTS.items():
        if results == clean or results.startswith(clean.rstrip("/") + "/"):
            return {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
    return {}
