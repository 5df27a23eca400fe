"""Shared by the executor tests: a cell on another model, comparing two runs' cell folders, and signalling a cell's
runner once its first ES checkpoint exists. (The small suite's cells and running them through an executor are in
run_helpers, which the session's shared reference runs in tests/conftest.py use too.)"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def on_model(cell, path):
    """The cell with its model swapped for the folder at `path` (no tiny recipe stamp: that is for `builtin:`)."""
    from esbench.spec import Cell

    model = {k: v for k, v in cell.spec["model"].items() if k != "recipe"}
    return Cell({**cell.spec, "model": {**model, "path": str(path)}}, cell.labels)


def assert_same_cell(a: Path, b: Path, train: bool = False) -> None:
    """Same final weights, same per-sample evidence files byte for byte (and the same training log)."""
    ra, rb = (json.loads((d / "record.json").read_text()) for d in (a, b))
    assert ra["provenance"]["final_weights_sha256"] == rb["provenance"]["final_weights_sha256"]
    names = sorted(p.name for p in (a / "samples").glob("*.jsonl"))
    assert names and names == sorted(p.name for p in (b / "samples").glob("*.jsonl"))
    for name in names:
        assert (a / "samples" / name).read_bytes() == (b / "samples" / name).read_bytes(), name
    assert ra["samples_sha256"] == rb["samples_sha256"]
    if train:
        assert (a / "train.jsonl").read_bytes() == (b / "train.jsonl").read_bytes()


def signal_after_first_checkpoint(cd, sig: int, into: dict, timeout: float = 240) -> None:
    """Wait for the ES checkpoint under work/, then signal the process that holds the cell's lease."""
    state = cd.work / "es" / "state.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            step = json.loads(state.read_text())["step"]
            pid = json.loads(cd.lease.read_text())["pid"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)
            continue
        into.update(step=step, pid=pid, record_existed=cd.record.exists())
        os.kill(pid, sig)
        return
