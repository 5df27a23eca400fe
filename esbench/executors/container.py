"""Container runtimes: each cell's `esbench run-cell` inside a pinned image (`esbench run --runtime podman|docker|
apptainer --image IMAGE`).

The image's entry point is `esbench` (see `Dockerfile`), so the runtime runs `IMAGE run-cell CELL.json --out DIR`.
The runtime:
- mounts the cell's suite folder (read-write) and the caches the cell reads and fills: `HF_HOME` (default
  `~/.cache/huggingface`) and esbench's own (`ESBENCH_CACHE`, default `~/.cache/esbench`), each at the same path
  inside, plus any `--mount SRC[:DST][:ro]`;
- passes the GPU when the cell runs on one (`--device nvidia.com/gpu=all` for podman through CDI, `--gpus all` for
  docker, `--nv` for apptainer), with `--ipc=host` (PyTorch and vLLM share memory between processes);
- runs as the calling user (`--user UID:GID`, with `--userns=keep-id` for rootless podman; apptainer does so
  already), so files in the run folder stay the user's, whatever USER the image names;
- pins the environment: only the variables in `PASSED_ENV` cross (HF settings and esbench's execution options), with
  `--cleanenv` for apptainer;
- reads the image digest from the runtime itself (`podman/docker image inspect`, the SHA-256 of a `.sif` file) and
  hands it to `run-cell --container-image ... --container-digest ...`, which records it in provenance.

`ESBENCH_PODMAN_ARGS` / `ESBENCH_DOCKER_ARGS` / `ESBENCH_APPTAINER_ARGS` add global options before the subcommand
(e.g. `--storage-driver vfs --runtime runc --cgroup-manager cgroupfs` on machines where podman's defaults fail),
`ESBENCH_<KIND>_RUN_ARGS` options of `run` itself (e.g. `--ulimit nofile=20000:20000` where the default limits
exceed the hard ones), and `ESBENCH_CONTAINER_NETWORK` the network (`host` by default; `none` for offline cells).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Kind = Literal["podman", "docker", "apptainer"]
KINDS: tuple[str, ...] = ("podman", "docker", "apptainer")
PASSED_ENV = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_DATASETS_CACHE",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "HF_ENDPOINT",
    "HF_TOKEN",
    "ESBENCH_CACHE",
    "ESBENCH_DATASETS_DIR",
    "ESBENCH_ES_WORKERS",
    "ESBENCH_RAY_ADDRESS",
    "ESBENCH_VLLM_MEMORY",
    "ESBENCH_TRL_VLLM_MEMORY",
    "ESBENCH_VLLM_KV_BYTES",
)
FIXED_ENV = {"TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    readonly: bool = False

    @classmethod
    def parse(cls, text: str) -> Mount:
        parts = text.split(":")
        ro = parts[-1] == "ro"
        if parts[-1] in ("ro", "rw"):
            parts = parts[:-1]
        if not 1 <= len(parts) <= 2 or not parts[0]:
            raise ValueError(f"--mount {text!r}: expected SRC[:DST][:ro]")
        return cls(os.path.abspath(parts[0]), parts[-1] if len(parts) == 2 else os.path.abspath(parts[0]), ro)


@dataclass(frozen=True)
class ContainerRuntime:
    kind: Kind
    image: str
    mounts: tuple[Mount, ...] = ()
    binary: str = ""
    global_args: tuple[str, ...] = field(default=())
    network: str = "host"  # ESBENCH_CONTAINER_NETWORK (podman/docker `--network`): `none` for fully offline cells
    run_args: tuple[str, ...] = ()  # ESBENCH_<KIND>_RUN_ARGS: options of `run` itself (e.g. podman `--ulimit`)

    @classmethod
    def from_options(cls, kind: str, image: str | None, mounts: list[str] | None = None) -> ContainerRuntime:
        if kind not in KINDS:
            raise ValueError(f"unknown runtime {kind!r}; known: local, {', '.join(KINDS)}")
        if not image:
            raise ValueError(f"--runtime {kind} needs --image (a name@sha256:digest, name:tag or .sif file)")
        extra = tuple(shlex.split(os.environ.get(f"ESBENCH_{kind.upper()}_ARGS", "")))
        network = os.environ.get("ESBENCH_CONTAINER_NETWORK", "host")
        run_args = tuple(shlex.split(os.environ.get(f"ESBENCH_{kind.upper()}_RUN_ARGS", "")))
        parsed = tuple(Mount.parse(m) for m in mounts or ())
        return cls(kind, image, parsed, kind, extra, network, run_args)  # type: ignore[arg-type]

    # -- the image --------------------------------------------------------------------------------------------
    def digest(self) -> str:
        """The image's digest as the runtime reports it (apptainer: the SIF file's SHA-256)."""
        if self.kind == "apptainer":
            h = hashlib.sha256()
            with open(self.image, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            return f"sha256:{h.hexdigest()}"
        fmt = "{{.Digest}}" if self.kind == "podman" else "{{json .RepoDigests}} {{.Id}}"
        cmd = [self.binary, *self.global_args, "image", "inspect", "--format", fmt, self.image]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed: {out.stderr.strip() or out.stdout.strip()}")
        text = out.stdout.strip()
        if self.kind == "docker":  # a pulled image has a registry digest; a locally built one only its id
            repo_digests, _, image_id = text.rpartition(" ")
            found = json.loads(repo_digests or "[]") or [image_id]
            text = found[0].rpartition("@")[2] or found[0]
        if not text.startswith("sha256:"):
            raise RuntimeError(f"{self.kind} reported no digest for {self.image}: {text!r}")
        return text

    # -- the command ------------------------------------------------------------------------------------------
    def mounts_for(self, cell_dir: Path) -> list[Mount]:
        home = Path.home()
        hf = os.environ.get("HF_HOME", str(home / ".cache" / "huggingface"))
        esb = os.environ.get("ESBENCH_CACHE", str(home / ".cache" / "esbench"))
        out = [Mount(str(Path(cell_dir).resolve().parent), str(Path(cell_dir).resolve().parent))]
        for d in (hf, esb):
            Path(d).mkdir(parents=True, exist_ok=True)
            out.append(Mount(d, d))
        return out + list(self.mounts)

    def env(self) -> dict[str, str]:
        home = Path.home()
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        env.setdefault("HF_HOME", str(home / ".cache" / "huggingface"))
        env.setdefault("ESBENCH_CACHE", str(home / ".cache" / "esbench"))
        return {**env, **FIXED_ENV}

    def command(self, cell_json: Path, cell_dir: Path, gpu: bool, digest: str) -> list[str]:
        """The full command line that runs one cell in the image."""
        args = [
            "run-cell",
            str(Path(cell_json).resolve()),
            "--out",
            str(Path(cell_dir).resolve()),
            "--container-image",
            self.image,
            "--container-digest",
            digest,
        ]
        mounts, env = self.mounts_for(cell_dir), self.env()
        if self.kind == "apptainer":
            cmd = [
                self.binary,
                *self.global_args,
                "run",
                "--cleanenv",
                "--containall",
                "--writable-tmpfs",
                *self.run_args,
            ]
            cmd += ["--nv"] if gpu else []
            for m in mounts:
                cmd += ["--bind", f"{m.source}:{m.target}:{'ro' if m.readonly else 'rw'}"]
            for k, v in sorted(env.items()):
                cmd += ["--env", f"{k}={v}"]
            return [*cmd, self.image, *args]
        cmd = [self.binary, *self.global_args, "run", "--rm", "--ipc=host", f"--network={self.network}", *self.run_args]
        if gpu:
            cmd += ["--gpus", "all"] if self.kind == "docker" else ["--device", "nvidia.com/gpu=all"]
        if self.kind == "podman" and os.geteuid() != 0:  # rootless: the caller's uid inside maps to the caller
            cmd += ["--userns=keep-id"]
        cmd += ["--user", f"{os.getuid()}:{os.getgid()}"]  # files written in the run folder stay the caller's
        for m in mounts:
            cmd += ["--volume", f"{m.source}:{m.target}:{'ro' if m.readonly else 'rw'}"]
        for k, v in sorted(env.items()):
            cmd += ["--env", f"{k}={v}"]
        return [*cmd, "--workdir", str(Path(cell_dir).resolve().parent), self.image, *args]


def cell_uses_gpu(spec: dict) -> bool:
    """A cell needs the GPU passed in when its backend asks for CUDA, or for `auto` on a host that has one."""
    device = (spec.get("backend") or {}).get("device", "auto")
    if device == "cuda":
        return True
    if device == "cpu":
        return False
    from shutil import which

    return which("nvidia-smi") is not None
