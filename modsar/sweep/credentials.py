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
token is RAY_AUTH_TOKEN). Other URIs with a password are refused in one line, and so are an --mlflow URI
with a token in its query and, on an existing cluster, one with a password (`refuse_on_a_cluster`). Every
other command refuses any URI with a password (modsar.outputs.refuse_credentials).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from urllib.parse import unquote

from modsar.errors import ModsarError
from modsar.outputs import (  # redact: every command's messages use it (outputs)
    HIDDEN,
    holds_credentials,
    redact,
    refuse_address_user,
    uris_in,
)

MLFLOW_ADVICE = (
    "give MLflow the credentials through MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or "
    "MLFLOW_TRACKING_TOKEN) instead, and drop them from the URI (a database URI: through its driver's own "
    "variables or files, e.g. PGPASSWORD or ~/.pgpass)"
)
_MLFLOW: dict[str, tuple[str, str, str]] = {}  # redacted URI -> (URI without user info, user, password)
_RESULTS: dict[str, tuple[str, str]] = {}  # S3 URI without user info -> (access key, secret key)


def take_secrets(option: str, uri: str | None) -> str | None:
    """The form of `option`'s URI a search may keep, write and print; its credentials stay in this process.

    --mlflow: the redacted URI (the MLflow client gets the credentials from `mlflow_env`, or, for a database
    URI, which has no such variables, the URI itself from `mlflow_uri`), but a token in its query is refused;
    --results: an S3 URI without its keys (`results_env`); --address, and any other URI with a password:
    refused in one line. The URI is read as every command reads it (modsar.outputs.uris_in): the password
    runs to its last '@', so one holding '/' is taken out whole."""
    if option == "--address":
        refuse_address_user(option, uri)
    if uri is None or "://" not in uri:
        return uri
    if f":{HIDDEN}@" in uri or f"={HIDDEN}" in uri:  # copied from search.json or a message: no secret left
        if option == "--mlflow" and uri in _MLFLOW:  # a request made again from one this process holds
            return uri
        raise ModsarError(
            f"{option} {uri}: the password is hidden (***); give the URI with its password, or the "
            "credentials through the environment and a URI without them"
        )
    found = uris_in(uri)
    if not any(each.secret for each in found):  # no password: a user name alone (hdfs://user@host) is none
        return uri
    shown = redact(uri)
    whole = found[0] if len(found) == 1 and found[0].text == uri else None  # the value is one URI
    if option == "--mlflow" and whole is not None and whole.secret_queries:
        raise ModsarError(  # the MLflow client would hold it in MLFLOW_TRACKING_URI, which children inherit
            f"--mlflow {shown}: a token or password in the URI's query is not taken; {MLFLOW_ADVICE}"
        )
    if option == "--mlflow" and whole is not None:
        web = whole.scheme in ("http", "https")
        password = unquote(whole.password or "")
        _MLFLOW[shown] = (whole.bare, unquote(whole.user), password) if web else (uri, "", "")
        return shown
    if option == "--results" and whole is not None and whole.scheme == "s3" and not whole.secret_queries:
        _RESULTS[whole.bare] = (unquote(whole.user), unquote(whole.password or ""))
        return whole.bare
    where = (
        "RAY_AUTH_TOKEN (the cluster's token)"
        if option == "--address"
        else "the environment or a credential file (AWS_* variables, ~/.aws)"
    )
    raise ModsarError(
        f"{option} {shown} carries a secret, which ModSAR would write into the search's files; give it "
        f"through {where} instead and drop it from the URI"
    )


def refuse_on_a_cluster(address: str | None, mlflow: str | None, results: str | None = None) -> None:
    """Refuse, in one line, credentials given in a URI when the search joins an existing Ray cluster
    (`address`, or RAY_ADDRESS, other than 'local'): Ray's GCS records the driver's command line (its job's
    entrypoint) on the cluster, where `ray list jobs` and the dashboard show it, and the cluster's workers
    never get what this process keeps. An --mlflow URI that carries (or carried) a password, and S3 keys in
    --results, are refused; the nodes take them from their own environment."""
    address = address or os.environ.get("RAY_ADDRESS")
    if not address or address == "local":
        return
    if mlflow is not None and (holds_credentials(mlflow) or mlflow in _MLFLOW):
        raise ModsarError(
            f"--mlflow {redact(mlflow)}: a search on an existing Ray cluster (--address or RAY_ADDRESS) "
            f"would leave the password on the cluster, which records the command line; {MLFLOW_ADVICE}"
        )
    if results is not None and (holds_credentials(results) or results_env(results)):
        raise ModsarError(
            f"--results {redact(results)}: the S3 keys given in the URI are not sent to the cluster's "
            "workers, and the cluster records the command line; give the cluster's nodes their S3 "
            "credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws, a role) and drop them from the URI"
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


# what the MLflow client reads or sets in os.environ (set_tracking_uri sets MLFLOW_TRACKING_URI for children)
MLFLOW_VARIABLES = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_ALLOW_FILE_STORE",
)


@contextlib.contextmanager
def mlflow_session(shown: str | None) -> Iterator[None]:
    """MLflow's credential variables for the --mlflow URI `shown` (`mlflow_env`) while the block runs, and
    afterwards MLflow's variables and its tracking URI as they were: Ray's MLflow logger sets the URI it is
    given (a database URI with its password) as MLflow's tracking URI, which MLflow puts into
    MLFLOW_TRACKING_URI for every later child process of this one to inherit."""
    saved = {name: os.environ.get(name) for name in MLFLOW_VARIABLES}
    try:
        with environment(mlflow_env(shown)):
            yield
    finally:
        if shown is not None and "mlflow" in sys.modules:
            import mlflow

            mlflow.set_tracking_uri(saved["MLFLOW_TRACKING_URI"])  # type: ignore[arg-type]  # None: unset
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
