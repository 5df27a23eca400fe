"""Helpers shared by test modules (imported as `from run_helpers import ...`; a `conftest` import would be ambiguous
once a sub-folder has its own conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


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
