"""Result records: `runs/<suite>/<cell-id>/record.json`, written last and atomically.

A cell is *done* exactly when record.json exists; *partial* when its folder holds anything else (a spec,
train.jsonl, checkpoints); *pending* otherwise. Every file esbench writes goes through `atomic_write_text`
(temp file in the same folder, fsync, rename, fsync of the folder), so a kill never leaves a half-written file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

RECORD_SCHEMA = "esbench.record/1"


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def cell_dir(out_root: Path, suite: str, cell_id: str) -> Path:
    return Path(out_root) / suite / cell_id


def status(directory: Path) -> str:
    if (directory / "record.json").exists():
        return "done"
    if directory.exists() and any(p.name != ".lock" for p in directory.iterdir()):
        return "partial"
    return "pending"


def read_record(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "record.json").read_text())


def sha256_file(path: Path) -> str:
    """SHA-256 of a file, streamed (weights, samples and manifests can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
