"""docker/ and `modsar submit` without a cluster: the files are valid, a dead address fails fast."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest
import yaml

from modsar.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_dockerfiles_copy_existing_files_onto_a_ray_image(name):
    text = (DOCKER / name).read_text()
    assert re.search(r"^FROM rayproject/ray:2\.60\.0-py311-(cpu|gpu)$", text, re.M)
    copied = [src for line in re.findall(r"^COPY (?:--\S+ )*(.+)$", text, re.M) for src in line.split()[:-1]]
    assert {"pyproject.toml", "modsar", "hf_plugins", "search_spaces"} <= set(copied)
    for src in copied:
        assert (ROOT / src).exists(), f"{name} copies {src}, which does not exist"
    assert "pip install --no-cache-dir ." in text


@pytest.mark.parametrize("name", ["cluster-onprem.yaml", "cluster-aws.yaml"])
def test_cluster_launcher_files(name):
    config = yaml.safe_load((DOCKER / name).read_text())
    for key in (
        "cluster_name",
        "max_workers",
        "provider",
        "auth",
        "docker",
        "head_start_ray_commands",
        "worker_start_ray_commands",
    ):
        assert key in config, f"{name} lacks {key}"
    if config["provider"]["type"] == "local":
        assert config["provider"]["head_ip"] and config["provider"]["worker_ips"]
    else:
        assert config["head_node_type"] in config["available_node_types"]


def test_kuberay_cluster_and_job():
    docs = list(yaml.safe_load_all((DOCKER / "kuberay.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"RayCluster", "RayJob"} and all(d["apiVersion"] == "ray.io/v1" for d in docs)
    cluster, job = kinds["RayCluster"], kinds["RayJob"]
    assert cluster["spec"]["headGroupSpec"] and cluster["spec"]["workerGroupSpecs"]
    assert job["spec"]["clusterSelector"]["ray.io/cluster"] == cluster["metadata"]["name"]
    assert job["spec"]["entrypoint"].startswith("modsar search --space")


def test_docker_readme_explains_every_file():
    text = (DOCKER / "README.md").read_text()
    for path in DOCKER.iterdir():
        if path.name != "README.md":
            assert path.name in text


def test_submit_to_a_dead_address_fails_fast(capsys):
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.perf_counter()
    code = main(
        [
            "submit",
            "--address",
            f"http://127.0.0.1:{port}",
            "--",
            "search",
            "--space",
            "quickstart",
            "--dataset",
            "synthetic",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and time.perf_counter() - started < 10
    assert len(err) == 1 and f"nothing listens at http://127.0.0.1:{port}" in err[0]


@pytest.mark.parametrize(
    "address, said",
    [
        (
            "http://[::1:8265",
            "--address http://[::1:8265 is not a URL like http://HEAD:8265 (Invalid IPv6 URL)",
        ),
        ("http://127.0.0.1:port", "--address http://127.0.0.1:port is not a URL like http://HEAD:8265 (Port"),
    ],
)
def test_submit_to_an_address_that_is_no_url_is_one_line(capsys, address, said):
    """Once an internal error (urlparse's ValueError)."""
    assert main(["submit", "--address", address, "status", "raysubmit_x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"modsar: error: {said}"), err
