"""Run cells on this machine, with rich progress for cells and for each cell's stages.

Each cell goes through the same entry point as `esbench run-cell CELL.json --out DIR`: its frozen spec is written to
`cell.json` and run from there, so a local run, a container and a cluster job execute identical inputs.

`jobs=1` runs the cells one after another in this process. `jobs=N` runs N `esbench run-cell` processes at a time;
each cell's backend uses the CPU threads its spec names (`backend.cpu_threads`), so the records are the same either
way. It pays where cores are many: on this project's 2-vCPU machines a 5-cell, 40-update tiny grid took 7:09 with
2 jobs against 8:58 in one process (measured before `cpu_threads` existed, with 1 thread per job against 2).
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from esbench.executors import Failure, Handle, write_cell
from esbench.spec import Cell


class CellFailed(RuntimeError):
    def __init__(self, message: str, detail: str):
        super().__init__(message)
        self.detail = detail


class LocalExecutor:
    """`jobs=1`: each `wait` runs the next cell in this process (the main thread: vLLM and signals need it).
    `jobs=N`: N `esbench run-cell` child processes at a time, from a thread pool. With a container `runtime`, each
    cell is `esbench run-cell` in the image (`executors.container`), `jobs` at a time."""

    message = None

    def __init__(self, jobs: int = 1, runtime=None):
        self.jobs, self.runtime = jobs, runtime
        self.pool = ThreadPoolExecutor(max_workers=jobs) if jobs > 1 or runtime is not None else None
        self.digest = runtime.digest() if runtime is not None else None
        if runtime is not None:
            self.message = f"cells run in {runtime.kind} image {runtime.image} ({self.digest})"

    def submit(self, cells: list[Cell], dir_of: Callable[[Cell], Path]) -> list[Handle]:
        handles = [Handle(cell, write_cell(cell, dir_of)) for cell in cells]
        if self.pool is not None:
            for h in handles:
                h.ref = self.pool.submit(run_command, cell_command(h, self.runtime, self.digest))
        return handles

    def wait(self, handles: list[Handle], timeout: float, refresh) -> list[tuple[Handle, Failure | None]]:
        if self.pool is None:
            h = handles[0]
            return [(h, _in_process(h, refresh))]
        done, _ = concurrent.futures.wait([h.ref for h in handles], timeout, concurrent.futures.FIRST_COMPLETED)
        out = []
        for h in handles:
            if h.ref in done:
                e = h.ref.exception()
                if e is None:
                    out.append((h, None))
                else:
                    detail = e.detail if isinstance(e, CellFailed) else "".join(traceback.format_exception(e))
                    out.append((h, Failure(f"{type(e).__name__}: {e}", detail)))
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _in_process(h: Handle, refresh) -> Failure | None:
    from esbench.runner import run_cell_file

    try:
        run_cell_file(h.cd.cell_json, h.cd.path, lambda _stage: refresh(h))
    except Exception as e:  # one failed cell must not stop the others
        return Failure(f"{type(e).__name__}: {e}", traceback.format_exc())
    return None


def cell_command(h: Handle, runtime=None, digest: str | None = None) -> list[str]:
    """`esbench run-cell` of one written cell: in a child Python, or in the container `runtime` (its `digest` read
    once by the caller)."""
    if runtime is None:
        return [sys.executable, "-m", "esbench.cli", "run-cell", str(h.cd.cell_json), "--out", str(h.cd.path)]
    from esbench.executors.container import cell_uses_gpu

    return runtime.command(h.cd.cell_json, h.cd.path, cell_uses_gpu(h.cell.spec), digest)


def run_command(cmd: list[str]) -> None:
    """`esbench run-cell` in a child process (or a container); its progress reaches the driver through the cell's
    events.jsonl. (The cell's backend sets its own CPU threads, `backend.cpu_threads`, so records do not depend on
    how many cells ran at once.)"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # libraries other than torch: no oversubscription
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if proc.returncode != 0:
        err = proc.stderr.splitlines()
        last = next((x.strip() for x in reversed(err) if x.strip()), f"exit status {proc.returncode}")
        raise CellFailed(f"esbench run-cell exited {proc.returncode}: {last}", proc.stderr)
