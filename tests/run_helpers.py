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
