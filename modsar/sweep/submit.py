"""`modsar submit`: run a ModSAR command on a Ray cluster through Ray's Job Submission SDK.

The project (package, spaces) travels as the job's `working_dir` from a checkout, and the packages alone
(`py_modules`) from an installed wheel (`code_to_upload`); the cluster's nodes provide the dependencies (the
images in docker/). Ray token authentication is handled by the SDK itself: it reads
RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH / ~/.ray/auth_token when the cluster uses tokens.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from modsar.errors import ModsarError
from modsar.outputs import holds_credentials, refuse_address_user
from modsar.sweep.credentials import redact

PROJECT = Path(__file__).resolve().parents[2]
EXCLUDES = [".venv", ".git", "results", "tests", "benchmarks", "docker", "**/__pycache__", "*.egg-info"]
PACKAGES = ("modsar", "hf_plugins")  # what an installed ModSAR is: the wheel's two top-level packages


def code_to_upload(env: dict[str, str], project: Path = PROJECT) -> dict[str, Any]:
    """The runtime_env of a job: the code it runs and `env`. From a checkout (its pyproject names the project
    modsar), the checkout as the job's working_dir, less what the job never reads (EXCLUDES). From an
    installed wheel the folder above the package is site-packages, every installed distribution in it (GBs):
    there the job gets the package folders alone, as py_modules (the bundled spaces are inside modsar/)."""
    pyproject = project / "pyproject.toml"
    if pyproject.is_file() and re.search(r'^name\s*=\s*"modsar"', pyproject.read_text(), re.MULTILINE):
        return {"working_dir": str(project), "excludes": EXCLUDES, "env_vars": env}
    folders = [project / name for name in PACKAGES if (project / name / "__init__.py").is_file()]
    if not folders or folders[0].name != "modsar":
        raise ModsarError(f"no modsar package under {project} to send to the cluster")
    return {"py_modules": [str(f) for f in folders], "excludes": ["**/__pycache__"], "env_vars": env}


TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def _probe(address: str) -> None:
    """Fail fast, with one clear line, when nothing listens at the dashboard address."""
    refuse_address_user("--address", address)  # user:pw@host, no scheme: no URI to redact, printed whole
    try:
        parsed = urlparse(address if "://" in address else f"http://{address}")
        host, port = parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 8265)
    except ValueError as exc:  # a port that is no number, an unclosed IPv6 bracket
        raise ModsarError(f"--address {redact(address)} is not a URL like http://HEAD:8265 ({exc})") from None
    if not host:
        raise ModsarError(f"--address {redact(address)} is not a URL like http://HEAD:8265")
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        raise ModsarError(
            f"nothing listens at {redact(address)} ({exc.strerror or exc}); start the cluster (ray start "
            "--head) or fix --address (the Ray dashboard, port 8265)"
        ) from None


def auth_headers() -> dict[str, str]:
    """The cluster token as a bearer header, from RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token.

    Sent whenever a token is available: the SDK's own lookup depends on RAY_AUTH_MODE as it was when Ray
    was first imported in this process, which a long-lived process cannot rely on."""
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if not token:
        path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token")).expanduser()
        token = path.read_text().strip() if path.is_file() else ""
    return {"Authorization": f"Bearer {token}"} if token else {}


def client(address: str):
    """A job client of the cluster's dashboard at `address`, after a quick probe: an unreachable or refusing
    server is one line (with the token hint where it asks for authentication)."""
    from ray.job_submission import JobSubmissionClient

    _probe(address)
    try:
        return JobSubmissionClient(address, headers=auth_headers())
    except Exception as exc:  # the SDK raises ConnectionError/RuntimeError/ValueError depending on the cause
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = (
            (
                "; the cluster uses token authentication: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or "
                "RAY_AUTH_TOKEN_PATH) to its token"
            )
            if "auth" in first.lower()
            else ""
        )
        raise ModsarError(
            f"cannot reach the Ray job server at {redact(address)}: {redact(first)}{hint}"
        ) from None


def submit(
    address: str, command: list[str], env: dict[str, str], wait: bool, follow: bool
) -> tuple[str, str]:
    """Submit a `modsar` command as a Ray job with this package in its working_dir; optionally wait for it and
    follow its logs. Returns (job id, status)."""
    if not command:
        raise ModsarError(
            "nothing to submit; add the modsar command after --, e.g. -- search --space S --dataset D"
        )
    if command[0] in ("submit",):
        raise ModsarError("submit cannot submit itself")
    if secret := next((part for part in command if holds_credentials(part)), None):
        raise ModsarError(
            f"the job's command holds a password ({redact(secret)}), and the cluster stores and shows a "
            "job's command (and its --env variables); give the cluster's nodes the credentials in their own "
            "environment or credential files (MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD or "
            "MLFLOW_TRACKING_TOKEN, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or ~/.aws, a role), not "
            "--env, and the URI without them"
        )
    jobs = client(address)
    runtime_env = code_to_upload(env)
    entrypoint = " ".join(shlex.quote(p) for p in ["python", "-m", "modsar.cli", *command])
    deadline = time.time() + 180  # a loaded 2-core head took over a minute to start its job agent
    while True:  # a cluster that has just started may not have its job agent up yet
        try:
            job_id = jobs.submit_job(
                entrypoint=entrypoint, runtime_env=runtime_env, metadata={"tool": "modsar"}
            )
            break
        except RuntimeError as exc:
            if "No available agent" not in str(exc) or time.time() > deadline:
                raise ModsarError(
                    f"job submission to {redact(address)} failed: {redact(str(exc).splitlines()[0])}"
                ) from None
            time.sleep(2)
    if not wait:
        return job_id, "PENDING"
    if follow:
        import asyncio

        async def tail() -> None:
            async for lines in jobs.tail_job_logs(job_id):
                sys.stdout.write(lines)
                sys.stdout.flush()

        asyncio.run(tail())
    status = wait_for(jobs, job_id)
    return job_id, status


def wait_for(jobs, job_id: str, poll_s: float = 1.0) -> str:
    """Poll the job until it ends; its final status."""
    while True:
        status = str(jobs.get_job_status(job_id)).split(".")[-1]
        if status in TERMINAL:
            return status
        time.sleep(poll_s)


def status(address: str, job_id: str) -> dict:
    """A submitted job's status, message and entrypoint (`modsar submit ... status JOB`)."""
    info = client(address).get_job_info(job_id)
    return {
        "job_id": job_id,
        "status": str(info.status).split(".")[-1],
        "message": info.message,
        "entrypoint": info.entrypoint,
    }


def logs(address: str, job_id: str) -> str:
    """A submitted job's logs so far (`modsar submit ... logs JOB`)."""
    return client(address).get_job_logs(job_id)


def stop(address: str, job_id: str) -> bool:
    """Ask the cluster to stop a submitted job; whether it did."""
    return client(address).stop_job(job_id)
