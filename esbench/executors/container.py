"""Container runtimes: each cell's `esbench run-cell` inside a pinned image (`esbench run --runtime podman|docker|
apptainer --image IMAGE`).

The image's entry point is `esbench` (see `Dockerfile`), so the runtime runs `IMAGE run-cell CELL.json --out DIR`.
The runtime:
- mounts the cell's suite folder (read-write) and the caches the cell reads and fills: `HF_HOME` (default
  `~/.cache/huggingface`) and esbench's own (`ESBENCH_CACHE`, default `~/.cache/esbench`), each at the same path
  inside, plus any `--mount SRC[:DST][:ro]`;
- passes the cell's GPUs when it runs on them: the devices the local executor gave it (`--device
  nvidia.com/gpu=N` for podman through CDI, `--gpus device=N` for docker, `--nv` with `CUDA_VISIBLE_DEVICES=N` for
  apptainer, which binds every GPU), or all of them when no devices are named; with `--ipc=host` (PyTorch and vLLM
  share memory between processes);
- runs as the calling user (`--user UID:GID`, with `--userns=keep-id` for rootless podman; apptainer does so
  already), so files in the run folder stay the user's, whatever USER the image names;
- gives that user a writable home, `<ESBENCH_CACHE>/container-home` (apptainer: `--home`), with `XDG_CACHE_HOME`,
  `VLLM_CACHE_ROOT`, `TRITON_CACHE_DIR` and `TORCHINDUCTOR_CACHE_DIR` under it: a uid with no passwd entry in the
  image otherwise gets `HOME=/`, and vLLM's and Triton's first compile on a GPU fails with PermissionError. It lies
  in the mounted esbench cache, so the compile caches (keyed by version and configuration) persist across cells
  and runs, as `~/.cache` does on the host;
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
CACHE_ENV = ("HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "ESBENCH_CACHE")  # mounted at their own paths
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
        """The suite folder, and every cache folder `env()` names (HF_HOME, ESBENCH_CACHE, and HF_HUB_CACHE /
        HF_DATASETS_CACHE where set outside them; ESBENCH_DATASETS_DIR read-only), each at its own path: a cache the
        container is told about but not given would be refilled inside it and lost."""
        suite = str(Path(cell_dir).resolve().parent)
        out = [Mount(suite, suite)]
        env = self.env()
        for k in CACHE_ENV:
            d = env.get(k)
            if d and not any(_inside(d, m.target) for m in out[1:]):
                Path(d).mkdir(parents=True, exist_ok=True)
                out.append(Mount(d, d))
        if (datasets := env.get("ESBENCH_DATASETS_DIR")) and Path(datasets).is_dir():  # offline mirrors: read only
            out.append(Mount(datasets, datasets, True))
        Path(container_home(env["ESBENCH_CACHE"])).mkdir(parents=True, exist_ok=True)  # made by the caller: theirs
        return out + list(self.mounts)

    def env(self) -> dict[str, str]:
        """What the cell sees: `PASSED_ENV`, the cache folders (defaults as on the host), the writable home and its
        compile caches, and `FIXED_ENV`."""
        from esbench.models.tiny import cache_root

        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        env.setdefault("HF_HOME", str(Path(xdg) / "huggingface"))  # huggingface_hub's own default
        env.setdefault("ESBENCH_CACHE", str(cache_root()))
        home = container_home(env["ESBENCH_CACHE"])
        env.update(
            HOME=home,
            XDG_CACHE_HOME=f"{home}/.cache",
            VLLM_CACHE_ROOT=f"{home}/.cache/vllm",
            TRITON_CACHE_DIR=f"{home}/.triton/cache",
            TORCHINDUCTOR_CACHE_DIR=f"{home}/.cache/torchinductor",
            USER=_user(),  # getpass.getuser() falls back to the passwd entry the uid may not have
        )
        if self.kind == "apptainer":
            del env["HOME"]  # apptainer refuses to override HOME through --env; `--home` sets it
        return {**env, **FIXED_ENV}

    def command(
        self, cell_json: Path, cell_dir: Path, gpu: bool, digest: str, devices: list[str] | None = None
    ) -> list[str]:
        """The full command line that runs one cell in the image; with `gpu`, the GPUs `devices` (host ids, as
        CUDA_VISIBLE_DEVICES names them; none when empty), or all of them when None."""
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
        gpu = gpu and devices != []  # no devices given: a CPU cell on a GPU host
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
            cmd += ["--home", container_home(env["ESBENCH_CACHE"])]
            cmd += ["--nv"] if gpu else []
            if gpu and devices is not None:  # --nv binds every GPU; CUDA numbers them as the host does
                env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
            for m in mounts:
                cmd += ["--bind", f"{m.source}:{m.target}:{'ro' if m.readonly else 'rw'}"]
            for k, v in sorted(env.items()):
                cmd += ["--env", f"{k}={v}"]
            return [*cmd, self.image, *args]
        cmd = [self.binary, *self.global_args, "run", "--rm", "--ipc=host", f"--network={self.network}", *self.run_args]
        if gpu and self.kind == "docker":  # a list needs docker's inner quotes: "device=0,1"
            cmd += ["--gpus", "all" if devices is None else _docker_devices(devices)]
        elif gpu:
            for d in ["all"] if devices is None else devices:
                cmd += ["--device", f"nvidia.com/gpu={d}"]
        if self.kind == "podman" and os.geteuid() != 0:  # rootless: the caller's uid inside maps to the caller
            cmd += ["--userns=keep-id"]
        cmd += ["--user", f"{os.getuid()}:{os.getgid()}"]  # files written in the run folder stay the caller's
        for m in mounts:
            cmd += ["--volume", f"{m.source}:{m.target}:{'ro' if m.readonly else 'rw'}"]
        for k, v in sorted(env.items()):
            cmd += ["--env", f"{k}={v}"]
        return [*cmd, "--workdir", str(Path(cell_dir).resolve().parent), self.image, *args]


def container_home(esbench_cache: str) -> str:
    """The home of the container's user: in the mounted esbench cache, so it persists across cells and runs."""
    return str(Path(esbench_cache) / "container-home")


def _inside(path: str, folder: str) -> bool:
    return Path(path) == Path(folder) or Path(folder) in Path(path).parents


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid{os.getuid()}"


def _docker_devices(devices: list[str]) -> str:
    return f"device={devices[0]}" if len(devices) == 1 else f'"device={",".join(devices)}"'


def cell_uses_gpu(spec: dict) -> bool:
    """A cell needs the GPU passed in when its backend asks for CUDA, or for `auto` on a host that has one."""
    device = (spec.get("backend") or {}).get("device", "auto")
    if device == "cuda":
        return True
    if device == "cpu":
        return False
    from esbench.gpu import host_has_nvidia_gpu

    return host_has_nvidia_gpu()
