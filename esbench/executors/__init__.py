"""Executors decide where cells run. `local` runs them one after another in this process.

An executor takes the pending cells, a function giving each cell's output folder, and a rich console, and
returns the failed cells with their error. Ray and Slurm executors plug in here under the same signature.
"""

from __future__ import annotations

from collections.abc import Callable

EXECUTORS: dict[str, str] = {"local": "esbench.executors.local:run_cells"}


def get_executor(name: str) -> Callable:
    import importlib

    module, attr = EXECUTORS[name].split(":")
    return getattr(importlib.import_module(module), attr)
