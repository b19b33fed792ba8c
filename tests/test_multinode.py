"""A real two-node Ray cluster on loopback: `modsar submit` runs a search whose trials use both nodes."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from modsar.cli import main
from modsar.records.rows import read_rows

pytestmark = pytest.mark.slow  # real multi-process runs: the full suite's tier

SPACE = Path(__file__).parent / "spaces" / "asha.yaml"
BIN = Path(sys.executable).parent


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that bind on loopback now, drawn between Ray's worker ports (10002-19999) and
    the kernel's ephemeral range (32768+): a port the kernel handed out for bind(0) can be handed out again,
    or taken by any process's outgoing connection, before the node binds it."""
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < count:
        port = rng.randrange(20_000, 32_000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in ports:
            ports.append(port)
    return ports


def start_cluster(env: dict[str, str], temp: str, worker_temp: str) -> str:
    """Start head + worker; returns the dashboard's address. Raises RuntimeError, with the end of each node's
    output, when a node exits or does not join within 120 s."""
    gcs, dashboard, client, *agents = free_ports(11)
    head = [
        "--head",
        f"--port={gcs}",
        f"--dashboard-port={dashboard}",
        "--dashboard-host=127.0.0.1",
        f"--temp-dir={temp}",
        f"--ray-client-server-port={client}",
        '--resources={"node_head": 1}',
        *agent_flags(agents[:4]),
    ]
    worker = [
        f"--address=127.0.0.1:{gcs}",
        f"--temp-dir={worker_temp}",
        '--resources={"node_worker": 1}',
        *agent_flags(agents[4:]),
    ]
    procs: list[subprocess.Popen] = []
    for args, folder in ((head, temp), (worker, worker_temp)):
        # a small object store per node: two default ones (30% of RAM each) on one small machine made
        # the processes fail to map torch's libraries
        with open(Path(folder) / "ray-start.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        str(BIN / "ray"),
                        "start",
                        "--block",
                        "--num-cpus=1",
                        "--num-gpus=0",
                        "--object-store-memory=200000000",
                        "--disable-usage-stats",
                        *args,
                    ],
                    env=env,
                    start_new_session=True,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        deadline = time.time() + 120
        while True:
            status = subprocess.run(
                [str(BIN / "ray"), "status", f"--address=127.0.0.1:{gcs}"],
                env=env,
                capture_output=True,
                text=True,
            )
            if status.stdout.count(" node_") >= len(procs):
                break
            exited = [i for i, proc in enumerate(procs) if proc.poll() is not None]
            if exited or time.time() > deadline:
                why = f"node {exited[0] + 1} exited" if exited else f"node {len(procs)} did not join in 120 s"
                tail = status.stderr.strip().splitlines()[-1:] or [""]
                raise RuntimeError(f"{why} (ray status: {tail[0]})\n{node_output(temp, worker_temp)}")
            time.sleep(1)
    return f"http://127.0.0.1:{dashboard}"


def agent_flags(ports: list[int]) -> list[str]:
    """A node's agents on ports of their own. Left at Ray's defaults (52365 for the job agent), the head's
    agent could not bind where another test's local Ray already had, and every job submission then failed
    with "No available agent" (CI, 2026-12-04)."""
    names = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port")
    return [f"--{name}={port}" for name, port in zip((*names, "metrics-export-port"), ports, strict=True)]


def node_output(*folders: str) -> str:
    """The end of each node's `ray start` output and of its processes' error logs, for a failure message."""
    parts = []
    for folder in folders:
        for log in [Path(folder) / "ray-start.log", *sorted(Path(folder).glob("session_latest/logs/*.err"))]:
            if log.is_file() and log.stat().st_size:
                parts.append(f"--- {log}:\n{log.read_text(errors='replace')[-800:]}")
    return "\n".join(parts)


def stop_cluster(marker: str, *folders: str) -> None:
    """Kill every process of the test cluster (waiting up to 30 s for all to go) and delete its folders."""
    deadline = time.time() + 30
    while time.time() < deadline and kill_marked(marker, folders):
        time.sleep(0.5)
    subprocess.run(["rm", "-rf", *folders])


@pytest.fixture(scope="module")
def cluster():
    """Head + worker as separate `ray start` nodes, each with 1 CPU and its own custom resource
    (so two concurrent 1-CPU trials must land on different nodes). Torn down even when a test fails; the
    module's tests share it (a cluster takes ~10 s to start), each submitting jobs of its own."""
    marker = uuid.uuid4().hex
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "MODSAR_TEST_CLUSTER": marker,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }  # the job's `python` is this venv's
    subprocess.run([str(BIN / "ray"), "get-auth-token", "--generate"], env=env, capture_output=True)
    # Each node gets its own short temp dir (socket paths must stay < 108 bytes): two nodes sharing one
    # session folder on one machine also share runtime_resources, and one node's runtime-env GC deleted
    # the job's working_dir under the other's driver.
    folders: list[str] = []
    try:
        # up to three starts, each on fresh ports: CI once started this beside the README job's own Ray, and
        # the head's GCS never came up; a node that lost a port exits or never joins, and its output says why
        failures = []
        for _attempt in range(3):
            folders = [tempfile.mkdtemp(prefix=p, dir="/tmp") for p in ("rt", "rw")]
            try:
                address = start_cluster(env, *folders)
                break
            except RuntimeError as error:
                failures.append(str(error))
                stop_cluster(marker, *folders)
        else:
            pytest.fail("the test cluster did not start in three tries:\n" + "\n\n".join(failures))
        yield address, env
    finally:
        stop_cluster(marker, *folders)


