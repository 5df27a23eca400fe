"""CUDA detection without a GPU: a fake NVIDIA kernel module file, a fake `nvidia-smi` on PATH and monkeypatched
torch.cuda stand in for the host. The case this guards: a driver older than torch's CUDA needs makes torch see no GPU
at all, and `device: auto` used to run the whole suite on the CPU without a word."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from esbench import backends, gpu, provenance
from esbench.backends import resolve_device

PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16-I3-B03)\n"
GCC = "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"


class Host:
    """One fake host: what /proc and /dev show, what `nvidia-smi` prints, what torch reports."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        self.tmp, self.mp = tmp_path, monkeypatch
        self.proc = tmp_path / "proc"
        self.proc.mkdir()
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        monkeypatch.setattr(gpu, "PROC_VERSION", self.proc / "version")
        monkeypatch.setattr(gpu, "PROC_GPUS", str(self.proc / "gpus" / "*"))
        monkeypatch.setattr(gpu, "DEV_NVIDIA0", tmp_path / "dev" / "nvidia0")
        # no real nvidia-smi may answer: keep only PATH entries without one, and put ours first
        path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "nvidia-smi").exists()]
        monkeypatch.setenv("PATH", os.pathsep.join([str(self.bin), *path]))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.setattr(torch.version, "cuda", None)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        backends._warn_cpu_torch_once.cache_clear()  # warned once per process

    def driver_file(self, text: str) -> None:
        self.proc.joinpath("version").write_text(text + GCC)

    def gpu_nodes(self, n: int = 1) -> None:
        for i in range(n):
            d = self.proc / "gpus" / f"0000:{i:02x}:00.0"
            d.mkdir(parents=True)
            d.joinpath("information").write_text("Model: NVIDIA H200\n")

    def smi(self, driver: str | None, names: list[str] = (), rc: int = 0) -> None:
        script = self.bin / "nvidia-smi"
        lines = "\n".join(f'  echo "{n}"' for n in names) or "  :"
        script.write_text(
            "#!/bin/sh\n"
            f"[ {rc} -ne 0 ] && {{ echo 'NVIDIA-SMI has failed' >&2; exit {rc}; }}\n"
            'case "$1" in\n'
            f'  --query-gpu=driver_version) echo "{driver}" ;;\n'
            f"  --query-gpu=name)\n{lines}\n  ;;\n"
            "esac\n"
        )
        script.chmod(script.stat().st_mode | stat.S_IEXEC)

    def torch(self, cuda: str | None, usable: bool = False, devices: tuple[tuple[str, int], ...] = ()) -> None:
        self.mp.setattr(torch.version, "cuda", cuda)
        self.mp.setattr(torch.cuda, "is_available", lambda: usable)
        if usable:
            props = [
                SimpleNamespace(name=n, multi_processor_count=sm, major=9, minor=0, total_memory=150_000 << 20)
                for n, sm in devices
            ]
            self.mp.setattr(torch.cuda, "device_count", lambda: len(props))
            self.mp.setattr(torch.cuda, "get_device_properties", lambda i: props[i])
            self.mp.setattr(torch.cuda, "mem_get_info", lambda i: (140_000 << 20, 150_000 << 20))


@pytest.fixture
def host(tmp_path, monkeypatch) -> Host:
    return Host(tmp_path, monkeypatch)


def test_the_driver_is_read_from_the_kernel_module_then_nvidia_smi(host):
    assert gpu.driver_version() is None
    host.smi("570.86.10", ["NVIDIA H100 80GB HBM3"])
    assert gpu.driver_version() == "570.86.10"  # no /proc file (e.g. a container without it): nvidia-smi
    host.driver_file(PROPRIETARY)
    assert gpu.driver_version() == "550.54.15"  # the kernel module wins: it is what actually runs
    host.driver_file(OPEN)
    assert gpu.driver_version() == "580.65.06"


def test_a_gpu_is_seen_by_proc_dev_or_nvidia_smi_never_through_torch(host):
    host.torch("13.0", usable=False)
    assert not gpu.host_has_nvidia_gpu()
    host.gpu_nodes()
    assert gpu.host_has_nvidia_gpu()


def test_nvidia_smi_listing_a_gpu_counts_and_a_failing_one_does_not(host):
    host.smi("550.54.15", [], rc=9)
    assert not gpu.host_has_nvidia_gpu() and gpu.driver_version() is None
    host.smi("550.54.15", ["NVIDIA A100-SXM4-80GB"])
    assert gpu.host_has_nvidia_gpu()


