"""Run cells sequentially in this process, with rich progress for cells and for each cell's stages.

Each cell goes through the same entry point as `esbench run-cell CELL.json --out DIR`: its frozen spec is written to
`cell.json` and run from there, so a local run, a container and a cluster job execute identical inputs.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from pathlib import Path

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from esbench.spec import Cell

log = logging.getLogger(__name__)


def run_cells(cells: list[Cell], dir_of: Callable[[Cell], Path], console) -> list[tuple[Cell, str]]:
    from esbench.records import CellDir, atomic_write_json
    from esbench.runner import run_cell_file, stage_count

    failed: list[tuple[Cell, str]] = []
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        overall = progress.add_task("cells", total=len(cells))
        for cell in cells:
            total = stage_count(cell)
            stages = progress.add_task(f"  {cell.name}", total=total)

            def on_stage(name: str, _t=stages, _c=cell) -> None:
                progress.update(_t, description=f"  {_c.name}: {name}", advance=1)

            try:
                cd = CellDir(dir_of(cell))
                atomic_write_json(cd.cell_json, cell.to_json())
                run_cell_file(cd.cell_json, cd.path, on_stage)
                progress.update(stages, completed=total, description=f"  {cell.name}: done")
            except Exception as e:  # one failed cell must not stop the others
                log.error("cell %s (%s) failed:\n%s", cell.id, cell.name, traceback.format_exc())
                CellDir(dir_of(cell)).error_log.write_text(traceback.format_exc())
                failed.append((cell, f"{type(e).__name__}: {e}"))
                progress.update(stages, description=f"  {cell.name}: [red]failed[/red]")
            progress.advance(overall)
    return failed
