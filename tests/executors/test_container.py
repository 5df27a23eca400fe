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
from run_helpers import small_suite

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


def test_docker_command_line_for_a_gpu_cell(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("ESBENCH_CACHE", str(tmp_path / "esb"))
    for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "ESBENCH_DATASETS_DIR", "ESBENCH_ES_WORKERS"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.delenv("ESBENCH_DOCKER_ARGS", raising=False)
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
        "--env", "OMP_NUM_THREADS=1",
        "--env", "PYTHONUNBUFFERED=1",
        "--env", "TQDM_DISABLE=1",
        "--workdir", runs,
        image,
        "run-cell", str(cell_json), "--out", str(cell),
        "--container-image", image, "--container-digest", "sha256:" + "a" * 64,
    ]  # fmt: skip


def test_apptainer_command_line_for_a_gpu_cell_and_its_digest(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("ESBENCH_CACHE", str(tmp_path / "esb"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for k in ("HF_DATASETS_OFFLINE", "ESBENCH_DATASETS_DIR", "ESBENCH_ES_WORKERS", "ESBENCH_APPTAINER_ARGS"):
        monkeypatch.delenv(k, raising=False)
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
        "--nv",
        "--bind", f"{runs}:{runs}:rw",
        "--bind", f"{tmp_path}/hf:{tmp_path}/hf:rw",
        "--bind", f"{tmp_path}/esb:{tmp_path}/esb:rw",
        "--env", f"ESBENCH_CACHE={tmp_path}/esb",
        "--env", f"HF_HOME={tmp_path}/hf",
        "--env", "HF_HUB_OFFLINE=1",
        "--env", "OMP_NUM_THREADS=1",
        "--env", "PYTHONUNBUFFERED=1",
        "--env", "TQDM_DISABLE=1",
        str(sif),
        "run-cell", str(cell_json), "--out", str(cell),
        "--container-image", str(sif), "--container-digest", digest,
    ]  # fmt: skip


FAKE_DOCKER = """#!/bin/sh
# A stand-in for docker: logs its argv; `image inspect` reports a digest; `run` runs the arguments after the image
# with this machine's esbench (what the image's entry point would do).
echo "$@" >> "{log}"
if [ "$1" = "image" ]; then echo '["ghcr.io/esbench/esbench@sha256:{digest}"] sha256:{image_id}'; exit 0; fi
while [ "$#" -gt 0 ] && [ "$1" != "{image}" ]; do shift; done
shift
exec "{python}" -m esbench.cli "$@"
"""


def _fake_docker(tmp_path, monkeypatch, image: str, digit: str) -> Path:
    """`docker` on PATH reporting the registry digest sha256:<digit x 64>; returns the file its calls are logged to."""
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    log = tmp_path / "docker.log"
    fake.write_text(
        FAKE_DOCKER.format(log=log, digest=digit * 64, image_id="c" * 64, image=image, python=sys.executable)
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    return log


def test_a_cell_runs_through_a_docker_binary_and_records_what_it_reports(tmp_path, tiny_model_dir, monkeypatch):
    from esbench.cli import main

    image = "ghcr.io/esbench/esbench:cpu"
    log = _fake_docker(tmp_path, monkeypatch, image, "b")
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


def test_leaderboard_reproduce_reruns_a_submitted_cell_in_the_image(tmp_path, tiny_model_dir, monkeypatch):
    """`esbench leaderboard reproduce --runtime docker`: the committed submission's base cell, re-run through the
    (fake) docker binary, is bit-identical to the submitted one."""
    from esbench.cli import main

    image = "ghcr.io/esbench/esbench:cpu"
    log = _fake_docker(tmp_path, monkeypatch, image, "d")
    submission = REPO / "leaderboard" / "submissions" / "tiny-random-search"
    args = ["leaderboard", "reproduce", str(submission), "--only", "*/base/*", "--exact", "--out", str(tmp_path / "o")]
    assert main([*args, "--runtime", "docker", "--image", image, "--root", str(REPO / "leaderboard")]) == 0
    assert any(line.startswith("run --rm") for line in log.read_text().splitlines())
    (record,) = (tmp_path / "o").glob("*/record.json")
    assert json.loads(record.read_text())["provenance"]["container_image_digest"] == "sha256:" + "d" * 64
