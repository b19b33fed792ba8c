"""Credentials in URIs are never printed or written to disk, by any command (issue 39): every command but
`modsar search` refuses a URI with a password or a secret query value in one line that shows it redacted;
a search refuses them where it cannot keep them to itself (on an existing Ray cluster, in an --mlflow
URI's query), and leaves MLflow's variables as they were once it ends."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from modsar.cli import main
from modsar.errors import ModsarError
from modsar.outputs import holds_credentials, is_uri, redact, refuse_credentials, uris_in
from modsar.sweep import SearchRequest

SECRET = "SUPERSECRET"
S3 = f"s3://AKIAFAKE:{SECRET}@bucket/x"
TOKEN = f"s3://bucket/x?token={SECRET}"
MODSAR = Path(sys.executable).parent / "modsar"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SEARCH = ["search", "--space", "quickstart", "--dataset", "synthetic", "--no-estimate", "--quiet"]
DEAD = f"127.0.0.1:{closed_port()}"  # never asked: every refusal comes before a connection

REFUSED = {
    "train": ["train", "--dataset", "synthetic", "--results", S3],
    "train-no-checkpoint": ["train", "--dataset", "synthetic", "--no-checkpoint", "--results", S3],
    "train-token": ["train", "--dataset", "synthetic", "--no-checkpoint", "--results", TOKEN],
    "train-override": ["train", "--dataset", "synthetic", f"data.path={TOKEN}"],
    "results": ["results", "--results", S3],
    "results-json": ["results", "--json", "--results", TOKEN],
    "report": ["report", "--results", S3],
    "report-out": ["report", "--out", S3],
    "analyze": ["analyze", "--experiment", "e", "--results", S3],
    "evaluate": ["evaluate", "--checkpoint", f"{S3}/ar.pt"],
    "generate": ["generate", "--checkpoint", f"{S3}/ar.pt", "--steps", "2"],
    "data-stats": ["data", "stats", "synthetic", "--data-dir", S3],
    "search-on-a-cluster-results": [*SEARCH, "--address", DEAD, "--results", S3],
    "search-on-a-cluster-mlflow": [*SEARCH, "--address", DEAD, "--mlflow", f"http://alice:{SECRET}@{DEAD}"],
    "search-mlflow-query-token": [*SEARCH, "--mlflow", f"http://{DEAD}/?access_token={SECRET}"],
    "search-override": [*SEARCH, f"data.path={TOKEN}"],
    # the password taken out before the URI is parsed: no ValueError from urlsplit's port, no traceback
    "search-mlflow-password-with-slash": [*SEARCH, "--mlflow", f"http://alice:pa/{SECRET}@{DEAD}"],
    "search-mlflow-port-no-number": [*SEARCH, "--mlflow", f"http://alice:{SECRET}@127.0.0.1:port"],
    "search-mlflow-unclosed-ipv6": [
        *SEARCH,
        "--mlflow",
        f"http://alice:{SECRET}@[::1:5999",
    ],  # once a ValueError
    "submit-env": ["submit", "--address", f"http://{DEAD}", "--env", f"X={S3}", "--", "results"],
    # no scheme, so no URI to the redaction: it once came back whole in "nothing answers at --address ..."
    "search-address-user-no-scheme": [*SEARCH, "--address", f"user:{SECRET}@{DEAD}"],
    "search-address-token-no-scheme": [*SEARCH, "--address", f"{SECRET}@{DEAD}"],
    "submit-address-user-no-scheme": ["submit", "--address", f"u:{SECRET}@{DEAD}", "status", "raysubmit_x"],
}


def _leaks(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


@pytest.mark.parametrize("argv", REFUSED.values(), ids=REFUSED.keys())
def test_a_uri_with_credentials_is_refused_in_one_line_that_hides_them(argv, tmp_path, monkeypatch, capsys):
    """Refused before any work: exit 2, one line naming the option, the URI redacted, the secret nowhere in
    the output or in any file under the working folder (results, reports, Ray, the home folder)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, err
    assert err.startswith("modsar: error: ") and err.count("\n") == 1 and "***" in err, err
    assert SECRET not in out + err
    assert not _leaks(tmp_path)


