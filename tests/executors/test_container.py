"""Container runtimes. A tiny cell runs for real in a podman container (an image with this machine's Python
environment mounted read-only, built with buildah from scratch) and gives the host run's samples and weights, with
the image digest podman reports in its record. The docker and apptainer command lines for a GPU cell are checked
exactly; they run here only through fake binaries (no docker engine or apptainer on this machine)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from executor_helpers import assert_same_cell
from run_helpers import fake_docker, small_suite

from esbench.executors.container import ContainerRuntime, Mount

REPO = Path(__file__).resolve().parents[2]
PODMAN_ARGS = "--storage-driver vfs --runtime runc --cgroup-manager cgroupfs"  # crun and overlay fail here
PODMAN_RUN_ARGS = "--ulimit nofile=20000:20000 --ulimit nproc=4096:4096"  # the defaults exceed the hard limits
IMAGE = "localhost/esbench-hostenv:test"


def _host_env_mounts() -> list[str]:
    """This machine's Python, libraries and the repository (with its .venv), read-only inside the container."""
    dirs = ["/usr", "/lib", "/lib64", "/bin", "/etc", sys.base_prefix, str(REPO)]
    return [f"{d}:ro" for d in dict.fromkeys(dirs) if os.path.isdir(d)]


@pytest.fixture(scope="module")
def hostenv_image():
    """An empty image (buildah from scratch) whose entry point is this venv's `esbench`."""
    for tool in ("podman", "buildah", "runc"):
        assert shutil.which(tool), f"{tool} is not installed: `make test` installs it (scripts/system-deps.sh)"
    storage = ["--storage-driver", "vfs"]
    ctr = subprocess.run(["buildah", *storage, "from", "scratch"], capture_output=True, text=True, check=True)
    name = ctr.stdout.strip()
    entry = json.dumps([str(Path(sys.prefix) / "bin" / "esbench")])
    subprocess.run(["buildah", *storage, "config", "--entrypoint", entry, "--cmd", "[]", name], check=True)
    subprocess.run(["buildah", *storage, "commit", "-q", "--rm", name, IMAGE], check=True, capture_output=True)
    yield IMAGE
    subprocess.run(["podman", *storage, "rmi", "-f", IMAGE], capture_output=True)


