"""Provenance of the environment a record was produced in (`esbench env` prints it)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import esbench

PACKAGES = ("torch", "transformers", "trl", "lm_eval", "vllm", "datasets", "accelerate", "math-verify")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


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
    info: dict[str, Any] = {"cuda": None, "gpus": [], "driver": None}
    try:
        import torch

        info["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            info["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else None
        except (OSError, subprocess.TimeoutExpired, IndexError):
            pass
    return info


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
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        **_gpu(),
    }
