"""Ray for a search: join the cluster --address names, or start a local one bound to loopback, with workers
that import this very modsar; then check that the cluster can hold a trial, and how many at once."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any

from modsar.errors import ModsarError
from modsar.outputs import (
    RAY_ADVICE,
    refuse_address_user,
    refuse_credentials,
)
from modsar.sweep.cluster import check_address, host_and_port, is_loopback, private_token, quiet_dashboard
from modsar.sweep.credentials import redact, refuse_on_a_cluster
from modsar.sweep.plan import SearchRequest


@contextlib.contextmanager
def _loopback_only():
    """While a local Ray cluster starts, make it bind every socket to 127.0.0.1; then restore the process.

    A local search needs no network, but Ray takes the machine's outward address as its node address (and
    listens on all interfaces): it fails where that address is unusable, and exposes ports where it is.
    Ray's own switch for a local-only node (the one it uses on macOS and Windows) is ENABLE_RAY_CLUSTER:
    the child processes (GCS, raylet, workers) read it from the environment they are started with, and the
    driver, which imported Ray already, from its constant. Both go back afterwards, so a later `ray start`
    or cluster connection from this process is not affected; joining a cluster (--address) never uses this.
    Ray's switch is private: `connect_ray` checks the outcome and refuses if a Ray version ignores it."""
    from ray._private import ray_constants

    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    saved_env, saved_flag = os.environ.get(name), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[name], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved_env


@contextlib.contextmanager
def _workers_import_this_modsar():
    """Ray puts the driver's working directory first on every worker's sys.path (and starts workers there).
    Started from the folder above a checkout named `modsar`, workers would import that folder as an empty
    namespace package instead of the installed package, and every trial would die on its first import. So Ray
    is started from the folder that holds the package this driver runs: workers import the same `modsar` (and
    `hf_plugins`) first, wherever the user stands. The driver's own directory comes back at once; every path a
    trial reads (data root, storage, plugin files) is absolute by then, and so is every path the local workers
    inherit in their environment: PYTHONPATH entries (`PYTHONPATH=.` names the user's folder, as it does for
    the driver) and plugin files in $MODSAR_PLUGINS (Tune runs each trial in its own folder)."""
    import modsar
    from modsar.model.registry import PLUGINS_ENV

    here = os.getcwd()
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", PLUGINS_ENV)}
    if saved["PYTHONPATH"]:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            os.path.join(here, entry) for entry in saved["PYTHONPATH"].split(os.pathsep)
        )
    if saved[PLUGINS_ENV]:
        os.environ[PLUGINS_ENV] = ",".join(
            os.path.join(here, spec.strip()) if spec.strip().endswith(".py") else spec
            for spec in saved[PLUGINS_ENV].split(",")
        )
    os.chdir(Path(modsar.__file__).resolve().parent.parent)
    try:
        yield
    finally:
        os.chdir(here)
        for name, value in saved.items():
            if value is not None:
                os.environ[name] = value


_JOINED: dict[str, str] = {}  # the address a search asked for ("" for a local cluster) and the cluster's GCS


def connect_ray(req: SearchRequest) -> None:
    """Join the cluster at req.address (or $RAY_ADDRESS), checked first, or start a local one that makes no
    connection beyond 127.0.0.1 (modsar.sweep.cluster); where this process is connected already, keep that
    connection if it is the one asked for."""
    import ray
    import torch  # before ray.init: loaded after it, in a Ray job driver, torch's MKL failed to load

    address = req.address or os.environ.get("RAY_ADDRESS")
    address = None if address == "local" else address
    refuse_credentials("--address" if req.address else "$RAY_ADDRESS", address, RAY_ADVICE)
    refuse_address_user("--address" if req.address else "$RAY_ADDRESS", address)
    if ray.is_initialized() and _keep_connection(address):
        return
    refuse_on_a_cluster(address, req.mlflow, req.results)  # the cluster records this driver's command line
    os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    try:
        if address:
            _join(address)
        else:
            _start_local(req, torch.cuda.device_count())
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = (
            (
                "; the cluster uses token authentication: set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the "
                "cluster's token"
            )
            if "token" in str(exc).lower() or "auth" in str(exc).lower()
            else ""
        )
        raise ModsarError(
            f"cannot connect to Ray{' at ' + redact(address) if address else ''}: {redact(first)}{hint}"
        ) from None
    _JOINED.update(wanted=address or "", gcs=ray.get_runtime_context().gcs_address)


