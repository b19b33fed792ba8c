"""`modsar submit`: run a modsar command on a Ray cluster (Ray Job Submission), or follow, stop or read the
logs of a submitted one."""

from __future__ import annotations

import argparse
import os
import re

from modsar.cli.common import Subparsers, add_command
from modsar.errors import ModsarError
from modsar.outputs import HIDDEN, holds_credentials, redact, to_json

EPILOG = """examples:
  modsar submit --address http://HEAD:8265 --follow -- search --space local_attn --dataset beauty \\
      --results /mnt/shared/modsar/results --gpus-per-trial 0.25 --quiet
  modsar submit --address http://HEAD:8265 --no-wait -- search --space vanilla --dataset video
  modsar submit --address http://HEAD:8265 status raysubmit_abc123
  modsar submit --address http://HEAD:8265 logs raysubmit_abc123
  modsar submit --address http://HEAD:8265 stop raysubmit_abc123

The project travels as the job's working_dir; the nodes need ModSAR's dependencies (see docker/).
Datasets must be prepared where every node can read them (a shared --data-dir or $MODSAR_DATA) and
results written to a shared path or a pyarrow URI (s3://...)."""

JOB_ACTIONS = ("status", "logs", "stop")  # `modsar submit ... ACTION JOB_ID` acts on a submitted job


def add_parser(sub: Subparsers) -> None:
    """The `submit` command and its options; whatever follows them is the command the job runs."""
    submit = add_command(
        sub, "submit", "run a modsar command on a Ray cluster (Ray Job Submission)", run, EPILOG
    )
    submit.add_argument(
        "--address",
        default=os.environ.get("RAY_DASHBOARD_ADDRESS"),
        help="the cluster's dashboard, e.g. http://HEAD:8265 (or $RAY_DASHBOARD_ADDRESS)",
    )
    wait = submit.add_mutually_exclusive_group()
    wait.add_argument("--follow", action="store_true", help="stream the job's logs until it ends")
    wait.add_argument("--no-wait", action="store_true", help="print the job id and return at once")
    submit.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable for the job (e.g. MODSAR_DATA=/mnt/shared/datasets); the cluster shows "
        "them with the job, so no secrets: those come from the nodes' own environment or credential files",
    )
    submit.add_argument(
        "rest", nargs=argparse.REMAINDER, help="-- <modsar command ...>, or: status JOB | logs JOB | stop JOB"
    )


# names of variables that hold secrets (MLFLOW_TRACKING_PASSWORD, RAY_AUTH_TOKEN, AWS_SECRET_ACCESS_KEY,
# WANDB_API_KEY, ...): a job's --env is shown with the job (ray list jobs, the dashboard)
SECRET_NAME = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET|_KEY|CREDENTIAL", re.IGNORECASE)
ENV_ADVICE = (
    "the cluster stores a job's --env variables and shows them with the job (ray list jobs, the dashboard), "
    "so the cluster's nodes must hold secrets in their own environment or credential files (e.g. "
    "MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or "
    "~/.aws, a role), not --env"
)


def parse_env(text: str) -> tuple[str, str]:
    """An --env KEY=VALUE option; refused in one line, its value unshown, where the name says it holds a
    secret or the value holds a URI with credentials."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ModsarError(f"--env {redact(text)!r} is not KEY=VALUE")
    if SECRET_NAME.search(key):
        raise ModsarError(f"--env {key}={HIDDEN}: {key} names a secret; {ENV_ADVICE}")
    if holds_credentials(value):
        raise ModsarError(f"--env {key}={redact(value)}: the value holds credentials; {ENV_ADVICE}")
    return key, value


def run(args: argparse.Namespace) -> int:
    """Act on a job (status, logs, stop), or submit the command and print its job id and status: exit 1
    unless it succeeded (or, not waited for, is pending)."""
    from modsar.sweep import submit

    env = dict(parse_env(e) for e in args.env)  # refused before anything is asked of the cluster
    if not args.address:
        raise ModsarError("--address is required (the cluster's dashboard, e.g. http://HEAD:8265)")
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if rest[:1] and rest[0] in JOB_ACTIONS:
        if len(rest) != 2:
            raise ModsarError(f"usage: modsar submit --address URL {rest[0]} JOB_ID")
        action, job_id = rest
        if action == "status":
            print(to_json(submit.status(args.address, job_id), default=str))
        elif action == "logs":
            print(submit.logs(args.address, job_id), end="")
        else:
            print(f"{job_id}: {'stop requested' if submit.stop(args.address, job_id) else 'not running'}")
        return 0
    job_id, status = submit.submit(args.address, rest, env, wait=not args.no_wait, follow=args.follow)
    print(f"{job_id} {status}")
    return 0 if status in ("SUCCEEDED", "PENDING") else 1
