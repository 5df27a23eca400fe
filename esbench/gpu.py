"""GPU and driver facts, read without needing a torch that can use CUDA.

The one place esbench asks "is there an NVIDIA GPU, which driver runs it, and can this torch use it?". A torch
built for a newer CUDA than the kernel driver supports sees no GPU at all (`torch.cuda.is_available()` is False,
silently), so the driver is read from the kernel module (`/proc/driver/nvidia/version`) or `nvidia-smi`, never
through torch. `resolve_device` (esbench.backends), provenance and `esbench doctor` all read these facts from here.

The image, the lock, the README and this module agree on one CUDA major and its minimum driver
(tests/test_gpu_stack.py checks that they do): torch 2.13.0 from PyPI pulls `cuda-toolkit` 13.0 and vLLM 0.30.0's
dependencies the CUDA 13 runtime.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

# The CUDA major the gpu image and locks/gpu.txt are built on, and the oldest Linux driver branch that runs it.
CUDA_MAJOR = "13"
MIN_DRIVER = "580"

# Where the NVIDIA kernel module states its version (also mounted into containers by the NVIDIA container toolkit).
# Module-level so tests can point them at a temporary file.
PROC_VERSION = Path("/proc/driver/nvidia/version")
PROC_GPUS = "/proc/driver/nvidia/gpus/*"
DEV_NVIDIA0 = Path("/dev/nvidia0")
SMI_TIMEOUT_S = 5.0

# Minimum Linux driver per CUDA major under CUDA minor-version compatibility: NVIDIA's CUDA Toolkit release notes,
# Table 3 "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version Compatibility"
# (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html#id5): CUDA 13.x >= 580, 12.x >= 525.60.13,
# 11.x >= 450.80.02. Any 13.x build (torch's 13.0, the lock's 13.5 nvcc) runs on a 580 driver; code that JITs PTX
# produced by a newer toolkit than the driver is the exception minor-version compatibility does not cover.
MIN_DRIVER_BY_CUDA_MAJOR = {"13": "580", "12": "525", "11": "450"}

_VERSION_RE = re.compile(r"(?<![\w.])(\d{3,}\.\d+(?:\.\d+)?)(?![\w.])")


class CudaUnusable(RuntimeError):
    """An NVIDIA GPU is present but this torch cannot use it (the message says why and what to change)."""


def _smi(query: str) -> list[str] | None:
    """Lines of `nvidia-smi --query-gpu=QUERY --format=csv,noheader`, or None when it is absent or fails."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=SMI_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def driver_version() -> str | None:
    """The NVIDIA kernel driver version (e.g. "580.65.06"), or None where there is no NVIDIA driver."""
    try:
        text = PROC_VERSION.read_text(errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.startswith("NVRM"):  # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ..."
            m = _VERSION_RE.search(line)
            if m:
                return m.group(1)
    lines = _smi("driver_version")
    if lines and _VERSION_RE.fullmatch(lines[0]):
        return lines[0]
    return None


def host_has_nvidia_gpu() -> bool:
    """True when the host exposes an NVIDIA GPU, whether or not torch can use it."""
    if DEV_NVIDIA0.exists() or glob.glob(PROC_GPUS):
        return True
    return bool(_smi("name"))


def torch_cuda_build() -> str | None:
    """The CUDA version torch was built with ("13.0"), or None for a CPU build (or no torch)."""
    try:
        import torch
    except ImportError:
        return None
    return torch.version.cuda


def _major(version: str) -> str:
    return version.strip().split(".")[0]


def min_driver_for_cuda(cuda: str) -> str:
    """The oldest Linux driver branch that runs CUDA `cuda` ("13.0" -> "580") under minor-version compatibility."""
    major = _major(cuda)
    if major not in MIN_DRIVER_BY_CUDA_MAJOR:
        raise ValueError(f"no known minimum driver for CUDA {cuda!r}; known majors: {sorted(MIN_DRIVER_BY_CUDA_MAJOR)}")
    return MIN_DRIVER_BY_CUDA_MAJOR[major]


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def devices(free_memory: bool = True) -> list[dict[str, Any]]:
    """Each GPU torch can use: index, name, SM count, capability, memory. Empty when torch sees none.

    `free_memory` reads `torch.cuda.mem_get_info`, which creates a CUDA context on each device: doctor wants it,
    provenance (every record, possibly on a GPU another process owns) does not.
    """
    if not _cuda_available():
        return []
    import torch

    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        d: dict[str, Any] = {
            "index": i,
            "name": p.name,
            "sm_count": p.multi_processor_count,
            "capability": f"{p.major}.{p.minor}",
            "total_memory": int(p.total_memory),
        }
        if free_memory:
            d["free_memory"] = int(torch.cuda.mem_get_info(i)[0])
        out.append(d)
    return out


def visible_memory() -> list[int]:
    """Total memory in bytes of each GPU this process may use, read through nvidia-smi (no CUDA context: `esbench
    run` checks the memory plan in the parent process, which must not hold a context on a GPU its cells need).
    Integer `CUDA_VISIBLE_DEVICES` entries narrow the list; empty where there is no NVIDIA GPU."""
    lines = _smi("index,memory.total") or []
    sizes: dict[str, int] = {}
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[1].split()[0].isdigit():
            sizes[parts[0]] = int(parts[1].split()[0]) << 20  # MiB
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(v.strip().isdigit() for v in visible.split(",") if v.strip()):
        return [sizes[v.strip()] for v in visible.split(",") if v.strip() in sizes]
    return [sizes[k] for k in sorted(sizes, key=lambda k: int(k) if k.isdigit() else 0)]


def facts(free_memory: bool = True) -> dict[str, Any]:
    """Everything above in one dict, for provenance and `esbench doctor`."""
    cuda = torch_cuda_build()
    return {
        "driver": driver_version(),
        "torch_cuda": cuda,
        "cuda_available": _cuda_available(),
        "devices": devices(free_memory=free_memory),
        "min_driver": MIN_DRIVER_BY_CUDA_MAJOR.get(_major(cuda)) if cuda else None,
    }


# PyTorch's wheel index for a driver's CUDA major (the newest CUDA build each major has for torch 2.13).
_INDEX = {"13": "https://download.pytorch.org/whl/cu130", "12": "https://download.pytorch.org/whl/cu128"}


def _driver_cuda_major(driver: str) -> str | None:
    """The newest CUDA major a driver runs (the inverse of MIN_DRIVER_BY_CUDA_MAJOR)."""
    branch = int(_major(driver))
    fits = [m for m, d in MIN_DRIVER_BY_CUDA_MAJOR.items() if branch >= int(d)]
    return max(fits, key=int) if fits else None


def gpus_hidden() -> bool:
    """CUDA_VISIBLE_DEVICES is set and names no device ("" or "-1"): this process was kept off the GPUs on purpose
    (a Ray task given no GPU, a user's CPU run)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    return value is not None and value.strip() in ("", "-1")


def unusable_reason() -> str | None:
    """Why torch cannot use the GPU this host has, with the fix; None when it can, or when there is no GPU.

    Two things are CPU runs on purpose, not errors, here (the `auto` view): a CPU-only build of torch on a GPU host
    (the cpu image, `make test` on a GPU box) and CUDA_VISIBLE_DEVICES hiding every GPU;
    `require_usable_cuda(cpu_build_ok=False)` reports both.
    """
    return _reason(cpu_build_ok=True)


def _reason(cpu_build_ok: bool) -> str | None:
    if not host_has_nvidia_gpu() or _cuda_available():
        return None
    driver, cuda = driver_version(), torch_cuda_build()
    shown = driver or "unknown (no /proc/driver/nvidia/version, no nvidia-smi)"
    if gpus_hidden():
        if cpu_build_ok:
            return None
        return (
            f"an NVIDIA GPU is present (driver {shown}) but CUDA_VISIBLE_DEVICES="
            f"{os.environ['CUDA_VISIBLE_DEVICES']!r} hides every GPU from this process. Fix: unset it or name a "
            "GPU, or set backend.device: cpu to run on the CPU on purpose."
        )
    if cuda is None:
        if cpu_build_ok:
            return None
        return (
            f"an NVIDIA GPU is present (driver {shown}) but this torch is a CPU-only build (torch.version.cuda is "
            f"None). Fix: install the CUDA build of torch (the gpu image, or locks/gpu.txt: CUDA {CUDA_MAJOR}, "
            f"driver >= {MIN_DRIVER}), or set backend.device: cpu to run on the CPU on purpose."
        )
    need = MIN_DRIVER_BY_CUDA_MAJOR.get(_major(cuda), "?")
    if driver and need != "?" and int(_major(driver)) < int(need):
        have = _driver_cuda_major(driver)
        alt = (
            f", or install a torch built for the driver's CUDA {have} (e.g. pip install torch --index-url "
            f"{_INDEX.get(have, _INDEX['12'])}; esbench's locks and gpu image are CUDA {CUDA_MAJOR} only)"
            if have
            else ""
        )
        return (
            f"an NVIDIA GPU is present but torch cannot use it: the NVIDIA driver is {driver}, and this torch was "
            f"built with CUDA {cuda}, which needs driver >= {need}. Fix: upgrade the NVIDIA driver to >= {need}"
            f"{alt}. Check with `esbench doctor --device cuda`; set backend.device: cpu to run on the CPU on purpose."
        )
    detail = _cuda_init_error()
    return (
        f"an NVIDIA GPU is present (driver {shown}, needs >= {need} for torch's CUDA {cuda}) but "
        f"torch.cuda.is_available() is False{': ' + detail if detail else ''}. Fix: check that the GPU is visible "
        "to this process (CUDA_VISIBLE_DEVICES, the container's --gpus / --device nvidia.com/gpu=all, the job's GPU "
        "allocation) and run `esbench doctor --device cuda`; set backend.device: cpu to run on the CPU on purpose."
    )


def _cuda_init_error() -> str:
    """torch's own reason for not initialising CUDA (only asked once CUDA is known to be unusable)."""
    try:
        import torch

        torch.cuda.init()
    except Exception as e:  # noqa: BLE001 - any failure text is the diagnosis
        return " ".join(str(e).split())[:300]
    return ""


def require_usable_cuda(cpu_build_ok: bool = False) -> None:
    """Raise CudaUnusable, naming the driver, torch's CUDA build, the minimum driver and the fix, when a GPU is
    present that torch cannot use. Returns quietly when torch can use it or when there is no GPU.

    `cpu_build_ok` is the `auto` policy's view (`unusable_reason`): a CPU-only torch or GPUs hidden by
    CUDA_VISIBLE_DEVICES are CPU runs on purpose, so they do not raise."""
    reason = _reason(cpu_build_ok=cpu_build_ok)
    if reason:
        raise CudaUnusable(reason)