QUIET: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR", "configure_logging": True}


def _join(address: str) -> None:
    """ray.init on an existing cluster, once something answers at its address. A cluster on this machine
    named by a loopback address keeps it: Ray would replace it by the machine's outward address, which it
    finds by a connection towards 8.8.8.8."""
    import ray

    check_address(address)
    with (
        _workers_import_this_modsar(),
        _loopback_only() if is_loopback(address) else contextlib.nullcontext(),
    ):
        ray.init(address=address, **QUIET)


def _start_local(req: SearchRequest, gpus: int) -> None:
    """A local cluster on 127.0.0.1 only, that reaches no other address, with a private token file."""
    import ray

    with _loopback_only(), _workers_import_this_modsar(), quiet_dashboard(), private_token():
        ray.init(
            num_cpus=os.cpu_count() or 1,
            num_gpus=gpus,
            include_dashboard=req.dashboard,
            dashboard_host="127.0.0.1",
            object_store_memory=256 * 1024 * 1024,
            **QUIET,
        )
    if (node_ip := ray.util.get_node_ip_address()) != "127.0.0.1":
        ray.shutdown()
        raise ModsarError(
            f"the local Ray cluster took the address {node_ip} instead of 127.0.0.1 (this Ray "
            "version ignores its local-only switch); run inside a private network namespace "
            "(unshare -n) or start Ray yourself and pass --address"
        )


def _keep_connection(address: str | None) -> bool:
    """Whether a search asking for `address` (None: a local cluster) runs on the Ray this process is connected
    to. A cluster an earlier search of this process started or joined is left for another address; one the
    caller connected to (ray.init) serves a search without an address, or with its own address, and any
    other address is refused in one line."""
    import ray

    current = ray.get_runtime_context().gcs_address
    if _JOINED.get("gcs") == current:
        if _JOINED.get("wanted") == (address or ""):
            return True
        ray.shutdown()
        _JOINED.clear()
        return False
    if not address or address == "auto" or _same_cluster(address, current):
        return True
    raise ModsarError(
        f"this process is connected to the Ray cluster at {current} already (ray.init ran before), not to "
        f"--address {redact(address)}; call ray.shutdown() first, or leave the address out to search there"
    )


def _same_cluster(address: str, gcs: str) -> bool:
    """Whether a Ray address names the cluster whose GCS is at `gcs` (HOST:PORT)."""
    found = host_and_port(address)
    host, _, port = gcs.rpartition(":")
    if found is None or str(found[1]) != port:
        return False
    if is_loopback(address):
        return True
    try:
        return socket.gethostbyname(found[0]) == host.strip("[]")
    except OSError:
        return False


def check_resources(req: SearchRequest) -> dict[str, float]:
    """Refuse requests the cluster can never satisfy (they would sit PENDING forever)."""
    import ray

    total = ray.cluster_resources()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    best_cpu = max((n["Resources"].get("CPU", 0) for n in nodes), default=total.get("CPU", 0))
    best_gpu = max((n["Resources"].get("GPU", 0) for n in nodes), default=total.get("GPU", 0))
    if req.gpus_per_trial > 0 and best_gpu == 0:
        raise ModsarError(
            f"--gpus-per-trial {req.gpus_per_trial} asks for a GPU, but the Ray cluster has none "
            "(CPU only); drop --gpus-per-trial or connect to a GPU cluster with --address"
        )
    if req.gpus_per_trial > best_gpu:
        raise ModsarError(
            f"--gpus-per-trial {req.gpus_per_trial} exceeds the largest node's {best_gpu:g} GPUs"
        )
    if req.cpus_per_trial > best_cpu:
        raise ModsarError(
            f"--cpus-per-trial {req.cpus_per_trial:g} exceeds the largest node's {best_cpu:g} CPUs; lower it"
        )
    return total


def trial_slots(req: SearchRequest, total: dict[str, float]) -> int:
    """Trials at once: what the cluster's CPUs (and GPUs) hold at the request's share each, or
    --max-concurrent."""
    slots = max(1, int(total.get("CPU", 1) // req.cpus_per_trial))
    if req.gpus_per_trial:
        slots = min(slots, max(1, int(total.get("GPU", 0) / req.gpus_per_trial)))
    return req.max_concurrent or slots
