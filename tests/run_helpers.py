"""Helpers shared by test modules (imported as `from run_helpers import ...`; a `conftest` import would be ambiguous
once a sub-folder has its own conftest.py)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def start_run(suite: Path, out: Path, *extra: str) -> subprocess.Popen:
    """`esbench run` in a child process (one thread), so a test can kill it with SIGKILL."""
    return subprocess.Popen(
        [sys.executable, "-m", "esbench.cli", "run", str(suite), "--out", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def only_record(out: Path) -> tuple[dict, Path]:
    """The single record under `out` and its cell folder."""
    (path,) = out.glob("*/*/record.json")
    return json.loads(path.read_text()), path.parent


# A small suite on the tiny model: base and a 4-member ES for `budget` updates, 6 problems of two tasks, 4 samples.
# Cells run in seconds; tests of the seam and of the executors compare such runs file by file.
SMALL_SUITE = """\
name: {name}
models: {{tiny: {{path: "builtin:tiny"}}}}
datasets: {{arith: {{task: tiny_arith, size: 16}}}}
methods:
  base: {{}}
  es: {{method: es, population: 4, sigma: 0.01, alpha: 0.005, batch_size: 8, max_new_tokens: 30{es_extra}}}
budgets: [{budget}]
seeds: [0]
eval:
  tasks: [tiny_arith, tiny_reverse]
  held_out: [tiny_reverse]
  limit: 6
  n: 4
  k: [1, 4]
  temperature: 1.0
  max_new_tokens: 30
{eval_extra}"""


def small_suite(name: str, budget: int = 2, es_extra: str = "", eval_extra: str = "") -> str:
    return SMALL_SUITE.format(name=name, budget=budget, es_extra=es_extra, eval_extra=eval_extra)


def suite_cells(tmp_path: Path, budget: int = 2, es_extra: str = ""):
    """The small suite as suite `executors` (written to tmp_path/suite.yaml): its name and its cells."""
    from esbench.spec import load_suite

    path = tmp_path / "suite.yaml"
    path.write_text(small_suite("executors", budget=budget, es_extra=es_extra))
    suite = load_suite(path)
    return suite.name, suite.cells()


def run_with(executor: str, cells, out: Path, suite: str, **kw):
    """`cells` through the named executor, jobs=1 (`kw`: its other options): (failed cells, what it printed)."""
    from rich.console import Console

    from esbench.executors import get_executor
    from esbench.records import cell_dir

    shown = io.StringIO()
    failed = get_executor(executor)(
        cells, lambda c: cell_dir(out, suite, c.id), Console(file=shown, width=120), jobs=1, **kw
    )
    return failed, shown.getvalue()


def shared_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `make(folder)` fills, made once per test session and shared by all pytest-xdist workers (the
    pytest-xdist docs' pattern: the first worker to get here makes it under a lock in the folder above the workers'
    own temp folders, the others wait and reuse it). Without xdist it goes under this session's temp folder (the
    one above is shared by earlier sessions). A failed `make` leaves no folder behind, so the next caller retries
    and fails the same way. Callers treat the folder as read-only (copy it to change it)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    shared = base / "shared"
    shared.mkdir(exist_ok=True)
    folder, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if the holder dies
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                make(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder


EXECUTION_ENV = ("ESBENCH_ES_WORKERS", "ESBENCH_GRPO_GPUS", "ESBENCH_RAY_ADDRESS")
"""What `esbench run --es-workers/--grpo-gpus/--ray-address` set: how cells run, never what they give."""


def reference_run(folder: Path, budget: int = 2, es_extra: str = "", methods: tuple[str, ...] = ("base", "es")):
    """The small suite's cells of `methods` run as the executor tests ran their reference: in this process by the
    local executor, jobs=1, into folder/runs (suite `executors`); without the execution options an earlier test in
    this process may have left set (a session fixture is built after whatever ran before it)."""
    suite, cells = suite_cells(folder, budget, es_extra)
    with pytest.MonkeyPatch.context() as mp:
        for name in EXECUTION_ENV:
            mp.delenv(name, raising=False)
        failed, _ = run_with("local", [c for c in cells if c.labels["method"] in methods], folder / "runs", suite)
    assert failed == []


FAKE_DOCKER = """#!/bin/sh
# A stand-in for docker: logs its argv; `image inspect` reports a digest; `run` runs the arguments after the image
# with this machine's esbench (what the image's entry point would do).
echo "$@" >> "{log}"
if [ "$1" = "image" ]; then echo '["ghcr.io/esbench/esbench@sha256:{digest}"] sha256:{image_id}'; exit 0; fi
while [ "$#" -gt 0 ] && [ "$1" != "{image}" ]; do shift; done
shift
exec "{python}" -m esbench.cli "$@"
"""


def fake_docker(tmp_path, monkeypatch, image: str, digit: str) -> Path:
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


def minimal_release(root: Path, release_id: str, **kw) -> Path:
    """A release of one one-cell base suite under `root/lb` (its reference folder empty); returns the release folder."""
    from esbench.leaderboard.release import write_release

    suite = root / "s.yaml"
    suite.write_text(
        "name: s\nmodels: {tiny: {path: 'builtin:tiny'}}\nmethods: {base: {}}\nseeds: [0]\n"
        "eval: {tasks: [tiny_arith], limit: 2, n: 1, k: [1]}\n"
    )
    (root / "ref").mkdir(exist_ok=True)
    return write_release(root / "lb", release_id, [suite], root / "ref", "2026-01-01", **kw)
