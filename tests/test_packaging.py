"""What a user installs: the version it reports, the wheel and sdist it is built into, the images' install.

The distribution tests build and install for real (a fresh venv, no source tree on the path) and are marked
slow; the dependencies come from this interpreter's site-packages, so nothing is downloaded."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import modsar

CHECKOUT = Path(__file__).resolve().parents[1]
DOCKERFILES = sorted((CHECKOUT / "docker").glob("Dockerfile.*"))
NOT_SHIPPED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "results",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
)
ONE_TRIAL = (
    "description: one trial from an installed wheel\n"
    "base: {task: ar, model.hidden_size: 16, model.num_layers: 1}\n"
    "params:\n  model.num_heads: {grid: [1]}\n"
    "budget: {search: grid, num_samples: 1, max_epochs: 2, eval_every: 1}\n"
)


def test_the_version_is_defined_once_and_installed_as_written():
    """pyproject.toml takes the version from modsar.__version__, so the installed metadata, the rows'
    `versions` and `modsar_version` of prepared datasets can never disagree."""
    text = (CHECKOUT / "pyproject.toml").read_text()
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]  # the [project] table (tomllib needs 3.11)
    assert not re.search(r"^version\s*=", project, re.M) and re.search(
        r'^dynamic\s*=\s*\["version"\]', project, re.M
    )
    assert 'version = { attr = "modsar.version.__version__" }' in text
    assert importlib.metadata.version("modsar") == modsar.__version__


def test_the_spaces_are_found_as_package_data():
    """In this checkout's editable install, importlib.resources maps modsar.search_spaces to search_spaces/
    (the installed wheel's case is the slow test below)."""
    import importlib.resources

    from modsar.sweep.spaces import SPACES_DIR

    found = importlib.resources.files("modsar.search_spaces")
    assert (
        Path(str(found)) == SPACES_DIR == CHECKOUT / "search_spaces" and (found / "quickstart.yaml").is_file()
    )


def fresh_venv(folder: Path) -> Path:
    """A new venv with no ModSAR in it. The dependencies (torch, ray, ...) come from this interpreter's
    site-packages through a .pth path line, which adds the folder alone: the .pth files inside it (this
    checkout's editable install) do not run there, so only what is installed into the venv can be imported."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def pip_install(python: Path, target: Path) -> None:
    """`pip install TARGET` into the venv, not editable, offline (the dependencies are there already)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            str(target),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def user_env(python: Path, home: Path) -> dict[str, str]:
    """The venv's commands first on PATH, no PYTHONPATH, a home and data folder of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MODSAR_DATA")}
    return env | {
        "PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}",
        "HOME": str(home),
        "MODSAR_DATA": str(home / "datasets"),
    }


def installed(python: Path, folder: Path) -> None:
    """modsar, and the spaces it finds, come from the venv (not from this checkout)."""
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import modsar, modsar.sweep.spaces as s; print(modsar.__file__); print(s.SPACES_DIR)",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    package, spaces = map(Path, where.split())
    venv = python.parent.parent
    assert package.is_relative_to(venv) and spaces.is_relative_to(venv), where
    assert (spaces / "quickstart.yaml").is_file() and spaces.parent == package.parent


def modsar_command(python: Path, args: list[str], cwd: Path, timeout: int = 300) -> str:
    done = subprocess.run(
        [str(python.parent / "modsar"), *args],
        cwd=cwd,
        env=user_env(python, cwd),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"modsar {' '.join(args)}: " + done.stdout[-1500:] + done.stderr[-2500:]
    return done.stdout


@pytest.mark.slow
def test_the_wheel_and_sdist_carry_everything_and_the_wheel_runs_a_search(tmp_path):
    """Built as a release is (the sdist, then the wheel from it), both pass `twine check`; the wheel holds
    every module of the tree and every bundled space. Installed (not editable) into a fresh venv, from an
    empty folder it lists and checks the spaces, runs a one-trial search and reports it."""
    source = tmp_path / "source"
    shutil.copytree(CHECKOUT, source, ignore=NOT_SHIPPED, symlinks=True)
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheel, sdist = next(dist.glob("*.whl")), next(dist.glob("*.tar.gz"))
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0 and checked.stdout.count("PASSED") == 2, checked.stdout + checked.stderr
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    modules = {
        p.relative_to(CHECKOUT).as_posix()
        for top in ("modsar", "hf_plugins")
        for p in (CHECKOUT / top).rglob("*.py")
    }
    spaces = {f"modsar/search_spaces/{p.name}" for p in (CHECKOUT / "search_spaces").glob("*.yaml")}
    assert len(spaces) >= 10 and not (modules | spaces) - shipped, sorted((modules | spaces) - shipped)

    python = fresh_venv(tmp_path / "venv")
    pip_install(python, wheel)
    empty = tmp_path / "empty"
    empty.mkdir()
    installed(python, empty)
    listing = modsar_command(python, ["spaces"], empty)
    assert all(Path(name).stem in listing for name in spaces), listing
    assert "all 400 configurations are valid" in modsar_command(
        python, ["spaces", "local_attn", "--check"], empty
    )
    (empty / "one.yaml").write_text(ONE_TRIAL)
    modsar_command(
        python,
        [
            "search",
            "--space",
            "one.yaml",
            "--dataset",
            "synthetic",
            "--experiment",
            "installed",
            "--quiet",
            "--no-estimate",
        ],
        empty,
    )
    report = modsar_command(python, ["report", "--experiment", "installed", "--out", "report"], empty)
    assert "synthetic" in report and any((empty / "report").iterdir()), report
    assert len(list((empty / "results" / "installed" / "trials").glob("*.parquet"))) == 1
    # `modsar submit` from the wheel sends its two packages, never the site-packages folder they sit in
    upload = subprocess.run(
        [
            str(python),
            "-c",
            "import json; from modsar.sweep.submit import code_to_upload as c; print(json.dumps(c({})))",
        ],
        cwd=empty,
        env=user_env(python, empty),
        capture_output=True,
        text=True,
    )
    sent = json.loads(upload.stdout)
    assert "working_dir" not in sent and [Path(p).name for p in sent["py_modules"]] == [
        "modsar",
        "hf_plugins",
    ]
    assert all(Path(p).parent.name == "site-packages" for p in sent["py_modules"]), sent


def docker_runs(dockerfile: Path) -> list[str]:
    """The shell command of each RUN instruction, continuation lines joined."""
    joined = dockerfile.read_text().replace("\\\n", " ")
    return [line[len("RUN ") :].strip() for line in joined.splitlines() if line.startswith("RUN ")]


@pytest.mark.slow
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_an_image_install_passes_the_check_its_build_ends_with(dockerfile, tmp_path):
    """No Docker engine here, so the build is reproduced: exactly the paths the Dockerfile COPYs are installed
    as it installs them (`pip install .`, not editable) into a fresh venv, and its last RUN (the space check
    and a one-epoch training, which fail the image's build when they fail) runs as the Dockerfile writes
    it."""
    copied = [
        word
        for line in dockerfile.read_text().splitlines()
        if line.startswith("COPY ")
        for word in line.split()[1:-1]
        if not word.startswith("--")
    ]
    image = tmp_path / "image"
    image.mkdir()
    for name in copied:
        if (CHECKOUT / name).is_dir():
            shutil.copytree(CHECKOUT / name, image / name, ignore=NOT_SHIPPED)
        else:
            shutil.copy(CHECKOUT / name, image / name)
    *install, check = docker_runs(dockerfile)
    assert [step.strip() for step in install[-1].split("&&")][-1] == "pip install --no-cache-dir .", install
    assert "modsar spaces --check quickstart" in check and "train.max_epochs=1" in check, check
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, image)
    installed(python, tmp_path)
    scratch = tmp_path / "modsar-check"  # the build's /tmp/modsar-check, which it removes at the end
    done = subprocess.run(
        ["bash", "-ec", check.replace("/tmp/modsar-check", str(scratch))],
        cwd=tmp_path,
        env=user_env(python, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-2500:]
    assert (
        "space 'quickstart' (grid search: AE 8, AR 4 trials): all 12 configurations are valid" in done.stdout
    )
    assert not scratch.exists()  # nothing of the check is left in the image