def test_the_refusal_says_where_credentials_come_from(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--dataset", "synthetic", "--results", S3]) == 2
    err = capsys.readouterr().err
    assert "--results s3://AKIAFAKE:***@bucket/x" in err
    assert "AWS_ACCESS_KEY_ID" in err and "~/.aws" in err and "environment" in err


def test_the_installed_command_prints_no_secret(tmp_path):
    """`modsar train --results s3://KEY:SECRET@bucket/x`, as a user runs it: exit 2, one line, no secret."""
    env = {**os.environ, "MODSAR_DATA": str(tmp_path / "data"), "HOME": str(tmp_path / "home")}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [str(MODSAR), "train", "--dataset", "synthetic", "--no-checkpoint", "--results", S3],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert SECRET not in done.stdout + done.stderr and not _leaks(tmp_path)


def test_a_usage_error_quotes_no_secret(capsys):
    """argparse quotes what it did not understand: the URI it quotes is redacted."""
    with pytest.raises(SystemExit) as exited:
        main(["results", f"--bogus={TOKEN}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--bogus=s3://bucket/x?token=***" in err and SECRET not in err


def test_the_python_api_refuses_a_results_uri_with_credentials():
    import modsar

    with pytest.raises(ModsarError) as refused:
        modsar.train(dataset="synthetic", results=S3, checkpoint=False)
    assert SECRET not in str(refused.value) and "***" in str(refused.value)


def test_redacting_twice_changes_nothing():
    once = redact(f"{TOKEN}: and {S3}.")
    assert (
        SECRET not in once
        and redact(once) == once == "s3://bucket/x?token=*** and s3://AKIAFAKE:***@bucket/x."
    )
    with pytest.raises(ModsarError, match=r"--checkpoint s3://bucket/x\?token=\*\*\*: "):
        refuse_credentials("--checkpoint", TOKEN)
    refuse_credentials("--results", "s3://bucket/x")  # none: nothing to refuse
    refuse_credentials("--results", "hdfs://bob@namenode/x")  # a user name alone is no secret


# --- a search on an existing cluster, and MLflow's query and variables -------------------------------------


@pytest.mark.parametrize("how", ["--address", "RAY_ADDRESS"])
def test_an_mlflow_password_is_refused_on_an_existing_cluster(how, monkeypatch):
    """Ray's GCS records the driver's command line on the cluster: the MLflow password is refused there,
    with the variables to use instead."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    address = {"address": "10.0.0.1:6379"} if how == "--address" else {}
    if how == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    with pytest.raises(ModsarError) as refused:
        SearchRequest(space="quickstart", dataset="", mlflow=f"http://alice:{SECRET}@h:5000", **address)
    message = str(refused.value)
    assert message.startswith("--mlflow http://alice:***@h:5000: ") and "\n" not in message
    assert SECRET not in message and "existing Ray cluster" in message
    assert "MLFLOW_TRACKING_USERNAME" in message and "MLFLOW_TRACKING_TOKEN" in message


def test_a_local_search_still_takes_an_mlflow_password(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "local")  # a local cluster: nothing records the command elsewhere
    req = SearchRequest(space="quickstart", dataset="", mlflow=f"http://alice:{SECRET}@h:5000")
    assert req.mlflow == "http://alice:***@h:5000"


def test_joining_a_cluster_refuses_an_mlflow_password_taken_before(monkeypatch):
    """RAY_ADDRESS set after the request was made: refused when the search connects, before ray.init."""
    from modsar.sweep.ray_session import connect_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    req = SearchRequest(space="quickstart", dataset="", mlflow=f"http://alice:{SECRET}@h:5000")
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed_port()}")
    with pytest.raises(ModsarError, match="existing Ray cluster") as refused:
        connect_ray(req)
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("query", ["token", "password", "access_token", "api_key"])
def test_an_mlflow_uri_with_a_secret_in_its_query_is_refused(query, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ModsarError) as refused:
        SearchRequest(space="quickstart", dataset="", mlflow=f"https://h/?x=1&{query}={SECRET}")
    message = str(refused.value)
    assert message.startswith(f"--mlflow https://h/?x=1&{query}=***: ") and "\n" not in message
    assert SECRET not in message and "MLFLOW_TRACKING_TOKEN" in message


def test_mlflow_variables_are_as_they_were_after_a_search(monkeypatch):
    """Ray's MLflow logger sets the URI it gets (a database URI with its password) as MLflow's tracking URI,
    which MLflow puts into MLFLOW_TRACKING_URI: after the search both are as they were."""
    mlflow = pytest.importorskip("mlflow")
    from modsar.sweep import tuner
    from modsar.sweep.credentials import mlflow_uri

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    req = SearchRequest(space="quickstart", dataset="", mlflow=f"mysql://bob:{SECRET}@127.0.0.1:1/db")
    during = {}

    def search(req, plan, storage, search_json, clock, predicted):
        mlflow.set_tracking_uri(mlflow_uri(req.mlflow))  # what MLflowLoggerCallback.setup does
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # what tracking.mlflow_callback does
        during["uri"] = os.environ.get("MLFLOW_TRACKING_URI")
        raise RuntimeError("the search failed")

    monkeypatch.setattr(tuner, "_check_start", lambda *args: None)
    monkeypatch.setattr(tuner, "connect_ray", lambda req: None)
    monkeypatch.setattr(tuner, "_run_connected", search)
    with pytest.raises(RuntimeError):
        tuner._run_locked(req, None, "/nowhere", None)
    assert SECRET in during["uri"]  # the fake did what MLflow does
    assert "MLFLOW_TRACKING_URI" not in os.environ and "MLFLOW_ALLOW_FILE_STORE" not in os.environ
    assert SECRET not in mlflow.get_tracking_uri()


def test_a_tracking_uri_set_before_the_search_is_set_again_after_it(monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    from modsar.sweep.credentials import mlflow_session, mlflow_uri

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:/tmp/theirs")
    req = SearchRequest(space="quickstart", dataset="", mlflow=f"http://alice:{SECRET}@h:5000")
    with mlflow_session(req.mlflow):
        assert os.environ["MLFLOW_TRACKING_PASSWORD"] == SECRET
        mlflow.set_tracking_uri(mlflow_uri(req.mlflow))
    assert os.environ["MLFLOW_TRACKING_URI"] == "file:/tmp/theirs"
    assert "MLFLOW_TRACKING_PASSWORD" not in os.environ and "MLFLOW_TRACKING_USERNAME" not in os.environ
    assert mlflow.get_tracking_uri() == "file:/tmp/theirs"
    mlflow.set_tracking_uri(None)


# --- one reading of a URI: a password holding any character is hidden whole and refused --------------------

ODD = {
    "quote": "'",
    "double-quote": '"',
    "less": "<",
    "greater": ">",
    "backtick": "`",
    "space": " ",
    "slash": "/",
}


def _one_line_without_the_secret(code: int, out: str, err: str, root: Path, status: int = 2) -> None:
    assert code == status, err
    assert err.startswith("modsar: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and SECRET not in out + err
    assert not _leaks(root)


def test_the_password_runs_to_the_last_at_sign():
    (uri,) = uris_in(f"see http://alice:pa/{SECRET}@host/x?y=1 there")
    assert (uri.user, uri.password, uri.rest) == ("alice", f"pa/{SECRET}", "host/x?y=1")
    assert uri.bare == "http://host/x?y=1" and uri.secret
    (named,) = uris_in("hdfs://bob@namenode/x")  # a user name alone is no secret
    assert named.user == "bob" and named.password is None and not named.secret
    (path,) = uris_in("s3://bucket/a:b@c")  # the '@' of a path: no user info
    assert path.password is None and not holds_credentials("s3://bucket/a:b@c")


@pytest.mark.parametrize("char", ODD.values(), ids=ODD.keys())
def test_a_password_with_any_character_is_hidden_whole(char):
    uri = f"s3://AKIAFAKE:pa{char}{SECRET}@bucket/x"
    for text in (uri, f"--results {uri}: cannot open", f"'{uri}'", f"<{uri}>", f"`{uri}`"):
        shown = redact(text)
        assert SECRET not in shown and "s3://AKIAFAKE:***@bucket/x" in shown, shown
        assert redact(shown) == shown and holds_credentials(text) and not holds_credentials(shown)
    with pytest.raises(ModsarError) as refused:
        refuse_credentials("--results", uri)
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("char", ODD.values(), ids=ODD.keys())
def test_a_password_with_any_character_is_refused_by_a_command(char, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    code = main(["results", "--results", f"s3://AKIAFAKE:pa{char}{SECRET}@bucket/x"])
    out, err = capsys.readouterr()
    _one_line_without_the_secret(code, out, err, tmp_path)
    assert "--results s3://AKIAFAKE:***@bucket/x: " in err


@pytest.mark.parametrize("char", ODD.values(), ids=ODD.keys())
def test_a_search_takes_out_a_password_with_any_character(char, monkeypatch):
    """The request keeps the redacted URI, the MLflow client gets the URI without user info and the whole
    password in its variable: one reading of the URI for redacting and for taking the password out."""
    from modsar.sweep.credentials import mlflow_env, mlflow_uri

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    req = SearchRequest(space="quickstart", dataset="", mlflow=f"http://alice:pa{char}{SECRET}@h:5000/x")
    assert req.mlflow == "http://alice:***@h:5000/x" and mlflow_uri(req.mlflow) == "http://h:5000/x"
    assert mlflow_env(req.mlflow) == {
        "MLFLOW_TRACKING_USERNAME": "alice",
        "MLFLOW_TRACKING_PASSWORD": f"pa{char}{SECRET}",
    }


def test_an_mlflow_port_that_is_no_number_is_one_line():
    from modsar.sweep.plan import _reach_mlflow

    with pytest.raises(ModsarError, match=r"^--mlflow http://h:port: its port is not a number"):
        _reach_mlflow("http://h:port")


# --- the environment: MODSAR_DATA, RAY_ADDRESS, RAY_DASHBOARD_ADDRESS, and a data folder that is a URI ----

RAY = f"ray://u:{SECRET}@10.0.0.1:10001"
ENV_REFUSED = {
    "data-list": (["data", "list"], "MODSAR_DATA", S3),
    "data-stats": (["data", "stats", "synthetic"], "MODSAR_DATA", S3),
    "train": (["train", "--dataset", "synthetic", "--no-checkpoint"], "MODSAR_DATA", S3),
    "train-token": (["train", "--dataset", "synthetic", "--no-checkpoint"], "MODSAR_DATA", TOKEN),
    "results-ray-address": (["results"], "RAY_ADDRESS", RAY),
    "search-ray-address": (SEARCH, "RAY_ADDRESS", RAY),
    "search-ray-address-no-scheme": (SEARCH, "RAY_ADDRESS", f"u:{SECRET}@10.0.0.1:6379"),
    "results-ray-address-no-scheme": (["results"], "RAY_ADDRESS", f"{SECRET}@10.0.0.1:6379"),
    "train-dashboard-address": (["data", "list"], "RAY_DASHBOARD_ADDRESS", f"http://u:{SECRET}@h:8265"),
    "dashboard-address-no-scheme": (["data", "list"], "RAY_DASHBOARD_ADDRESS", f"{SECRET}@h:8265"),
}


@pytest.mark.parametrize("argv, name, value", ENV_REFUSED.values(), ids=ENV_REFUSED.keys())
def test_credentials_in_the_environment_are_refused_naming_the_variable(
    argv, name, value, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv(name, value)
    code = main(list(argv))
    out, err = capsys.readouterr()
    _one_line_without_the_secret(code, out, err, tmp_path)
    assert err.startswith(f"modsar: error: ${name} ") and "***" in err


@pytest.mark.parametrize(
    "argv, where",
    [
        (["data", "prepare", "synthetic", "--data-dir", "s3://bucket/x"], "--data-dir s3://bucket/x"),
        (["data", "list", "--data-dir", "s3://bucket/x"], "--data-dir s3://bucket/x"),
        (["data", "list"], "$MODSAR_DATA s3://bucket/x"),
    ],
)
def test_a_data_folder_is_a_local_path(argv, where, tmp_path, monkeypatch, capsys):
    """No URI is taken as a path (which would make folders of its parts, its password among them)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MODSAR_DATA", "s3://bucket/x")
    code = main(argv)
    out, err = capsys.readouterr()
    _one_line_without_the_secret(code, out, err, tmp_path)
    assert err.startswith(f"modsar: error: {where}: a data folder is a local path")
    assert not (tmp_path / "s3:").exists()


def test_joining_a_cluster_refuses_a_ray_address_with_credentials(monkeypatch):
    from modsar.sweep.ray_session import connect_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    req = SearchRequest(space="quickstart", dataset="")
    monkeypatch.setenv("RAY_ADDRESS", RAY)
    with pytest.raises(ModsarError, match=r"^\$RAY_ADDRESS ray://u:\*\*\*@10\.0\.0\.1:10001: ") as refused:
        connect_ray(req)
    assert SECRET not in str(refused.value) and "RAY_AUTH_TOKEN" in str(refused.value)


# --- submit --env: the cluster shows a job's variables ------------------------------------------------------


@pytest.mark.parametrize(
    "given",
    [
        f"MLFLOW_TRACKING_PASSWORD={SECRET}",
        f"MLFLOW_TRACKING_TOKEN={SECRET}",
        f"AWS_SECRET_ACCESS_KEY={SECRET}",
        f"aws_access_key_id={SECRET}",
        f"MY_CREDENTIALS={SECRET}",
        f"X={S3}",
        f"X=http://u:pa/{SECRET}@h",
    ],
)
def test_submit_refuses_secrets_in_env(given, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["submit", "--address", f"http://{DEAD}", "--env", given, "--", "results"])
    out, err = capsys.readouterr()
    _one_line_without_the_secret(code, out, err, tmp_path)
    assert err.startswith("modsar: error: --env ") and "***" in err
    assert "own environment or credential files" in err and "not --env" in err


def test_submit_takes_plain_env():
    from modsar.cli.submit import parse_env

    assert parse_env("MODSAR_DATA=/mnt/shared/datasets") == ("MODSAR_DATA", "/mnt/shared/datasets")
    assert parse_env("RESULTS=s3://bucket/x") == ("RESULTS", "s3://bucket/x")


# --- the Python API: every text argument, and the environment ---------------------------------------------


def _api_calls() -> dict:
    import modsar

    return {
        "results-root": lambda: modsar.results(root=S3),
        "results-root-path": lambda: modsar.results(root=Path(S3)),
        "results-where": lambda: modsar.results(where={"task": TOKEN}),
        "train-data-dir": lambda: modsar.train(dataset="synthetic", data_dir=S3, checkpoint=False),
        "train-config": lambda: modsar.train({"task": "ae", "data.path": TOKEN}, dataset="synthetic"),
        "train-overrides": lambda: modsar.train([f"data.path={TOKEN}"], dataset="synthetic"),
        "evaluate": lambda: modsar.evaluate(f"{S3}/ar.pt"),
        "load": lambda: modsar.load(f"{S3}/ar.pt"),
        "search-overrides": lambda: modsar.search(
            "quickstart", "synthetic", overrides=[f"data.path={TOKEN}"]
        ),
        "search-data-dir": lambda: modsar.search("quickstart", "synthetic", data_dir=S3),
    }


API = ["results-root", "results-root-path", "results-where", "train-data-dir", "train-config"]
API += ["train-overrides", "evaluate", "load", "search-overrides", "search-data-dir"]


@pytest.mark.parametrize("call", API)
def test_the_python_api_refuses_credentials_in_any_argument(call, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ModsarError) as refused:
        _api_calls()[call]()
    message = str(refused.value)
    assert SECRET not in message and "***" in message and "\n" not in message
    assert not _leaks(tmp_path)


def test_the_python_api_refuses_credentials_in_the_environment(tmp_path, monkeypatch):
    import modsar

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_ADDRESS", RAY)
    with pytest.raises(ModsarError, match=r"^\$RAY_ADDRESS ray://u:\*\*\*@") as refused:
        modsar.results(root=str(tmp_path / "results"))
    assert SECRET not in str(refused.value)


# --- a bug's exception: one redacted line, its traceback only when asked for, redacted too -----------------


def test_an_unexpected_error_is_one_redacted_line(tmp_path, monkeypatch, capsys):
    from modsar.cli import results

    def bug(args):
        raise RuntimeError(f"cannot open {S3} or http://alice:pa'{SECRET}@h\nsecond line")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(results, "run", bug)
    monkeypatch.delenv("MODSAR_TRACEBACK", raising=False)
    assert main(["results"]) == 1
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and SECRET not in out + err and "Traceback" not in err
    assert err.startswith(
        "modsar: internal error: RuntimeError: cannot open s3://AKIAFAKE:***@bucket/x or http://alice:***@h "
    )
    assert "MODSAR_TRACEBACK=1" in err
    monkeypatch.setenv("MODSAR_TRACEBACK", "1")
    assert main(["results"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "in bug" in err and SECRET not in err
    assert err.splitlines()[-1].startswith("modsar: internal error: RuntimeError: ")


def test_one_test_tells_a_uri_from_a_local_path():
    """Every module asks modsar.outputs.is_uri whether a results root, dataset folder or checkpoint place is
    a pyarrow URI: a scheme and '://', of a string or a path object."""
    from pathlib import Path

    assert all(is_uri(x) for x in ("s3://bucket/results", "file:///tmp/r", "gs://b", "hdfs://nn:8020/r"))
    assert not any(is_uri(x) for x in ("results", Path("/tmp/results"), "./s3:/x", "C:\\results"))