def test_minimum_drivers_follow_nvidias_minor_version_compatibility_table():
    assert gpu.min_driver_for_cuda("13.0") == "580" == gpu.min_driver_for_cuda("13.5")
    assert gpu.min_driver_for_cuda("12.8") == "525"
    assert gpu.MIN_DRIVER == gpu.min_driver_for_cuda(gpu.CUDA_MAJOR)
    with pytest.raises(ValueError, match="no known minimum driver"):
        gpu.min_driver_for_cuda("10.2")


def test_an_old_driver_under_a_cuda13_torch_stops_auto_with_versions_and_the_fix(host):
    host.driver_file(PROPRIETARY)  # 550: a CUDA 12.4 driver
    host.gpu_nodes()
    host.torch("13.0", usable=False)  # what torch 2.13.0 from PyPI does there: no GPU, no error
    for policy in ("auto", "cuda"):
        with pytest.raises(gpu.CudaUnusable) as e:
            resolve_device(policy)
        msg = str(e.value)
        assert "550.54.15" in msg and "CUDA 13.0" in msg and ">= 580" in msg, msg
        assert "upgrade the NVIDIA driver to >= 580" in msg and "CUDA 12" in msg and "/whl/cu12" in msg, msg
        assert "\n" not in msg  # one paragraph
    f = gpu.facts()
    assert f == {
        "driver": "550.54.15",
        "torch_cuda": "13.0",
        "cuda_available": False,
        "devices": [],
        "min_driver": "580",
    }


def test_a_new_enough_driver_with_a_hidden_gpu_says_where_to_look(host):
    host.driver_file(OPEN)
    host.gpu_nodes()
    host.torch("13.0", usable=False)
    with pytest.raises(gpu.CudaUnusable, match="CUDA_VISIBLE_DEVICES") as e:
        resolve_device("auto")
    assert "580.65.06" in str(e.value) and "13.0" in str(e.value)


def test_no_gpu_at_all_is_cpu_and_cuda_without_one_is_the_plain_error(host):
    host.torch("13.0", usable=False)
    assert resolve_device("auto") == "cpu"
    with pytest.raises(RuntimeError, match="torch sees no GPU") as e:
        resolve_device("cuda")
    assert not isinstance(e.value, gpu.CudaUnusable)
    assert resolve_device("cpu") == "cpu"


def test_a_cpu_only_torch_on_a_gpu_host_is_a_deliberate_cpu_run_for_auto_only(host):
    host.driver_file(OPEN)
    host.gpu_nodes()
    host.torch(None)
    with pytest.warns(UserWarning, match="CPU-only build"):
        assert resolve_device("auto") == "cpu"
    with pytest.raises(gpu.CudaUnusable, match="CPU-only build"):
        resolve_device("cuda")


def test_gpus_hidden_by_cuda_visible_devices_are_a_cpu_run_for_auto_only(host, monkeypatch):
    host.driver_file(OPEN)
    host.gpu_nodes()
    host.torch("13.0", usable=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # what Ray gives a task with no GPU
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_device("auto") == "cpu"
    with pytest.raises(gpu.CudaUnusable, match="CUDA_VISIBLE_DEVICES=''"):
        resolve_device("cuda")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a GPU named, and still unusable: that is the error
    with pytest.raises(gpu.CudaUnusable):
        resolve_device("auto")


def test_a_usable_gpu_is_cuda_and_provenance_names_each_gpu_and_its_sm_count(host):
    host.driver_file(OPEN)
    host.gpu_nodes(2)
    host.torch("13.0", usable=True, devices=(("NVIDIA H200", 132), ("NVIDIA H100 80GB HBM3", 132)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_device("auto") == "cuda" and resolve_device("cuda") == "cuda"
    gpu.require_usable_cuda()  # quiet
    assert gpu.devices()[0] == {
        "index": 0,
        "name": "NVIDIA H200",
        "sm_count": 132,
        "capability": "9.0",
        "total_memory": 150_000 << 20,
        "free_memory": 140_000 << 20,
    }
    env = provenance.environment()
    assert env["driver"] == "580.65.06" and env["cuda"] == "13.0" and env["cuda_available"] is True
    assert env["gpus"] == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    assert [(d["name"], d["sm_count"]) for d in env["gpu_devices"]] == [
        ("NVIDIA H200", 132),
        ("NVIDIA H100 80GB HBM3", 132),
    ]
    assert all("free_memory" not in d for d in env["gpu_devices"])  # no CUDA context on GPUs the cell does not use


def test_importing_the_backends_package_still_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, esbench.backends, esbench.gpu; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
