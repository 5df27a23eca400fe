"""Helpers shared by the leaderboard tests (imported by module name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def esbench(*args: str, env: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "esbench.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def rehash(sub: Path) -> None:
    """What a careful tamperer does after editing: recompute the manifest so every file hash matches."""
    from esbench.leaderboard.verify import MANIFEST, manifest_for

    (sub / MANIFEST).write_text(json.dumps(manifest_for(sub), indent=2))


def edit_json(path: Path, fn) -> None:
    obj = json.loads(path.read_text())
    fn(obj)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True))


def cells(sub: Path) -> dict[str, Path]:
    """Cell folders by cell name (model/dataset/method/bBUDGET/sSEED)."""
    out = {}
    for d in sorted((sub / "cells").iterdir()):
        out[json.loads((d / "cell.json").read_text())["name"]] = d
    return out
