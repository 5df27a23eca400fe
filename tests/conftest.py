"""Shared fixtures. Tests run offline, on one thread (shared 2-core machines), with HF caches in a temp dir."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from run_helpers import reference_run, shared_once

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _one_thread(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf_home"))


# Process-wide variables that libraries set for themselves and never unset: TRL's colocated vLLM and accelerate's
# MULTI_CPU set RANK/LOCAL_RANK/WORLD_SIZE (a later GRPO then takes the distributed path and wants MASTER_ADDR),
# and vLLM's CPU platform puts its tcmalloc and libgomp in LD_PRELOAD (inherited by every subprocess a later test
# starts, e.g. the scoring-memory measurement). After each test they are put back as they were when the session
# started (module-scoped fixtures set them before any per-test snapshot), so results do not depend on which tests
# ran before in the same process (pytest-xdist deals files to workers in varying orders).
_LEAKY_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LD_PRELOAD")
_SESSION_ENV = {k: os.environ.get(k) for k in _LEAKY_ENV}


@pytest.fixture(autouse=True)
def _restore_process_env():
    yield
    for k, v in _SESSION_ENV.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def tiny_model_dir():
    """The real `builtin:tiny` from the user cache (built once per machine, about two minutes)."""
    from esbench.models import tiny

    return tiny.ensure_built()


TINY_SUITE = """\
# esbench run {path}
name: {name}
models:
  tiny: {{path: builtin:tiny}}
methods:
  base: {{}}
seeds: [0]
eval:
  tasks: [tiny_arith, tiny_reverse]
  held_out: [tiny_reverse]
  limit: 6
  n: 4
  k: [1, 4]
  temperature: 1.0
  max_new_tokens: 40
"""


@pytest.fixture
def small_suite(tmp_path, tiny_model_dir) -> Path:
    """A base-only suite on the real tiny model with a few problems: the pipeline in seconds."""
    path = tmp_path / "small.yaml"
    path.write_text(TINY_SUITE.format(path=path, name="small"))
    return path


@pytest.fixture(scope="session")
def small_reference(tmp_path_factory, tiny_model_dir) -> Path:
    """The small suite's two cells (`run_helpers.suite_cells()`: base and ES, 2 updates) run once per session, in
    process by the local executor with jobs=1; the executor and seam tests compare their own runs of these cells to
    it, cell_dir(small_reference, suite, id). Read-only (shared by every test and xdist worker)."""
    return shared_once(tmp_path_factory, "small-b2", reference_run) / "runs"


@pytest.fixture(scope="session")
def checkpointed_es_reference(tmp_path_factory, tiny_model_dir) -> Path:
    """The small suite's ES cell with 4 updates and a checkpoint after each (`suite_cells(budget=4,
    es_extra=", checkpoint_every: 1")`), run once like `small_reference`: the uninterrupted record that the
    kill/preempt-and-resume tests must reproduce. Read-only."""

    def make(folder: Path) -> None:
        reference_run(folder, budget=4, es_extra=", checkpoint_every: 1", methods=("es",))

    return shared_once(tmp_path_factory, "small-es-b4-ckpt1", make) / "runs"


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def ray_env(monkeypatch):
    """A private local Ray instance without token auth (else ray 2.60 writes ~/.ray/auth_token); records the temp
    folders the executor makes so the test can check they are gone."""
    import esbench.ray_session as ray_session

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("ESBENCH_RAY_ADDRESS", raising=False)
    made: list[str] = []
    real = ray_session.fresh_temp_dir

    def fresh() -> str:
        made.append(real())
        return made[-1]

    monkeypatch.setattr(ray_session, "fresh_temp_dir", fresh)
    yield made
    _assert_ray_gone(made)


def _assert_ray_gone(temp_dirs: list[str]) -> None:
    import ray

    assert not ray.is_initialized()
    for d in temp_dirs:
        assert not Path(d).exists(), f"Ray temp dir {d} left behind"
    deadline = time.monotonic() + 20
    while True:  # raylet, GCS and workers of our instance name its temp dir on their command lines
        alive = [pid for pid in _pids() if any(d in _cmdline(pid) for d in temp_dirs)]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not alive, f"Ray processes outlived ray.shutdown(): {[_cmdline(p) for p in alive]}"


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
