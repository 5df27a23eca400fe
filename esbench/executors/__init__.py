"""Executors decide where cells run. `local` runs them one after another in this process.

An executor takes the pending cells, a function giving each cell's output folder, and a rich console, and
returns the failed cells with their error. `ray` runs them as Ray tasks (`ESBENCH_RAY_ADDRESS` or a local instance),
`slurm` as a submitit job array (`ESBENCH_SLURM_*` settings); both call the same `run-cell` entry point.
"""

from __future__ import annotations

from collections.abc import Callable

EXECUTORS: dict[str, str] = {
    "local": "esbench.executors.local:run_cells",
    "ray": "esbench.executors.ray:run_cells",
    "slurm": "esbench.executors.slurm:run_cells",
}


def get_executor(name: str) -> Callable:
    import importlib

    module, attr = EXECUTORS[name].split(":")
    return getattr(importlib.import_module(module), attr)
