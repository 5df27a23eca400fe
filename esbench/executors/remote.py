"""Running one cell inside a remote worker (a Ray task, a Slurm array task): shared by the ray and slurm executors.

The worker calls `run_cell_file`, like `esbench run-cell`, with the cell's library logs in its `esbench.log`. A
retry that lands while a dead holder's lease on another node has not yet expired waits for it inside the cell's
`Lease` (up to the holder's ttl, with one message in the job's log); a dead holder on the same node is taken over at
once.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

EXECUTION_ENV = ("ESBENCH_ES_WORKERS", "ESBENCH_GRPO_GPUS", "ESBENCH_RAY_ADDRESS")


def execution_env() -> dict[str, str]:
    """The driver's execution options (`--es-workers`, `--grpo-gpus`, `--ray-address`), to set in a remote
    worker's environment."""
    return {k: os.environ[k] for k in EXECUTION_ENV if k in os.environ}


def run_cell_remote(cell_json: str | Path, directory: str | Path, env: dict[str, str] | None = None) -> None:
    """Run one cell in a remote worker (Ray task, Slurm job): `run_cell_file` with the cell's `esbench.log`.

    The cell's `Lease` does the waiting: after a crash or preemption on another node, the dead holder's lease
    expires within its ttl and the retry takes over; a live runner keeps renewing it, so a cell run twice at once
    still fails with `CellBusy` instead of interleaving writes.
    """
    from esbench.records import CellDir
    from esbench.runner import run_cell_file

    os.environ.update(env or {})
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    cd = CellDir(Path(directory))
    cd.path.mkdir(parents=True, exist_ok=True)
    resuming = cd.work.is_dir() and any(cd.work.iterdir())
    root = logging.getLogger()
    handler = logging.FileHandler(cd.log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    note = f"cell {cd.path.name}: {'resuming from work/' if resuming else 'starting'} (pid {os.getpid()})"
    print(f"esbench: {note}", flush=True)  # the job's stdout (submitit log, Ray worker log)
    log.info(note)
    try:
        run_cell_file(Path(cell_json), cd.path)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()
