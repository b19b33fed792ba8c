"""A search as a careless or hostile user meets it: secrets in URIs never reach a file or a printed line, a
local search makes no connection beyond loopback and keeps Ray's token private, a dead address or MLflow
server fails at once in one line, Ctrl-C stops the whole search and says how to resume it, a report over an
unfinished search says so, `modsar submit` from a wheel sends the package, and a second search in one process
goes where it is told."""

from __future__ import annotations

import ast
import base64
import contextlib
import ipaddress
import json
import os
import pickle
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from modsar.cli import main
from modsar.errors import ModsarError
from modsar.records.rows import read_rows
from modsar.sweep import SearchRequest
from modsar.sweep.cluster import check_address, private_token
from modsar.sweep.credentials import mlflow_env, mlflow_uri, redact, results_env
from modsar.sweep.interrupt import resume_command
from modsar.sweep.submit import EXCLUDES, PROJECT, code_to_upload

MODSAR = Path(sys.executable).parent / "modsar"  # the installed command, as a user runs it
ONE_TRIAL = (
    "description: one trial\nbase: {model.hidden_size: 8}\nparams:\n  task: {grid: [ar]}\n"
    "  train.lr: {grid: [0.01]}\nbudget: {search: grid, num_samples: 1, max_epochs: 1, eval_every: 1}\n"
)
SECRET = "s3cr3t-Pa55"


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound for a moment, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_modsar(args: list[str], env: dict[str, str], cwd: Path, timeout: int = 600, prefix=()):
    return subprocess.run(
        [*prefix, str(MODSAR), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


# --- secrets in URIs --------------------------------------------------------------------------------------


def test_redact_hides_every_password_and_secret_query_value():
    assert redact("http://alice:tok@host:5000/x") == "http://alice:***@host:5000/x"
    assert redact("see s3://AKIA:se/cr@et@bucket/p for it") == "see s3://AKIA:***@bucket/p for it"
    assert redact("https://h/api?user=a&token=abc&sig=x#f") == "https://h/api?user=a&token=***&sig=***#f"
    assert redact("hdfs://bob@namenode/x and /plain/path") == "hdfs://bob@namenode/x and /plain/path"
    assert redact("'http://a:b@h' \"s3://k:s@b\"") == "'http://a:***@h' \"s3://k:***@b\""


def test_a_request_holds_no_secret_and_its_clients_get_them_from_the_environment():
    """The request, what search.json records and Tune pickles, holds the redacted MLflow URI and the S3 URI
    without its keys; the MLflow client gets the URI without user info and MLflow's documented variables;
    pyarrow's S3 filesystem gets the AWS variables."""
    req = SearchRequest(
        space="quickstart",
        dataset="synthetic",
        mlflow=f"http://alice:{SECRET}@mlflow.example:5000",
        results=f"s3://AKIAKEY:{SECRET.replace('-', '%2D')}@bucket/runs",
    )
    assert req.mlflow == "http://alice:***@mlflow.example:5000" and req.results == "s3://bucket/runs"
    assert SECRET.encode() not in pickle.dumps(req) and SECRET not in json.dumps(req.__dict__)
    assert mlflow_uri(req.mlflow) == "http://mlflow.example:5000"
    assert mlflow_env(req.mlflow) == {"MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": SECRET}
    assert results_env(req.results) == {"AWS_ACCESS_KEY_ID": "AKIAKEY", "AWS_SECRET_ACCESS_KEY": SECRET}
    assert SearchRequest(**req.__dict__).mlflow == req.mlflow  # made again from itself: still usable


@pytest.mark.parametrize(
    "option, field, uri",
    [
        ("--address", "address", f"ray://bob:{SECRET}@head:10001"),
        ("--results", "results", f"gs://bob:{SECRET}@bucket/x"),
        ("--results", "results", f"s3://bucket/x?session_token={SECRET}"),
        ("--mlflow", "mlflow", "http://alice:***@host:5000"),  # copied from search.json: no secret left
    ],
)
def test_a_secret_that_cannot_be_taken_out_is_refused_in_one_line_that_hides_it(option, field, uri):
    with pytest.raises(ModsarError) as refused:
        SearchRequest(space="quickstart", dataset="synthetic", **{field: uri})
    assert option in str(refused.value) and SECRET not in str(refused.value)
    assert "\n" not in str(refused.value) and "***" in str(refused.value)


class FakeMLflow(BaseHTTPRequestHandler):
    """The few REST calls of MLflow's client a search makes, answered as an MLflow server would; every
    request's path and Authorization header recorded."""

    seen: ClassVar[list[tuple[str, str | None]]] = []
    RUN: ClassVar[dict] = {
        "info": {
            "run_id": "r1",
            "run_uuid": "r1",
            "experiment_id": "1",
            "status": "RUNNING",
            "start_time": 1,
            "lifecycle_stage": "active",
        },
        "data": {},
    }

    def _reply(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        FakeMLflow.seen.append((self.path, self.headers.get("Authorization")))
        path = self.path.split("?")[0].rsplit("/mlflow/", 1)[-1]
        code, body = 200, {}
        if path == "experiments/get-by-name":
            code, body = 404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "none"}
        elif path == "experiments/search":
            body = {"experiments": []}
        elif path == "experiments/create":
            body = {"experiment_id": "1"}
        elif path in ("runs/create", "runs/get"):
            body = {"run": self.RUN}
        elif path == "runs/update":
            body = {"run_info": self.RUN["info"]}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = _reply

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def fake_mlflow() -> Iterator[str]:
    FakeMLflow.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeMLflow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_an_mlflow_server_gets_the_credentials_as_a_header_checked_before_the_search(fake_mlflow):
    """make_plan asks the server once, with the credentials, before Ray starts: as basic authentication from
    MLflow's variables, never in a URL."""
    from modsar.sweep.plan import _reach_mlflow

    req = SearchRequest(space="quickstart", dataset="", mlflow=f"http://alice:{SECRET}@{fake_mlflow}")
    _reach_mlflow(req.mlflow)
    basic = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
    assert FakeMLflow.seen and all(auth == basic and SECRET not in path for path, auth in FakeMLflow.seen)
    assert "MLFLOW_TRACKING_PASSWORD" not in os.environ  # only while the client is asked


def test_an_unreachable_mlflow_server_fails_at_once_in_one_line_without_its_password(tmp_path, capsys):
    started = time.monotonic()
    code = main(
        [
            "search",
            "--space",
            "quickstart",
            "--dataset",
            "synthetic",
            "--results",
            str(tmp_path / "r"),
            "--no-estimate",
            "--mlflow",
            f"http://alice:{SECRET}@127.0.0.1:{closed_port()}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - started < 30, err
    assert err.count("\n") == 1 and "--mlflow http://alice:***@127.0.0.1:" in err and SECRET not in err
    assert not (tmp_path / "r").exists()  # refused before anything was written


@pytest.mark.slow
def test_no_secret_reaches_the_search_files_or_its_output(fake_mlflow, tmp_path):
    """A real search with an MLflow password in --mlflow: it logs to the server with it, and neither
    search.json (request, argv), Tune's pickles (tuner.pkl: the MLflow callback), any other file of the
    experiment or Ray's session folder, nor its output holds it."""
    (tmp_path / "one.yaml").write_text(ONE_TRIAL)
    ray_tmp = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))  # socket paths must stay short
    env = {**os.environ, "MODSAR_DATA": str(tmp_path / "data"), "RAY_TMPDIR": str(ray_tmp)}
    try:
        args = ["search", "--space", "one.yaml", "--dataset", "synthetic", "--results", "results"]
        uri = f"http://alice:{SECRET}@{fake_mlflow}"
        done = run_modsar([*args, "--experiment", "m", "--no-estimate", "--mlflow", uri], env, tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert any(path.endswith("/runs/log-metric") for path, _ in FakeMLflow.seen)  # it did log
        stored = json.loads((tmp_path / "results" / "m" / "search.json").read_text())
        assert stored["request"]["mlflow"] == f"http://alice:***@{fake_mlflow}" and uri not in stored["argv"]
        files = [p for root in (tmp_path / "results", ray_tmp) for p in root.rglob("*") if p.is_file()]
        assert any(p.name == "tuner.pkl" for p in files)
        leaked = [str(p) for p in files if SECRET.encode() in p.read_bytes()]
        assert not leaked and SECRET not in done.stdout + done.stderr, leaked
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


# --- a local cluster: no outbound connection, a private token -----------------------------------------------

SOCKET_LOG_HOOK = """
import os, sys
_log = os.environ.get("HOSTILE_SOCKET_LOG")
if _log:
    def _write(event, where):
        line = "%d\\t%s\\t%r\\t%s\\n" % (os.getpid(), event, where, " ".join(sys.argv)[:300])
        fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, line.encode())
        os.close(fd)

    def _hook(event, args):
        if event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
            _write(event, args[1])
        elif event in ("socket.getaddrinfo", "socket.gethostbyname"):
            _write(event, args[0])

    _write("start", None)  # this process runs the hook
    sys.addaudithook(_hook)
"""
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1", "localhost", "0.0.0.0", "::", "", "None"}
# an IPv4 or IPv6 address in strace's rendering of a sockaddr: sin_addr=inet_addr("1.2.3.4"),
# inet_pton(AF_INET6, "::1", &sin6_addr), inet_pton(AF_INET, "1.2.3.4", ...); AF_UNIX and AF_NETLINK have none
STRACE_ADDRESS = re.compile(r'(?:inet_addr\(|inet_pton\(AF_INET6?, )"([0-9a-fA-F:.]+)"')


def is_local_address(address: str) -> bool:
    """Whether a connection to `address` stays on this machine: 127.0.0.0/8, ::1, their IPv4-mapped forms
    (::ffff:127.x.x.x), and the unspecified 0.0.0.0 and ::, which Linux connects to this machine."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return any(a is not None and (a.is_loopback or a.is_unspecified) for a in (ip, mapped))


def traced_addresses(trace: str) -> tuple[set[str], set[str]]:
    """(every IP address the connect/sendto/sendmsg calls of an strace log name; those off this machine)."""
    found = set(STRACE_ADDRESS.findall(trace))
    return found, {address for address in found if not is_local_address(address)}


def test_the_strace_parser_sees_ipv4_ipv6_and_mapped_addresses_and_skips_unix_sockets():
    def v4(address: str) -> str:
        return f'{{sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("{address}")}}'

    def v6(address: str) -> str:
        return (
            "{sa_family=AF_INET6, sin6_port=htons(80), sin6_flowinfo=htonl(0), "
            f'inet_pton(AF_INET6, "{address}", &sin6_addr), sin6_scope_id=0}}'
        )

    trace = "\n".join(
        [
            f"101 connect(5, {v4('127.0.0.1')}, 16) = 0",
            f"101 connect(6, {v4('8.8.8.8')}, 16) = 0",
            f"102 connect(7, {v6('2001:4860:4860::8888')}, 28) = -1 ENETUNREACH (Network is unreachable)",
            f"102 connect(8, {v6('::1')}, 28) = 0",
            f"103 connect(9, {v6('::ffff:127.0.0.2')}, 28) = 0",
            f"103 connect(9, {v6('::FFFF:169.254.169.254')}, 28 <unfinished ...>",
            f'104 sendto(3, "x", 1, 0, {v4("169.254.169.254")}, 16) = 1',
            f"104 sendmsg(4, {{msg_name={v4('127.0.0.53')}, msg_namelen=16, msg_iovlen=0}}, 0) = 0",
            '104 connect(4, {sa_family=AF_INET, sin_addr=inet_pton(AF_INET, "10.0.0.1")}, 16) = 0',
            '105 connect(10, {sa_family=AF_UNIX, sun_path="/tmp/ray/session/sockets/raylet"}, 110) = 0',
            '105 sendto(11, "inet_addr(\\"6.6.6.6\\")", 17, 0, NULL, 0) = 17',  # data, not an address
            "105 sendmsg(12, {msg_name={sa_family=AF_NETLINK, nl_pid=0, nl_groups=00000000}}, 0) = 20",
            f"106 connect(13, {v4('0.0.0.0')}, 16) = 0",
        ]
    )
    found, outbound = traced_addresses(trace)
    assert found == {
        *("127.0.0.1", "8.8.8.8", "2001:4860:4860::8888", "::1", "::ffff:127.0.0.2"),
        *("::FFFF:169.254.169.254", "169.254.169.254", "127.0.0.53", "10.0.0.1", "0.0.0.0"),
    }
    assert outbound == {
        "8.8.8.8",
        "2001:4860:4860::8888",
        "::FFFF:169.254.169.254",
        "169.254.169.254",
        "10.0.0.1",
    }
    assert traced_addresses('connect(3, {sa_family=AF_UNIX, sun_path="/run/x"}, 110) = 0') == (set(), set())


def _python_level_destinations(log: Path) -> tuple[set[str], set[str]]:
    """(every host a Python process of the search connected, sent to or resolved; the commands of the
    processes that ran the hook)."""
    hosts, commands = set(), set()
    for line in log.read_text().splitlines():
        _, _, where, command = line.split("\t", 3)
        commands.add(command)
        value = ast.literal_eval(where)  # the repr the hook wrote: a (host, port, ...) tuple, a path, a host
        if isinstance(value, tuple):
            hosts.add(str(value[0]))
        elif isinstance(value, str) and not value.startswith("/"):  # a host name to resolve
            hosts.add(value)
    return hosts, commands


def _working_strace() -> str | None:
    """strace, where it is installed and may trace here (a container's seccomp or Yama may forbid ptrace).
    CI ($MODSAR_CI=1, set by .ci/run, which installs strace) may not go without it: the test fails there."""
    strace = shutil.which("strace")
    if strace is None:
        problem = "strace is not installed"
    else:
        tried = subprocess.run([strace, "-f", "-o", os.devnull, "true"], capture_output=True, timeout=60)
        if tried.returncode == 0:
            return strace
        problem = f"strace cannot trace here: {tried.stderr.decode(errors='replace').strip()[-300:]}"
    if os.environ.get("MODSAR_CI") == "1":
        pytest.fail(f"{problem}; CI traces every connection a search makes (.ci/run installs strace)")
    return None


@pytest.mark.slow
def test_a_local_search_connects_to_nothing_but_loopback_and_keeps_its_token_private(tmp_path):
    """Every connect/sendto/sendmsg of the search and every process it starts (strace -f, where strace is
    installed) and every socket call of its Python processes, Ray's dashboard and workers included (an audit
    hook in each): only 127.0.0.1, ::1 or unix sockets, no name resolved. Ray's default probes the cloud
    metadata servers (169.254.169.254, metadata.google.internal) from its dashboard. Ray's token file, which
    Ray writes with the umask's 0644, is 0600."""
    home, hooks, log = tmp_path / "home", tmp_path / "hooks", tmp_path / "sockets.log"
    home.mkdir()
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SOCKET_LOG_HOOK)
    (tmp_path / "one.yaml").write_text(ONE_TRIAL)
    env = {
        **os.environ,
        "HOME": str(home),
        "MODSAR_DATA": str(tmp_path / "data"),
        "PYTHONPATH": str(hooks),
        "HOSTILE_SOCKET_LOG": str(log),
    }
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        env.pop(name, None)
    trace = tmp_path / "trace.txt"
    strace = _working_strace()
    prefix = [strace, "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace)] if strace else []
    args = ["search", "--space", "one.yaml", "--dataset", "synthetic", "--experiment", "net", "--no-estimate"]
    done = run_modsar([*args, "--quiet"], env, tmp_path, prefix=prefix)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(read_rows(str(tmp_path / "results"), "net")) == 1

    hosts, commands = _python_level_destinations(log)
    assert any("dashboard.py" in c for c in commands) and any("default_worker.py" in c for c in commands)
    assert hosts <= LOOPBACK, hosts - LOOPBACK
    if strace:
        traced, outbound = traced_addresses(trace.read_text())
        assert traced and not outbound, outbound
    token = home / ".ray" / "auth_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text().strip()) == 64


def test_the_token_ray_writes_for_a_local_cluster_is_private(tmp_path, monkeypatch):
    """Written first (0600, in a 0700 folder) where missing, made private where an earlier Ray left it
    readable, left alone where the token comes from elsewhere or authentication is off."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    token = tmp_path / ".ray" / "auth_token"
    with private_token():
        assert stat.S_IMODE(token.stat().st_mode) == 0o600 and re.fullmatch(
            r"[0-9a-f]{64}", token.read_text()
        )
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    token.chmod(0o644)
    with private_token():
        pass
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    token.unlink()
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with private_token():
        pass
    assert not token.exists()


def test_the_token_is_written_whole_and_never_through_a_symbolic_link(tmp_path, monkeypatch):
    """The token is written under a temporary name (0600 from the start) and linked into place, leaving no
    temporary file; a token path that is a symbolic link is refused in one line, and the file it points at
    keeps its mode; a token another process wrote first is kept."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    token = tmp_path / ".ray" / "auth_token"
    with private_token():
        assert sorted(p.name for p in token.parent.iterdir()) == ["auth_token"]
    token.unlink()
    shared = tmp_path / "shared.txt"
    shared.write_text("not a token")
    shared.chmod(0o644)
    token.symlink_to(shared)
    with (
        pytest.raises(ModsarError, match=r"^Ray's token file .* is a symbolic link") as raised,
        private_token(),
    ):
        pytest.fail("entered")
    assert "\n" not in str(raised.value)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644 and shared.read_text() == "not a token"
    token.unlink()

    from modsar.sweep import cluster

    def first(path):  # another process writes the token between the check and this write
        path.write_text("theirs")
        write_token(path)

    write_token = cluster._write_token
    monkeypatch.setattr(cluster, "_write_token", first)
    with private_token():
        assert token.read_text() == "theirs"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600  # made private afterwards, as an earlier Ray's
    assert sorted(p.name for p in token.parent.iterdir()) == ["auth_token"]


def test_an_address_where_nothing_answers_fails_in_seconds_in_one_line():
    """A refused port at once; a silent one (a full listen queue drops the connection, as a firewall does)
    after the probe's 3 s, where Ray itself retried for many minutes."""
    with pytest.raises(
        ModsarError, match=r"^nothing answers at --address 127\.0\.0\.1:\d+ \(Connection refused\)"
    ):
        check_address(f"127.0.0.1:{closed_port()}")
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        queued: list[socket.socket] = []
        with contextlib.suppress(TimeoutError):  # fill the queue until the kernel drops connections
            while len(queued) < 16:
                queued.append(socket.create_connection(full.getsockname(), timeout=0.5))
        started = time.monotonic()
        with pytest.raises(ModsarError, match="timed out") as refused:
            check_address(f"ray://{full.getsockname()[0]}:{full.getsockname()[1]}")
        assert time.monotonic() - started < 10 and "\n" not in str(refused.value)
        for s in queued:
            s.close()


def test_a_search_with_an_address_where_nothing_listens_fails_in_one_line(tmp_path, capsys):
    started = time.monotonic()
    args = ["search", "--space", "quickstart", "--dataset", "synthetic", "--results", str(tmp_path)]
    assert main([*args, "--no-estimate", "--quiet", "--address", f"127.0.0.1:{closed_port()}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("modsar: error: nothing answers at --address 127.0.0.1:") and err.count("\n") == 1
    assert time.monotonic() - started < 60


# --- Ctrl-C -------------------------------------------------------------------------------------------------

CTRL_C_SPACE = """description: two directions of three trials, long enough to interrupt the first
base: {model.hidden_size: 16, model.num_layers: 1, train.patience: 0, data.batch_size: 32}
params:
  task: {grid: [ae, ar]}
  train.lr: {grid: [0.001, 0.002, 0.003]}
scheduler: {max_t: 3, grace_period: 3, reduction_factor: 2}
budget: {search: grid, num_samples: 1, max_epochs: 3, eval_every: 1}
"""


def test_the_resume_command_repeats_every_option_given():
    req = SearchRequest(
        space="my space.yaml",
        dataset="synthetic",
        experiment="c",
        results="out",
        max_concurrent=1,
        cpus_per_trial=2.0,
        fresh_actors=True,
        mlflow=f"http://alice:{SECRET}@h:5000",
        overrides=["train.lr=0.01"],
        overwrite=True,
    )
    assert resume_command(req) == (
        "modsar search --space 'my space.yaml' --dataset synthetic --experiment c --results out "
        "--cpus-per-trial 2 --max-concurrent 1 --fresh-actors --mlflow 'http://alice:***@h:5000' "
        "train.lr=0.01 --resume"
    )


def _plan_of(results: Path, experiment: str = "c"):
    """A plan of 3 random samples of each of 2 directions (6 trials), planned without data (no Ray, no
    dataset), for a search of synthetic."""
    import dataclasses

    from modsar.sweep import make_plan

    planned = make_plan(
        SearchRequest(space="quickstart", dataset="", search="random", num_samples=3), check=False
    )
    req = SearchRequest(space="quickstart", dataset="synthetic", experiment=experiment, results=str(results))
    return dataclasses.replace(planned, request=req)


def _raise(error: BaseException):
    def fail(*args, **kwargs):
        raise error

    return fail


@pytest.mark.parametrize(
    ("where", "error", "said"),
    [
        ("record_state", OSError(28, "No space left on device"), "its state was not recorded (OSError)"),
        ("record_state", ModsarError("cannot write search.json"), "its state was not recorded (ModsarError)"),
        ("record_state", KeyboardInterrupt(), "its state was not recorded (a second Ctrl-C)"),
        ("read_rows", ModsarError("cannot reach s3://b/r"), "its state was not recorded (ModsarError)"),
        ("read_rows", KeyboardInterrupt(), "its state was not recorded (a second Ctrl-C)"),
    ],
)
def test_ctrl_c_still_names_the_resume_command_where_its_state_cannot_be_recorded(
    tmp_path, monkeypatch, where, error, said
):
    """A full disk, an unreachable object store or a second Ctrl-C while the search records itself as
    interrupted: still SearchInterrupted (exit 130) naming the command that resumes it, never exit 2 or a
    bare message."""
    from modsar.records import rows
    from modsar.sweep import interrupt

    plan = _plan_of(tmp_path / "results")
    search_json = tmp_path / "results" / "c" / "search.json"
    search_json.parent.mkdir(parents=True)
    search_json.write_text(json.dumps({"status": "running", "trials_planned": 6}))
    monkeypatch.setattr(interrupt if where == "record_state" else rows, where, _raise(error))
    with (
        pytest.raises(interrupt.SearchInterrupted) as raised,
        interrupt.stops_on_ctrl_c(plan, str(search_json)),
    ):
        raise KeyboardInterrupt
    line = str(raised.value)
    assert said in line and line.endswith(f"resume it with `{resume_command(plan.request)}`"), line
    assert ("0 of 6 trials ended" in line) == (where == "record_state"), line  # the rows were read
    assert json.loads(search_json.read_text())["status"] == "running"


def test_sigterm_stops_a_search_as_ctrl_c_does_and_its_handler_is_put_back(tmp_path):
    """kill, `timeout` or a batch scheduler's notice (SIGTERM) outside a Tuner's fit: the search is recorded
    interrupted and says how to resume, where Ray's handler died with a stack dump; afterwards SIGTERM's
    handler is the one it found."""
    from modsar.sweep import interrupt

    plan = _plan_of(tmp_path / "results")
    search_json = tmp_path / "results" / "c" / "search.json"
    search_json.parent.mkdir(parents=True)
    search_json.write_text(json.dumps({"status": "running", "trials_planned": 6}))
    before = signal.getsignal(signal.SIGTERM)
    with (
        pytest.raises(interrupt.SearchInterrupted) as raised,
        interrupt.stops_on_ctrl_c(plan, str(search_json)),
    ):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs at once, in this thread: the sleep never ends
        pytest.fail("SIGTERM did not stop the search")
    assert str(raised.value).endswith(f"resume it with `{resume_command(plan.request)}`")
    assert json.loads(search_json.read_text())["status"] == "interrupted"
    assert signal.getsignal(signal.SIGTERM) is before


def test_ctrl_c_records_the_search_interrupted(tmp_path):
    from modsar.sweep import interrupt

    plan = _plan_of(tmp_path / "results")
    search_json = tmp_path / "results" / "c" / "search.json"
    search_json.parent.mkdir(parents=True)
    search_json.write_text(json.dumps({"status": "running", "trials_planned": 6}))
    with (
        pytest.raises(interrupt.SearchInterrupted) as raised,
        interrupt.stops_on_ctrl_c(plan, str(search_json)),
    ):
        raise KeyboardInterrupt
    assert str(raised.value) == (
        "search 'c' (0 of 6 trials ended; what ran is saved): "
        f"resume it with `{resume_command(plan.request)}`"
    )
    assert json.loads(search_json.read_text()) == {
        "status": "interrupted",
        "trials_planned": 6,
        "trials_ended": 0,
    }


BAD_SEARCH_JSON = [
    "[1, 2]",
    '"running"',
    "null",
    '{"status": "running", "trials_planned": "abc"}',
    '{"status": "running", "trials_planned": true}',
    '{"status": ["running"], "trials_planned": 6}',
]


@pytest.mark.parametrize("text", BAD_SEARCH_JSON)
def test_a_malformed_search_json_is_one_warning_and_an_unknown_status(tmp_path, capsys, text):
    """A search.json that is no object, or whose status or trials_planned is of the wrong kind (edited,
    damaged), is skipped with one warning line: the search's status is unknown; the others are read."""
    from modsar.sweep.interrupt import incomplete_searches

    for name, content in (("bad", text), ("ok", '{"status": "interrupted", "trials_planned": 6}')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "search.json").write_text(content)
    assert incomplete_searches(str(tmp_path), ["bad", "ok"]) == {"ok": 6}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("modsar: warning: ") and "bad" in err, err
    assert "the status of search 'bad' is unknown" in err, err


@pytest.mark.parametrize("text", ["[1, 2]", '{"status": "running", "trials_planned": "abc"}'])
def test_a_report_over_a_malformed_search_json_still_reports(tmp_path, capsys, text):
    """`modsar report` over a copy of a committed experiment whose search.json was damaged: the report, and
    one warning line that the search's status is unknown."""
    published = Path(__file__).parents[1] / "results" / "published" / "quickstart" / "quickstart-synthetic"
    shutil.copytree(published, tmp_path / "res" / "quickstart-synthetic")
    (tmp_path / "res" / "quickstart-synthetic" / "search.json").write_text(text)
    args = ["report", "--results", str(tmp_path / "res"), "--experiment", "quickstart-synthetic"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "synthetic" in out and "Traceback" not in err
    warnings = [line for line in err.splitlines() if line.startswith("modsar: ")]
    assert len(warnings) == 1 and "the status of search 'quickstart-synthetic' is unknown" in warnings[0], err


def test_a_verdict_on_an_unfinished_search_starts_with_how_far_it_got():
    import pandas as pd

    from modsar.report.verdicts import incomplete_notes, model_verdicts

    rows = pd.DataFrame(
        {
            "experiment": ["c", "c", "done"],
            "dataset": ["synthetic", "synthetic", "beauty"],
            "role": ["search", "seed", "search"],
        }
    )
    notes = incomplete_notes(rows, ["beauty", "synthetic"], {"c": 400})
    assert notes == {
        "beauty": "",
        "synthetic": "incomplete: 1 of 400 trials (search 'c' did not finish; `modsar search ... --resume` "
        "continues it); ",
    }
    assert model_verdicts({}, ["synthetic"], "zoo", "ndcg@10", notes) == []  # no cell, no line


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_whole_search_and_the_command_it_prints_resumes_it(tmp_path, capsys, stop):
    """Ctrl-C (SIGINT to the terminal's process group), or SIGTERM to the driver alone (kill, `timeout`, a
    batch scheduler's notice), while the AE direction runs: the search stops, AR never starts, it exits 130
    with one line naming the command that resumes it, search.json records it interrupted and a report's
    verdict says `incomplete: N of 6 trials`. That command finishes the search; the report then gives its
    verdict plainly."""
    (tmp_path / "cc.yaml").write_text(CTRL_C_SPACE)
    env = {**os.environ, "MODSAR_DATA": str(tmp_path / "data")}
    args = ["search", "--space", "cc.yaml", "--dataset", "synthetic", "--experiment", "c", "--quiet"]
    proc = subprocess.Popen(
        [str(MODSAR), *args, "--no-estimate", "--max-concurrent", "1"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    trials = tmp_path / "results" / "c" / "trials"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not list(trials.glob("[!.]*.parquet")):
        time.sleep(0.1)
    if stop == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    else:
        os.kill(proc.pid, signal.SIGTERM)  # the driver alone: Ray's workers hear nothing
    pressed = time.time()
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130 and time.time() - pressed < 120, err[-2000:]
    last = err.strip().splitlines()[-1]
    ended = len(list(trials.glob("[!.]*.parquet")))
    command = re.fullmatch(
        rf"modsar: interrupted search 'c' \({ended} of 6 trials ended; what ran is saved\): resume it "
        r"with `(modsar search .* --resume)`",
        last,
    )
    assert command and 1 <= ended < 3, last
    assert not (tmp_path / "results" / "c" / "ray-ar").exists()  # the other direction never started
    stored = json.loads((tmp_path / "results" / "c" / "search.json").read_text())
    assert (stored["status"], stored["trials_ended"], stored["trials_planned"]) == ("interrupted", ended, 6)
    assert main(["report", "--results", str(tmp_path / "results")]) == 0
    assert f"synthetic: incomplete: {ended} of 6 trials (search 'c' did not finish" in capsys.readouterr().out

    resume = command.group(1).split()
    done = run_modsar(resume[1:], env, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = read_rows(str(tmp_path / "results"), "c")
    assert len(rows) == 6 and set(rows["status"]) <= {"finished", "stopped"} and rows["selected"].sum() == 2
    assert json.loads((tmp_path / "results" / "c" / "search.json").read_text())["status"] == "complete"
    assert main(["report", "--results", str(tmp_path / "results")]) == 0
    report = capsys.readouterr().out
    assert "incomplete" not in report and re.search(r"synthetic: (AR|AE|neither) wins", report), report


# --- modsar submit from a wheel -----------------------------------------------------------------------------


def test_submit_from_an_installed_wheel_sends_the_packages_not_site_packages(tmp_path):
    """Installed, the folder above the package is site-packages (GBs of every distribution): the job gets
    the modsar and hf_plugins folders alone; from a checkout, the checkout less what jobs never read."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    for package in ("modsar", "modsar/search_spaces", "hf_plugins", "torch", "ray"):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
    (site / "modsar-0.9.dist-info").mkdir()
    env = code_to_upload({"MODSAR_DATA": "/shared"}, project=site)
    assert env == {
        "py_modules": [str(site / "modsar"), str(site / "hf_plugins")],
        "excludes": ["**/__pycache__"],
        "env_vars": {"MODSAR_DATA": "/shared"},
    }
    assert "working_dir" not in env
    checkout = code_to_upload({}, project=PROJECT)
    assert checkout["working_dir"] == str(PROJECT) and checkout["excludes"] == EXCLUDES
    with pytest.raises(ModsarError, match="no modsar package"):
        code_to_upload({}, project=tmp_path)


def test_submit_refuses_a_command_with_a_password_before_it_contacts_the_cluster(capsys):
    """A job's command (and its --env variables) is stored by the cluster and shown by `status`: credentials
    come from the nodes' own environment or credential files."""
    dead = f"http://127.0.0.1:{closed_port()}"  # never asked: the refusal comes first
    command = [
        "search",
        "--space",
        "quickstart",
        "--dataset",
        "synthetic",
        "--mlflow",
        f"http://a:{SECRET}@h",
    ]
    assert main(["submit", "--address", dead, "--no-wait", "--", *command]) == 2
    err = capsys.readouterr().err
    assert "holds a password (http://a:***@h)" in err and SECRET not in err and err.count("\n") == 1
    assert "not --env" in err and "own environment or credential files" in err  # --env shows in the job table


# --- a second search in one process -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_search_in_one_process_goes_to_its_own_address(tmp_path, monkeypatch):
    """The first `modsar.search` starts a local cluster; a second with `address=` does not reuse it: it goes
    to that address (here one where nothing answers, so it fails saying so). A cluster the caller connected
    to itself (ray.init) is never left for another address: refused in one line."""
    import ray

    import modsar

    monkeypatch.setenv("MODSAR_DATA", str(tmp_path / "data"))
    (tmp_path / "one.yaml").write_text(ONE_TRIAL)
    space, results = str(tmp_path / "one.yaml"), str(tmp_path / "results")
    ray.shutdown()
    try:
        rows = modsar.search(space, "synthetic", experiment="first", results=results, quiet=True)
        assert len(rows) == 1 and ray.is_initialized()
        dead = f"127.0.0.1:{closed_port()}"
        with pytest.raises(ModsarError, match=rf"^nothing answers at --address {dead}"):
            modsar.search(space, "synthetic", experiment="second", results=results, address=dead, quiet=True)
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        with pytest.raises(
            ModsarError, match=r"^this process is connected to the Ray cluster at \S+ already"
        ):
            modsar.search(space, "synthetic", experiment="third", results=results, address=dead, quiet=True)
    finally:
        ray.shutdown()
