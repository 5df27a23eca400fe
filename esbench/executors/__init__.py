"""Executors decide where cells run: `local` (this machine: in process, or `--jobs N` run-cell processes), `ray`
(Ray tasks, on `--ray-address` or a local instance) and `slurm` (a submitit job array). All run a cell through
`run_cell_file`, what `esbench run-cell CELL.json --out DIR` runs, so records are the same wherever a cell ran.

The protocol (`Executor`):
- `submit(cells, dir_of) -> handles` writes each cell's `cell.json`, starts or queues every cell, and returns;
- `wait(handles, timeout, refresh) -> finished` returns the handles that finished within `timeout` seconds, each with
  its `Failure` or None (its record was written); `refresh(handle)` may be called while waiting;
- `close()` releases what the executor holds (its Ray session; local work still running).

`drive` is the one loop over it. Progress comes from the events each cell's runner appends to its `events.jsonl`
(`records.Events`), whichever machine runs the cell; a failure goes to the cell's `error.log` and the run's log, and
the other cells go on.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from esbench.records import CellDir, Events
from esbench.spec import Cell

log = logging.getLogger(__name__)

EXECUTORS: dict[str, str] = {
    "local": "esbench.executors.local:LocalExecutor",
    "ray": "esbench.executors.ray:RayExecutor",
    "slurm": "esbench.executors.slurm:SlurmExecutor",
}
POLL_S = 1.0  # between progress refreshes
COLUMNS = (
    SpinnerColumn(),
    TextColumn("{task.description}"),
    BarColumn(),
    TextColumn("{task.completed}/{task.total}"),
    TimeElapsedColumn(),
)


@dataclass
class Handle:
    cell: Cell
    cd: CellDir
    ref: Any = None  # the executor's own: a Future, a Ray ObjectRef, a submitit Job, or a Failure known at submit


@dataclass
class Failure:
    summary: str  # "Type: message", shown at the end of the run
    detail: str  # the traceback or log text, written to the cell's error.log


class Executor(Protocol):
    message: str | None  # printed once after submit (where the jobs went)

    def submit(self, cells: list[Cell], dir_of: Callable[[Cell], Path]) -> list[Handle]: ...

    def wait(
        self, handles: list[Handle], timeout: float, refresh: Callable[[Handle], None]
    ) -> list[tuple[Handle, Failure | None]]: ...

    def close(self) -> None: ...


def executor_class(name: str) -> type:
    module, attr = EXECUTORS[name].split(":")
    return getattr(importlib.import_module(module), attr)


def get_executor(name: str) -> Callable[..., list[tuple[Cell, str]]]:
    """`run(cells, dir_of, console, jobs=1, **options) -> failed cells` on the named executor."""

    def run(cells: list[Cell], dir_of: Callable[[Cell], Path], console, jobs: int = 1, **options: Any):
        return drive(executor_class(name)(jobs=jobs, **options), cells, dir_of, console)

    return run


def write_cell(cell: Cell, dir_of: Callable[[Cell], Path]) -> CellDir:
    from esbench.records import atomic_write_json

    cd = CellDir(dir_of(cell))
    cd.path.mkdir(parents=True, exist_ok=True)
    atomic_write_json(cd.cell_json, cell.to_json())
    return cd


def method_kinds(method: dict[str, Any]) -> set[str]:
    """The method kinds a cell spec's `method` runs: itself, or a sequence's stages."""
    stages = (method.get("config") or {}).get("stages") if method.get("kind") == "sequence" else None
    return {s["kind"] for s in stages} if stages else {method.get("kind", "")}


def gpus_needed(spec: dict[str, Any]) -> int:
    """GPUs a cell's process uses when it runs on GPUs: one for its own model, plus one per `--es-workers` replica
    (ESBENCH_ES_WORKERS, an execution option read where the run starts; W > 1) for a cell with an ES stage. The
    driver keeps its replica on its own GPU (`esbench.es.population`, "GPU accounting")."""
    from esbench.runner import es_workers, grpo_gpus

    kinds = method_kinds(spec.get("method") or {})
    workers = es_workers()
    es = 1 + workers if workers > 1 and "es" in kinds else 1
    return max(es, grpo_gpus() if "grpo" in kinds else 1)


def _stages(cell: Cell) -> int | None:
    from esbench.runner import stage_count

    try:
        return stage_count(cell)
    except Exception:  # an invalid spec: the cell will fail when it runs, not the run now
        return None


def drive(executor: Executor, cells: list[Cell], dir_of: Callable[[Cell], Path], console) -> list[tuple[Cell, str]]:
    """Submit `cells`, follow them to the end, and return the failed ones with "Type: message", in cell order."""
    if not cells:
        return []
    failed: list[tuple[Cell, str]] = []
    with Progress(*COLUMNS, console=console, transient=False) as progress:
        overall = progress.add_task("cells", total=len(cells))
        bars: dict[str, Any] = {}
        totals: dict[str, int | None] = {}

        def refresh(h: Handle) -> None:
            attempt = Events(h.cd.events).attempt()
            if attempt is not None:
                stages, last = attempt
                progress.update(bars[h.cell.id], completed=stages, description=f"  {h.cell.name}: {last}")

        try:
            handles = executor.submit(cells, dir_of)
            for h in handles:
                totals[h.cell.id] = _stages(h.cell)
                bars[h.cell.id] = progress.add_task(f"  {h.cell.name}: submitted", total=totals[h.cell.id])
            if executor.message:
                console.print(executor.message)
            pending = list(handles)
            while pending:
                for h in pending:
                    refresh(h)
                for h, failure in executor.wait(pending, POLL_S, refresh):
                    pending.remove(h)
                    bar = bars[h.cell.id]
                    if failure is None:
                        total = totals[h.cell.id] or 1
                        progress.update(bar, total=total, completed=total, description=f"  {h.cell.name}: done")
                    else:
                        log.error("cell %s (%s) failed:\n%s", h.cell.id, h.cell.name, failure.detail)
                        h.cd.error_log.write_text(failure.detail)
                        failed.append((h.cell, failure.summary))
                        progress.update(bar, description=f"  {h.cell.name}: [red]failed[/red]")
                    progress.advance(overall)
        finally:
            executor.close()
    order = {c.id: i for i, c in enumerate(cells)}
    return sorted(failed, key=lambda f: order[f[0].id])
