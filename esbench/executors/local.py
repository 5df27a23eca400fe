"""Run cells on this machine, with rich progress for cells and for each cell's stages.

Each cell goes through the same entry point as `esbench run-cell CELL.json --out DIR`: its frozen spec is written to
`cell.json` and run from there, so a local run, a container and a cluster job execute identical inputs.

`jobs=1` runs the cells one after another in this process. `jobs=N` runs N `esbench run-cell` processes at a time;
each cell's backend uses the CPU threads its spec names (`backend.cpu_threads`), so the records are the same either
way. It pays where cores are many: on this project's 2-vCPU machines a 5-cell, 40-update tiny grid took 7:09 with
2 jobs against 8:58 in one process (measured before `cpu_threads` existed, with 1 thread per job against 2).

GPUs: with `jobs=N` (and with a container runtime) each cell that runs on the GPU (`backend.device` other than
`cpu`, on a host with GPUs) takes its own devices from a pool of the visible GPUs (`CUDA_VISIBLE_DEVICES`'s entries,
else 0..count−1): one, or W + 1 with `--es-workers` W for a cell with an ES stage (`executors.gpus_needed`). A child
process gets them as `CUDA_VISIBLE_DEVICES`; a container gets only those devices (`executors.container`). With more GPU
cells than free GPUs, a cell waits for one to be released (it keeps its job slot) rather than share: vLLM claims
`gpu_memory_utilization` of a device's whole memory per engine, so a second engine on the same GPU fails its
free-memory check, and HF cells on one GPU would slow each other down anyway. So at most `len(pool)` GPU cells
run at once, whatever N is; CPU cells use the remaining slots. `jobs=1` in process leaves the devices alone.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import shutil
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from esbench.executors import Failure, Handle, gpus_needed, write_cell
from esbench.spec import Cell

log = logging.getLogger(__name__)


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
        self.gpus = GpuPool(visible_gpus()) if self.pool is not None else GpuPool([])
        self.digest = runtime.digest() if runtime is not None else None
        if runtime is not None:
            self.message = f"cells run in {runtime.kind} image {runtime.image} ({self.digest})"

    def submit(self, cells: list[Cell], dir_of: Callable[[Cell], Path]) -> list[Handle]:
        handles = [Handle(cell, write_cell(cell, dir_of)) for cell in cells]
        if self.pool is not None:
            gpu_cells = sum(self._wanted(h.cell) > 0 for h in handles)
            if self.jobs > 1 and gpu_cells > len(self.gpus.devices) > 0:
                n = len(self.gpus.devices)
                log.info("%d GPU cells on %d GPUs: at most %d run at once, each on its own", gpu_cells, n, n)
            for h in handles:
                h.ref = self.pool.submit(self._run, h)
        return handles

    def _wanted(self, cell: Cell) -> int:
        """GPUs to give the cell: none for a CPU cell or a host without them, else its need, at most all of them."""
        if not self.gpus.devices or (cell.spec.get("backend") or {}).get("device", "auto") == "cpu":
            return 0
        return min(gpus_needed(cell.spec), len(self.gpus.devices))

    def _run(self, h: Handle) -> None:
        """One cell on a pool thread: wait for its GPUs, run it on them alone, give them back."""
        with self.gpus.take(self._wanted(h.cell)) as devices:
            env = {"CUDA_VISIBLE_DEVICES": ",".join(devices)} if devices and self.runtime is None else {}
            run_command(cell_command(h, self.runtime, self.digest, devices if self.gpus.devices else None), env)

    def wait(self, handles: list[Handle], timeout: float, refresh) -> list[tuple[Handle, Failure | None]]:
        if self.pool is None:
            h = handles[0]
            return [(h, _in_process(h, refresh))]
        done, _ = concurrent.futures.wait([h.ref for h in handles], timeout, concurrent.futures.FIRST_COMPLETED)
        out: list[tuple[Handle, Failure | None]] = []
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


def cell_command(h: Handle, runtime=None, digest: str | None = None, devices: list[str] | None = None) -> list[str]:
    """`esbench run-cell` of one written cell: in a child Python, or in the container `runtime` (its `digest` read
    once by the caller) on the GPUs `devices` (none: a CPU run; None: decided by `container.cell_uses_gpu`, all)."""
    if runtime is None:
        return [sys.executable, "-m", "esbench.cli", "run-cell", str(h.cd.cell_json), "--out", str(h.cd.path)]
    if devices is not None:
        return runtime.command(h.cd.cell_json, h.cd.path, bool(devices), digest, devices)
    from esbench.executors.container import cell_uses_gpu

    return runtime.command(h.cd.cell_json, h.cd.path, cell_uses_gpu(h.cell.spec), digest)


def run_command(cmd: list[str], env: dict[str, str] | None = None) -> None:
    """`esbench run-cell` in a child process (or a container), with `env` added to this one's; its progress reaches
    the driver through the cell's events.jsonl. (The cell's backend sets its own CPU threads, `backend.cpu_threads`,
    so records do not depend on how many cells ran at once.)"""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}  # OMP: libraries other than torch, no oversubscription
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if proc.returncode != 0:
        err = proc.stderr.splitlines()
        last = next((x.strip() for x in reversed(err) if x.strip()), f"exit status {proc.returncode}")
        raise CellFailed(f"esbench run-cell exited {proc.returncode}: {last}", proc.stderr)


def gpu_count() -> int:
    """GPUs on this host (tests monkeypatch this): those torch can use (`esbench.gpu.devices`), else, on a host with
    an NVIDIA GPU, `nvidia-smi -L`'s lines (an esbench with a CPU torch can still pass its GPUs to a container)."""
    from esbench import gpu

    if n := len(gpu.devices(free_memory=False)):
        return n
    if not gpu.host_has_nvidia_gpu() or shutil.which("nvidia-smi") is None:
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def visible_gpus() -> list[str]:
    """The GPUs cells may be given, as CUDA_VISIBLE_DEVICES names them: its entries where it is set (up to the
    first invalid one, as CUDA reads it), else 0..count−1."""
    n = gpu_count()
    if n == 0:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(i) for i in range(n)]
    ids: list[str] = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry or entry.startswith("-"):
            break
        ids.append(entry)
    return ids[:n]


class GpuPool:
    """Devices handed to concurrent cells, each to one cell at a time."""

    def __init__(self, devices: list[str]):
        self.devices = list(devices)
        self._available = list(devices)
        self._cond = threading.Condition()

    @contextmanager
    def take(self, n: int) -> Iterator[list[str]]:
        """Wait until `n` devices are free, hold them for the block (lowest ids first), then release them."""
        n = min(n, len(self.devices))
        with self._cond:
            self._cond.wait_for(lambda: len(self._available) >= n)
            got = self._available[:n]
            for d in got:
                self._available.remove(d)
        try:
            yield got
        finally:
            with self._cond:
                self._available += got
                self._available.sort(key=self.devices.index)
                self._cond.notify_all()