def kill_marked(marker: str, folders: tuple[str, ...]) -> int:
    """SIGKILL every process of the test cluster; returns how many were found.

    A process belongs to it if its environment holds the marker or if it has a file open in one of the
    cluster's temp folders (every Ray process keeps its log there). Both are read from /proc: Ray renames
    its agents (setproctitle), which can clobber the environment block as psutil and /proc show it."""
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                mine = f"MODSAR_TEST_CLUSTER={marker}".encode() in fh.read()
            if not mine:
                fds = os.listdir(f"/proc/{pid}/fd")
                mine = any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(folders) for fd in fds)
            if mine:
                os.kill(int(pid), 9)
                found += 1
        except (OSError, ProcessLookupError):
            continue
    return found


@pytest.mark.long
def test_submit_search_to_two_node_cluster(cluster, tmp_path, monkeypatch, capsys):
    address, env = cluster
    for key in ("RAY_AUTH_MODE", "PATH"):
        monkeypatch.setenv(key, env[key])
    shared = Path(tempfile.mkdtemp(prefix="mnshared", dir="/tmp"))
    data, results = shared / "datasets", shared / "results"
    assert main(["data", "prepare", "synthetic", "--data-dir", str(data)]) == 0
    code = main(
        [
            "submit",
            "--address",
            address,
            "--follow",
            "--env",
            f"MODSAR_DATA={data}",
            "--",
            "search",
            "--space",
            str(SPACE),
            "--dataset",
            "synthetic",
            "--results",
            str(results),
            "--experiment",
            "mn",
            "--quiet",
            # a reused actor on the head would take the trial staged for the worker's slower-starting actor
            # (CI, loaded, once ran all 12 on the head); a fresh actor per trial keeps each on its node
            "--fresh-actors",
        ]
    )
    captured = capsys.readouterr()
    out = captured.out
    assert code == 0 and out.strip().splitlines()[-1].endswith("SUCCEEDED"), (
        out[-2000:] + captured.err[-2000:]
    )
    rows = read_rows(str(results), "mn")
    assert len(rows) == 12 and rows["trial_id"].is_unique
    assert rows["node_id"].nunique() == 2  # trials ran on both nodes
    assert (results / "mn" / "trials").is_dir() and rows["selected"].sum() == 2


def test_no_wait_status_logs_and_stop(cluster, monkeypatch, capsys):
    address, env = cluster
    for key in ("RAY_AUTH_MODE", "PATH"):
        monkeypatch.setenv(key, env[key])
    assert main(["submit", "--address", address, "--no-wait", "--", "spaces"]) == 0
    job_id, state = capsys.readouterr().out.split()
    assert job_id.startswith("raysubmit_") and state == "PENDING"
    deadline = time.time() + 120
    while time.time() < deadline:
        assert main(["submit", "--address", address, "status", job_id]) == 0
        status = json.loads(capsys.readouterr().out)["status"]
        if status in ("SUCCEEDED", "FAILED", "STOPPED"):
            break
        time.sleep(1)
    assert status == "SUCCEEDED"
    assert main(["submit", "--address", address, "logs", job_id]) == 0
    assert "quickstart" in capsys.readouterr().out  # the job printed the bundled spaces
    assert main(["submit", "--address", address, "stop", job_id]) == 0
    assert "not running" in capsys.readouterr().out
