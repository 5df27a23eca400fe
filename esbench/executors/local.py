"""Run cells on this machine, with rich progress for cells and for each cell's stages.

Each cell goes through the same entry point as `esbench run-cell CELL.json --out DIR`: its frozen spec is written to
`cell.json` and run from there, so a local run, a container and a cluster job execute identical inputs.

`jobs=1` runs the cells one after another in this process. `jobs=N` runs N `esbench run-cell` processes at a time;
each cell's backend uses the CPU threads its spec names (`backend.cpu_threads`), so the records are the same either
way. It pays where cores are many: on this project's 2-vCPU machines a 5-cell, 40-update tiny grid took 7:09 with
2 jobs against 8:58 in one process (measured before `cpu_threads` existed, with 1 thread per job against 2).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from esbench.spec import Cell

log = logging.getLogger(__name__)
COLUMNS = (
    SpinnerColumn(),
    TextColumn("{task.description}"),
    BarColumn(),
    TextColumn("{task.completed}/{task.total}"),
    TimeElapsedColumn(),
)


def run_cells(cells: list[Cell], dir_of: Callable[[Cell], Path], console, jobs: int = 1) -> list[tuple[Cell, str]]:
    from esbench.records import CellDir, atomic_write_json
    from esbench.runner import stage_count

    failed: list[tuple[Cell, str]] = []
    lock = threading.Lock()
    with Progress(*COLUMNS, console=console, transient=False) as progress:
        overall = progress.add_task("cells", total=len(cells))

        def run_one(cell: Cell) -> None:
            cd = CellDir(dir_of(cell))
            stages = progress.add_task(f"  {cell.name}", total=None)

            def on_stage(name: str) -> None:
                progress.update(stages, description=f"  {cell.name}: {name}", advance=1)

            try:
                total = stage_count(cell)  # inside the try: an invalid spec fails its cell, not the run
                progress.update(stages, total=total)
                atomic_write_json(cd.cell_json, cell.to_json())
                (_in_process if jobs == 1 else _in_subprocess)(cd, on_stage, jobs)
                progress.update(stages, completed=total, description=f"  {cell.name}: done")
            except Exception as e:  # one failed cell must not stop the others
                detail = e.detail if isinstance(e, CellFailed) else traceback.format_exc()
                log.error("cell %s (%s) failed:\n%s", cell.id, cell.name, detail)
                cd.error_log.write_text(detail)
                with lock:
                    failed.append((cell, f"{type(e).__name__}: {e}"))
                progress.update(stages, description=f"  {cell.name}: [red]failed[/red]")
            progress.advance(overall)

        if jobs == 1:
            for cell in cells:
                run_one(cell)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                list(pool.map(run_one, cells))
    order = {c.id: i for i, c in enumerate(cells)}
    return sorted(failed, key=lambda f: order[f[0].id])


class CellFailed(RuntimeError):
    def __init__(self, message: str, detail: str):
        super().__init__(message)
        self.detail = detail


def _in_process(cd, on_stage, jobs: int) -> None:
    from esbench.runner import run_cell_file

    run_cell_file(cd.cell_json, cd.path, on_stage)


def _in_subprocess(cd, on_stage, jobs: int) -> None:
    """`esbench run-cell` in a child process; its stage lines drive the progress bar. (The cell's backend sets its
    own CPU threads, `backend.cpu_threads`, so records do not depend on how many cells ran at once.)"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # libraries other than torch: no oversubscription
    cmd = [sys.executable, "-m", "esbench.cli", "run-cell", str(cd.cell_json), "--out", str(cd.path)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
        reader.start()
        for line in proc.stdout:
            prefix, sep, stage = line.rstrip("\n").partition(": ")
            if sep and stage and not line.startswith("{"):
                on_stage(stage)
        proc.wait()
        reader.join()
    if proc.returncode != 0:
        last = next((x.strip() for x in reversed(err) if x.strip()), f"exit status {proc.returncode}")
        raise CellFailed(f"esbench run-cell exited {proc.returncode}: {last}", "".join(err))
