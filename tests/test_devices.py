"""Device names: train.device and every command's --device are one line naming the option, before any work,
whether the name is not a device or asks for a GPU this machine lacks (torch is told it has none or one)."""

from __future__ import annotations

import pytest
import torch

from modsar import devices
from modsar.cli import main
from modsar.config import load_config
from modsar.errors import ModsarError

NO_GPU = (
    "no CUDA device is present on this machine (PyTorch sees no GPU); use {cpu}, or {auto} (a GPU when "
    "there is one)"
)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def checkpoint(tmp_path):
    """A file the device check comes before: it is never read."""
    path = tmp_path / "model.pt"
    path.write_bytes(b"never read")
    return str(path)


@pytest.mark.parametrize(
    "command", [["analyze", "--quiet"], ["generate", "--steps", "2", "--quiet"]], ids=["analyze", "generate"]
)
@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_device_option_without_a_gpu_is_one_line(no_gpu, capsys, checkpoint, command, name):
    """Before: "train.device=cuda but CUDA is not available here; use train.device=cpu or auto" (an option
    these commands do not have), and analyze read the checkpoint first."""
    assert main([*command, "--checkpoint", checkpoint, "--device", name]) == 2
    told = NO_GPU.format(cpu="--device cpu", auto="--device auto")
    assert capsys.readouterr().err == f"modsar: error: --device {name}: {told}\n"


def test_train_device_cuda_without_a_gpu_is_refused_before_the_data_is_made(
    no_gpu, tmp_path, capsys, isolated_data_root
):
    results = tmp_path / "results"
    assert (
        main(["train", "--dataset", "synthetic", "--quiet", "--results", str(results), "train.device=cuda"])
        == 2
    )
    told = NO_GPU.format(cpu="train.device=cpu", auto="train.device=auto")
    assert capsys.readouterr().err == f"modsar: error: train.device=cuda: {told}\n"
    assert not (isolated_data_root / "synthetic").exists() and not results.exists()


@pytest.mark.parametrize("name", ["mps", "gpu", "cuda:x", "", "cuda:-1"])
def test_a_name_that_is_not_a_device(capsys, checkpoint, name):
    """Before: mps was "not a ModSAR checkpoint (RuntimeError)" (torch.load's error) and cuda:x "CUDA is not
    available"; train.device is now refused when the config is read, before data or torch."""
    with pytest.raises(ModsarError) as refused:
        load_config(None, [f"train.device='{name}'"])
    assert (
        str(refused.value) == f"config: train.device={name!r} is not a device ModSAR runs on; use auto, "
        "cpu, cuda or cuda:N"
    )
    assert main(["generate", "--checkpoint", checkpoint, "--steps", "2", "--device", name]) == 2
    told = f"--device {name!r} is not a device ModSAR runs on; use auto, cpu, cuda or cuda:N"
    assert capsys.readouterr().err == f"modsar: error: {told}\n"


def test_a_gpu_index_past_the_machine_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert devices.resolve("cuda:0", "--device") == torch.device("cuda:0")
    assert devices.resolve("auto") == torch.device("cuda")
    assert devices.resolve("cpu") == torch.device("cpu")
    with pytest.raises(
        ModsarError,
        match=r"^--device cuda:1: this machine has 1 CUDA device, cuda:0; use "
        r"one of those, or --device auto$",
    ):
        devices.resolve("cuda:1", "--device")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(
        ModsarError,
        match=r"^train.device=cuda:2: this machine has 2 CUDA devices, cuda:0 to "
        r"cuda:1; use one of those, or train.device=auto$",
    ):
        devices.resolve("cuda:2")


def test_a_row_names_its_cpu_model_and_instruction_set(monkeypatch):
    import io
    import platform

    # the real CPU first, unpatched: the cached name is then this machine's, and the patched reads below go
    # through the uncached function only, so no later test sees a fake or fallback name
    assert devices.cpu_identity() == f"{devices._cpu_model()} ({torch.backends.cpu.get_cpu_capability()})"
    real = devices.cpu_identity()
    info = "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t: avx2\n"
    monkeypatch.setattr(devices, "open", lambda *a, **k: io.StringIO(info), raising=False)
    assert devices._cpu_model.__wrapped__() == "Test CPU 9000"
    monkeypatch.setattr(devices, "open", lambda *a, **k: io.StringIO("processor\t: 0\n"), raising=False)
    assert devices._cpu_model.__wrapped__() == (platform.processor() or platform.machine() or "unknown CPU")

    def gone(*args, **kwargs):
        raise OSError("no /proc here")

    monkeypatch.setattr(devices, "open", gone, raising=False)
    assert devices._cpu_model.__wrapped__() == (platform.processor() or platform.machine() or "unknown CPU")
    assert devices.cpu_identity() == real  # the patched reads left the cached name alone
