"""Run cells as Ray tasks: on a Ray cluster (`ESBENCH_RAY_ADDRESS`) or on a Ray instance started on this machine.

    esbench run suite.yaml --executor ray                                   # a private local instance, all cores
    ESBENCH_RAY_ADDRESS=auto esbench run suite.yaml --executor ray          # the cluster this node belongs to
    ESBENCH_RAY_ADDRESS=ray://head:10001 esbench run suite.yaml --executor ray

Each pending cell is one task that calls `run_cell_file` (what `esbench run-cell CELL.json --out DIR` runs) in a
worker, so its files are those of a local run. The driver writes `cell.json` first; on a cluster the output folder
must be on a file system every node sees, and esbench must be installed on the workers.

Resources come from the cell spec: a CPU cell asks for `backend.cpu_threads` CPUs (the torch threads it will use),
a GPU cell (`backend.device: cuda`, or `auto` when the cluster has GPUs) for one GPU and one CPU. Ray schedules
as many cells at once as the cluster holds; `jobs` (the local executor's concurrency) is accepted and ignored. The
cell tasks are the only things that hold CPUs: the driver only waits on them.

Retries: `max_retries` (default 2) re-runs a task whose worker or node died (OOM kill, preemption of a spot node).
The re-run resumes from the cell's checkpoints under `work/`: `run-cell` resumes by itself, and the cell's Lease
(`.lease`) is stale once its holder's pid is gone on this host or it stopped being renewed (ttl 120 s). A retry that
lands on another node while the lease has not yet expired waits for it (`executors.remote`, up to `LEASE_WAIT_S`).
Exceptions raised by the cell itself are not retried (they would fail again): the cell is reported failed with
"Type: message" and the remote traceback goes to its `error.log`.

A local instance gets `num_cpus=os.cpu_count()`, no dashboard, no worker output on the driver (the cell folder has
`esbench.log`), and its own temporary directory, removed after `ray.shutdown()`. Ray 2.60 turns token
authentication on for new local clusters and writes `~/.ray/auth_token` unless `RAY_AUTH_MODE` is set; esbench
leaves that choice to the user (`RAY_AUTH_MODE=disabled` for a private single-machine instance; the tests set it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from esbench.executors import Failure, Handle, write_cell
from esbench.executors.remote import execution_env, run_cell_remote
from esbench.spec import Cell

log = logging.getLogger(__name__)

MAX_RETRIES = 2


def _task(cell_json: str, directory: str, env: dict[str, str]) -> None:
    """The Ray task body (module level, so workers import it by reference)."""
    run_cell_remote(cell_json, directory, env=env)


def resources(spec: dict[str, Any], cluster_gpus: float) -> dict[str, float]:
    """The task's resource request from the cell spec's `backend` block."""
    backend = spec.get("backend") or {}
    device = backend.get("device", "auto")
    if device == "cuda" or (device == "auto" and cluster_gpus > 0):
        return {"num_cpus": 1, "num_gpus": 1}
    return {"num_cpus": int(backend.get("cpu_threads", 1)), "num_gpus": 0}


def _describe(error: BaseException) -> tuple[str, str]:
    """("Type: message", traceback text) of a failed task; a RayTaskError carries the remote exception and trace."""
    cause = getattr(error, "cause", None)
    trace = getattr(error, "traceback_str", None)
    if isinstance(cause, BaseException) and trace:
        where = f"Ray task on pid {getattr(error, 'pid', '?')}, node {getattr(error, 'ip', '?')}"
        return f"{type(cause).__name__}: {cause}", f"{where}\n{trace}"
    return f"{type(error).__name__}: {error}", f"{type(error).__name__}: {error}\n"


class RayExecutor:
    """Cells as Ray tasks with their resource requests (module docstring)."""

    message = None

    def __init__(self, jobs: int = 1, max_retries: int = MAX_RETRIES):
        self.max_retries = max_retries  # `jobs` is the local executor's; Ray schedules what the cluster holds
        self._session = None

    def submit(self, cells: list[Cell], dir_of: Callable[[Cell], Path]) -> list[Handle]:
        import ray

        from esbench.ray_session import session

        self._session = session()
        local = self._session.__enter__() is not None  # our own instance: its size is all there is
        totals = ray.cluster_resources()
        remote = ray.remote(_task)
        env = execution_env()
        handles = []
        for cell in cells:
            h = Handle(cell, write_cell(cell, dir_of))
            request = resources(cell.spec, totals.get("GPU", 0))
            if local and any(request[k] > totals.get(r, 0) for k, r in _KEYS.items()):
                msg = (
                    f"cell asks for {request['num_cpus']} CPUs and {request['num_gpus']} GPUs; this machine's Ray "
                    f"instance has {totals.get('CPU', 0):g} and {totals.get('GPU', 0):g}: it would never start"
                )
                h.ref = Failure(f"RuntimeError: {msg}", msg + "\n")
            else:
                options = {**request, "max_retries": self.max_retries, "name": f"esbench {cell.name}"}
                h.ref = remote.options(**options).remote(str(h.cd.cell_json), str(h.cd.path), env)
            handles.append(h)
        return handles

    def wait(self, handles: list[Handle], timeout: float, refresh) -> list[tuple[Handle, Failure | None]]:
        import ray

        known = [(h, h.ref) for h in handles if isinstance(h.ref, Failure)]
        if known:
            return known
        by_ref = {h.ref: h for h in handles}
        done, rest = ray.wait(list(by_ref), num_returns=1, timeout=timeout)
        if done and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            done += more
        out = []
        for ref in done:
            try:
                ray.get(ref)
            except Exception as e:  # one failed cell must not stop the others
                out.append((by_ref[ref], Failure(*_describe(e))))
                continue
            out.append((by_ref[ref], None))
        return out

    def close(self) -> None:
        if self._session is not None:
            self._session.__exit__(None, None, None)
            self._session = None


_KEYS = {"num_cpus": "CPU", "num_gpus": "GPU"}