def test_a_tiny_cell_in_a_podman_container_equals_the_host_run(hostenv_image, tmp_path, tiny_model_dir, monkeypatch):
    from esbench.cli import main

    monkeypatch.setenv("ESBENCH_PODMAN_ARGS", PODMAN_ARGS)
    monkeypatch.setenv("ESBENCH_PODMAN_RUN_ARGS", PODMAN_RUN_ARGS)
    monkeypatch.setenv("ESBENCH_CONTAINER_NETWORK", "none")
    monkeypatch.setenv("ESBENCH_CACHE", str(Path(tiny_model_dir).parent.parent))
    suite = tmp_path / "c.yaml"
    suite.write_text(small_suite("container", budget=1))
    mounts = [x for m in _host_env_mounts() for x in ("--mount", m)]
    only = ["--only", "*/es/*"]
    assert main(["run", str(suite), "--out", str(tmp_path / "host"), *only]) == 0
    assert (
        main(
            ["run", str(suite), "--out", str(tmp_path / "pod"), *only, "--runtime", "podman", "--image", IMAGE, *mounts]
        )
        == 0
    )

    (host,) = (tmp_path / "host" / "container").glob("*/record.json")
    (pod,) = (tmp_path / "pod" / "container").glob("*/record.json")
    assert_same_cell(host.parent, pod.parent, train=True)
    inspect = subprocess.run(
        ["podman", *PODMAN_ARGS.split(), "image", "inspect", "--format", "{{.Digest}}", IMAGE],
        capture_output=True,
        text=True,
        check=True,
    )
    prov = json.loads(pod.read_text())["provenance"]
    assert prov["container_image_digest"] == inspect.stdout.strip() and prov["container_image_digest"].startswith(
        "sha256:"
    )
    assert prov["container_image"] == IMAGE
    assert json.loads(host.read_text())["provenance"]["container_image_digest"] is None
    events = [json.loads(x) for x in (pod.parent / "events.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "done" and events[0]["host"] != os.uname().nodename  # written inside the container


def _cell_dir(tmp_path) -> tuple[Path, Path]:
    cell = tmp_path / "runs" / "paper" / "0123456789abcdef"
    cell.mkdir(parents=True)
    (cell / "cell.json").write_text("{}")
    return cell / "cell.json", cell


def _pin_env(tmp_path, monkeypatch, *unset: str) -> None:
    """The host settings the command line depends on, fixed for an exact comparison."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("ESBENCH_CACHE", str(tmp_path / "esb"))
    for k in ("LOGNAME", "USER"):
        monkeypatch.setenv(k, "tester")
    for k in ("HF_HUB_CACHE", "HF_DATASETS_CACHE", "ESBENCH_DATASETS_DIR", "ESBENCH_ES_WORKERS", *unset):
        monkeypatch.delenv(k, raising=False)


def _home_env(tmp_path) -> list[str]:
    """The writable home and compile caches every runtime hands the cell (HOME itself: apptainer's `--home`)."""
    home = f"{tmp_path}/esb/container-home"
    return [
        "--env", f"TORCHINDUCTOR_CACHE_DIR={home}/.cache/torchinductor",
        "--env", "TQDM_DISABLE=1",
        "--env", f"TRITON_CACHE_DIR={home}/.triton/cache",
        "--env", "USER=tester",
        "--env", f"VLLM_CACHE_ROOT={home}/.cache/vllm",
        "--env", f"XDG_CACHE_HOME={home}/.cache",
    ]  # fmt: skip


def test_docker_command_line_for_a_gpu_cell(tmp_path, monkeypatch):
    _pin_env(tmp_path, monkeypatch, "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "ESBENCH_DOCKER_ARGS")
    image = "ghcr.io/esbench/esbench@sha256:" + "a" * 64
    rt = ContainerRuntime.from_options("docker", image, [f"{tmp_path}/models:/models:ro"])
    cell_json, cell = _cell_dir(tmp_path)
    runs = str(cell.parent)
    assert rt.command(cell_json, cell, gpu=True, digest="sha256:" + "a" * 64) == [
        "docker", "run", "--rm", "--ipc=host", "--network=host",
        "--gpus", "all",
        "--user", f"{os.getuid()}:{os.getgid()}",
        "--volume", f"{runs}:{runs}:rw",
        "--volume", f"{tmp_path}/hf:{tmp_path}/hf:rw",
        "--volume", f"{tmp_path}/esb:{tmp_path}/esb:rw",
        "--volume", f"{tmp_path}/models:/models:ro",
        "--env", f"ESBENCH_CACHE={tmp_path}/esb",
        "--env", f"HF_HOME={tmp_path}/hf",
        "--env", f"HOME={tmp_path}/esb/container-home",
        "--env", "OMP_NUM_THREADS=1",
        "--env", "PYTHONUNBUFFERED=1",
        *_home_env(tmp_path),
        "--workdir", runs,
        image,
        "run-cell", str(cell_json), "--out", str(cell),
        "--container-image", image, "--container-digest", "sha256:" + "a" * 64,
    ]  # fmt: skip


def test_apptainer_command_line_for_a_gpu_cell_and_its_digest(tmp_path, monkeypatch):
    _pin_env(tmp_path, monkeypatch, "HF_DATASETS_OFFLINE", "ESBENCH_APPTAINER_ARGS")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sif = tmp_path / "esbench.sif"
    sif.write_bytes(b"SIF image bytes")
    rt = ContainerRuntime.from_options("apptainer", str(sif))
    import hashlib

    digest = rt.digest()
    assert digest == "sha256:" + hashlib.sha256(b"SIF image bytes").hexdigest()
    cell_json, cell = _cell_dir(tmp_path)
    runs = str(cell.parent)
    assert rt.command(cell_json, cell, gpu=True, digest=digest) == [
        "apptainer", "run", "--cleanenv", "--containall", "--writable-tmpfs",
        "--home", f"{tmp_path}/esb/container-home",
        "--nv",
        "--bind", f"{runs}:{runs}:rw",
        "--bind", f"{tmp_path}/hf:{tmp_path}/hf:rw",
        "--bind", f"{tmp_path}/esb:{tmp_path}/esb:rw",
        "--env", f"ESBENCH_CACHE={tmp_path}/esb",
        "--env", f"HF_HOME={tmp_path}/hf",
        "--env", "HF_HUB_OFFLINE=1",
        "--env", "OMP_NUM_THREADS=1",
        "--env", "PYTHONUNBUFFERED=1",
        *_home_env(tmp_path),
        str(sif),
        "run-cell", str(cell_json), "--out", str(cell),
        "--container-image", str(sif), "--container-digest", digest,
    ]  # fmt: skip


def test_a_cell_runs_through_a_docker_binary_and_records_what_it_reports(tmp_path, tiny_model_dir, monkeypatch):
    from esbench.cli import main

    image = "ghcr.io/esbench/esbench:cpu"
    log = fake_docker(tmp_path, monkeypatch, image, "b")
    suite = tmp_path / "d.yaml"
    suite.write_text(small_suite("docker"))
    assert (
        main(
            [
                "run",
                str(suite),
                "--out",
                str(tmp_path / "runs"),
                "--only",
                "*/base/*",
                "--runtime",
                "docker",
                "--image",
                image,
            ]
        )
        == 0
    )
    (record,) = (tmp_path / "runs" / "docker").glob("*/record.json")
    prov = json.loads(record.read_text())["provenance"]
    assert prov["container_image_digest"] == "sha256:" + "b" * 64  # the registry digest the runtime reported
    calls = log.read_text().splitlines()
    assert calls[0].startswith("image inspect") and calls[1].startswith("run --rm --ipc=host --network=host")
    assert "--gpus" not in calls[1]  # a CPU cell gets no GPU


def test_a_mount_must_name_a_source():
    assert Mount.parse("/data:ro") == Mount("/data", "/data", True)
    assert Mount.parse("/a:/b") == Mount("/a", "/b", False)
    with pytest.raises(ValueError, match="SRC"):
        Mount.parse(":ro")


def test_each_runtime_passes_only_the_gpus_the_cell_was_given(tmp_path, monkeypatch):
    """`--jobs N` gives each GPU cell its own device; the runtime must pass that one, not all of them (where every
    vLLM engine would start on GPU 0 and the third fail its free-memory check)."""
    _pin_env(tmp_path, monkeypatch, "ESBENCH_DOCKER_ARGS", "ESBENCH_PODMAN_ARGS", "ESBENCH_APPTAINER_ARGS")
    cell_json, cell = _cell_dir(tmp_path)
    digest = "sha256:" + "a" * 64
    sif = tmp_path / "e.sif"
    sif.write_bytes(b"x")

    def cmd(kind: str, image: str, devices: list[str]) -> list[str]:
        return ContainerRuntime.from_options(kind, image).command(cell_json, cell, True, digest, devices)

    docker = cmd("docker", "img", ["1"])
    assert docker[docker.index("--gpus") + 1] == "device=1" and "all" not in docker
    two = cmd("docker", "img", ["0", "2"])
    assert two[two.index("--gpus") + 1] == '"device=0,2"'  # docker's quoting for a list of devices
    podman = cmd("podman", "img", ["1"])
    assert [podman[i + 1] for i, a in enumerate(podman) if a == "--device"] == ["nvidia.com/gpu=1"]
    apptainer = cmd("apptainer", str(sif), ["1"])
    assert "--nv" in apptainer and "CUDA_VISIBLE_DEVICES=1" in apptainer  # --nv binds all; CUDA sees GPU 1 only
    assert "--gpus" not in cmd("docker", "img", [])  # an empty list: no GPU (a CPU cell on a GPU host)


def test_cache_variables_set_on_the_host_are_mounted(tmp_path, monkeypatch):
    """A hub cache outside HF_HOME is passed in and mounted; one inside it rides on HF_HOME's mount."""
    _pin_env(tmp_path, monkeypatch, "ESBENCH_DOCKER_ARGS")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "scratch" / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    (tmp_path / "mirror").mkdir()
    monkeypatch.setenv("ESBENCH_DATASETS_DIR", str(tmp_path / "mirror"))
    cell_json, cell = _cell_dir(tmp_path)
    line = ContainerRuntime.from_options("docker", "img").command(cell_json, cell, False, "sha256:" + "a" * 64)
    volumes = [line[i + 1] for i, a in enumerate(line) if a == "--volume"]
    assert volumes[1:] == [
        f"{tmp_path}/hf:{tmp_path}/hf:rw",
        f"{tmp_path}/scratch/hub:{tmp_path}/scratch/hub:rw",
        f"{tmp_path}/esb:{tmp_path}/esb:rw",
        f"{tmp_path}/mirror:{tmp_path}/mirror:ro",
    ]
    assert f"HF_HUB_CACHE={tmp_path}/scratch/hub" in line and (tmp_path / "esb" / "container-home").is_dir()


FAKE_GPU_DOCKER = """#!/bin/sh
# A stand-in for docker on a 2-GPU host: logs its argv; `run` waits until two runs have started (so both hold a GPU
# at once), then exits 0 without running anything.
echo "$@" >> "{log}"
if [ "$1" = "image" ]; then echo '["img@sha256:{digest}"] sha256:{digest}'; exit 0; fi
touch "{barrier}/$$"
i=0
while [ "$(ls "{barrier}" | wc -l)" -lt 2 ] && [ "$i" -lt 400 ]; do sleep 0.05; i=$((i+1)); done
"""


def test_concurrent_gpu_cells_in_containers_get_distinct_devices(tmp_path, monkeypatch):
    """`--runtime docker --jobs 2` on 2 GPUs: each container is given one device, and not the same one."""
    import io

    from rich.console import Console
    from run_helpers import suite_cells

    from esbench.executors import drive, local
    from esbench.records import cell_dir
    from esbench.spec import Cell

    _pin_env(tmp_path, monkeypatch, "ESBENCH_DOCKER_ARGS", "CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(local, "gpu_count", lambda: 2)
    fake, log, barrier = tmp_path / "bin" / "docker", tmp_path / "docker.log", tmp_path / "started"
    fake.parent.mkdir()
    barrier.mkdir()
    fake.write_text(FAKE_GPU_DOCKER.format(log=log, digest="e" * 64, barrier=barrier))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    suite, cells = suite_cells(tmp_path)
    base = next(c for c in cells if c.spec["method"]["kind"] == "base")
    two = [Cell({**base.spec, "seed": s}, base.labels) for s in range(2)]
    executor = local.LocalExecutor(jobs=2, runtime=ContainerRuntime.from_options("docker", "img"))
    console = Console(file=io.StringIO(), width=120)
    assert drive(executor, two, lambda c: cell_dir(tmp_path / "o", suite, c.id), console) == []
    runs = [line.split() for line in log.read_text().splitlines() if line.startswith("run ")]
    assert sorted(r[r.index("--gpus") + 1] for r in runs) == ["device=0", "device=1"]


def test_a_uid_without_a_passwd_entry_gets_a_writable_home_in_podman(hostenv_image, tmp_path, monkeypatch):
    """The runtime's own command line, run as a uid that neither the host's nor the image's /etc/passwd knows:
    podman then sets HOME=/, and vLLM's ~/.cache/vllm and Triton's cache would fail with PermissionError on a GPU.
    With the home esbench gives it, $HOME/.cache, VLLM_CACHE_ROOT and TRITON_CACHE_DIR are writable (and persist
    in the esbench cache)."""
    import pwd

    from esbench.executors import container

    uid = 54321
    with pytest.raises(KeyError):
        pwd.getpwuid(uid)
    monkeypatch.setenv("ESBENCH_PODMAN_ARGS", PODMAN_ARGS)
    monkeypatch.setenv("ESBENCH_PODMAN_RUN_ARGS", PODMAN_RUN_ARGS)
    monkeypatch.setenv("ESBENCH_CONTAINER_NETWORK", "none")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("ESBENCH_CACHE", str(tmp_path / "esb"))
    monkeypatch.setattr(container.os, "getuid", lambda: uid)
    monkeypatch.setattr(container.os, "getgid", lambda: uid)
    cell_json, cell = _cell_dir(tmp_path)
    mounts = [Mount.parse(m) for m in _host_env_mounts()]
    rt = ContainerRuntime.from_options("podman", hostenv_image, [f"{m.source}:ro" for m in mounts])
    line = rt.command(cell_json, cell, False, "sha256:" + "0" * 64)
    monkeypatch.undo()  # the host side as before; the caller "is" uid 54321, so its folders are that uid's
    for d in (tmp_path / "esb", tmp_path / "hf", cell.parent):
        for p in (d, *d.rglob("*")):
            os.chown(p, uid, uid)
    probe = (
        "import getpass, os, pathlib\n"
        "for v in ('HOME', 'VLLM_CACHE_ROOT', 'TRITON_CACHE_DIR', 'TORCHINDUCTOR_CACHE_DIR'):\n"
        "    d = pathlib.Path(os.environ[v]) / ('.cache/probe' if v == 'HOME' else 'probe')\n"
        "    d.mkdir(parents=True, exist_ok=True)\n"
        "    (d / 'ok').write_text(v)\n"
        "print(os.getuid(), os.environ['HOME'], getpass.getuser())\n"
    )
    at = line.index(hostenv_image)
    cmd = [*line[:at], "--entrypoint", sys.executable, hostenv_image, "-c", probe]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    home = tmp_path / "esb" / "container-home"
    assert out.stdout.split()[:2] == [str(uid), str(home)]  # and getpass.getuser() worked
    assert (home / ".cache" / "probe" / "ok").read_text() == "HOME"
    assert (home / ".cache" / "vllm" / "probe" / "ok").read_text() == "VLLM_CACHE_ROOT"
    assert (home / ".triton" / "cache" / "probe" / "ok").read_text() == "TRITON_CACHE_DIR"
    assert (home / ".cache" / "vllm" / "probe" / "ok").stat().st_uid == uid
