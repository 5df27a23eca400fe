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

GPU cells run one per worker process (`max_calls=1`): the worker exits after its cell, so the next cell never
inherits its CUDA context, its GPU memory or its vLLM engine. Ray sets that rule itself only for `num_gpus` given in
the `@ray.remote` decorator, and refuses `max_calls` in `.options()`, so GPU cells get their own remote function.

A GPU cell with `--es-workers W` (an ES stage, W > 1) needs W + 1 GPUs at once: its own for the driver's replica and
one per ES worker. It runs in bundle 0 of a placement group [{CPU, GPU: 1}, {GPU: 1} × W] (PACK) that its workers
then fill (`esbench.es.population`, "GPU accounting"). Ray reserves a group all or nothing, so such cells queue for
free GPUs instead of each holding one while its workers wait for the others (a deadlock). A cell no local instance
could hold fails at once; on a cluster, one still unplaced after ESBENCH_RAY_READY_TIMEOUT_S (default 300 s) while
asking more GPUs than the cluster has fails naming both (an autoscaler may add nodes until then).

Retries: `max_retries` (default 2) re-runs a task whose worker or node died (OOM kill, preemption of a spot node).
The re-run resumes from the cell's checkpoints under `work/`: `run-cell` resumes by itself, and the cell's Lease
(`.lease`) is taken over at once when its holder on this host is gone or a zombie. A retry that lands on another
node while the lease is still renewed waits for it (inside the cell's `records.Lease`, up to its ttl of 120 s).
Exceptions raised by the cell itself are not retried (they would fail again): the cell is reported failed with
"Type: message" and the remote traceback goes to its `error.log`.

A local instance gets `num_cpus=os.cpu_count()`, no dashboard, no worker output on the driver (the cell folder has
`esbench.log`), and its own temporary directory, removed after `ray.shutdown()`. Ray 2.60 turns token
authentication on for new local clusters and writes `~/.ray/auth_token` unless `RAY_AUTH_MODE` is set; esbench
leaves that choice to the user (`RAY_AUTH_MODE=disabled` for a private single-machine instance; the tests set it).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from esbench.executors import Failure, Handle, method_kinds, write_cell
from esbench.executors.remote import execution_env, run_cell_remote
from esbench.spec import Cell

log = logging.getLogger(__name__)

MAX_RETRIES = 2


def _task(cell_json: str, directory: str, env: dict[str, str]) -> None:
    """The Ray task body (module level, so workers import it by reference)."""
    from esbench.ray_session import pin_assigned_gpus

    pin_assigned_gpus()  # `cuda` is the GPU Ray gave this task
    run_cell_remote(cell_json, directory, env=env)


def resources(spec: dict[str, Any], cluster_gpus: float) -> dict[str, float]:
    """The task's resource request from the cell spec's `backend` block."""
    backend = spec.get("backend") or {}
    device = backend.get("device", "auto")
    if device == "cuda" or (device == "auto" and cluster_gpus > 0):
        from esbench.runner import grpo_gpus

        # `--grpo-gpus G`: the task's own process launches G ranks on its node, so it holds G GPUs at once
        gpus = grpo_gpus() if "grpo" in method_kinds(spec.get("method") or {}) else 1
        return {"num_cpus": 1, "num_gpus": gpus}
    return {"num_cpus": int(backend.get("cpu_threads", 1)), "num_gpus": 0}


def es_workers(spec: dict[str, Any], env: dict[str, str]) -> int:
    """The ES workers (Ray actors) the cell will start when `--es-workers` W > 1 and it has an ES stage: W, or W-1
    for paper-bf16 engines, whose engine 0 is the cell task itself (`esbench.es.population.actors`)."""
    from esbench.es.population import actors

    workers = int(env.get("ESBENCH_ES_WORKERS", "1"))
    method = spec.get("method") or {}
    if workers <= 1 or "es" not in method_kinds(method):
        return 0
    return actors(workers, max(_es_engines(method), 1))


def _es_engines(method: Any) -> int:
    """`engines` of the ES stage of a method spec (a sequence's stages included); 1 when none is set."""
    if isinstance(method, dict):
        if method.get("kind") == "es" and isinstance(method.get("config"), dict):
            return int(method["config"].get("engines", 1) or 1)
        return max([_es_engines(v) for v in method.values()] or [1])
    if isinstance(method, list):
        return max([_es_engines(v) for v in method] or [1])
    return 1


def bundles(request: dict[str, float], workers: int) -> list[dict[str, float]] | None:
    """The placement group of a GPU cell with ES workers: the cell task's bundle, then one GPU per worker; None when
    the task needs no group (a CPU cell's workers hold no resources, a cell without workers holds only its own)."""
    if not (request["num_gpus"] and workers):
        return None
    return [{"CPU": request["num_cpus"], "GPU": request["num_gpus"]}] + [{"GPU": 1.0}] * workers


def _demand(request: dict[str, float], group: list[dict[str, float]] | None) -> dict[str, float]:
    """CPUs and GPUs the cell holds at once."""
    if group is None:
        return {"CPU": request["num_cpus"], "GPU": request["num_gpus"]}
    return {r: sum(b.get(r, 0) for b in group) for r in ("CPU", "GPU")}


def _describe(error: BaseException) -> tuple[str, str]:
    """("Type: message", traceback text) of a failed task; a RayTaskError carries the remote exception and trace."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):  # Ray leaves traceback_str empty for some causes (a ValueError subclass)
        # str(error) then holds the remote frames (ray::task, File ... lines) after Ray's own header
        trace = getattr(error, "traceback_str", None) or f"Traceback (most recent call last), from Ray:\n{error}"
        where = f"Ray task on pid {getattr(error, 'pid', '?')}, node {getattr(error, 'ip', '?')}"
        return f"{type(cause).__name__}: {cause}", f"{where}\n{trace}"
    return f"{type(error).__name__}: {error}", f"{type(error).__name__}: {error}\n"


class RayExecutor:
    """Cells as Ray tasks with their resource requests (module docstring)."""

    message = None

    def __init__(self, jobs: int = 1, max_retries: int = MAX_RETRIES):
        self.max_retries = max_retries  # `jobs` is the local executor's; Ray schedules what the cluster holds
        self._session: contextlib.AbstractContextManager[str | None] | None = None
        self._groups: dict[Any, tuple[Any, dict[str, float], float]] = {}  # task ref -> (group, demand, since)

    def submit(self, cells: list[Cell], dir_of: Callable[[Cell], Path]) -> list[Handle]:
        import ray
        from ray.util import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from esbench.ray_session import ES_WORKERS_GROUP, session

        self._session = session()
        local = self._session.__enter__() is not None  # our own instance: its size is all there is
        totals = ray.cluster_resources()
        cpu_task = ray.remote(_task)
        gpu_task = ray.remote(max_calls=1)(_task)  # a fresh worker per GPU cell (module docstring)
        env = execution_env()
        handles = []
        for cell in cells:
            h = Handle(cell, write_cell(cell, dir_of))
            request = resources(cell.spec, totals.get("GPU", 0))
            workers = es_workers(cell.spec, env)
            group = bundles(request, workers)
            demand = _demand(request, group)
            if local and any(demand[r] > totals.get(r, 0) for r in demand):
                with_workers = f" (itself and its {workers} ES workers)" if group else ""
                msg = (
                    f"cell asks for {demand['CPU']:g} CPUs and {demand['GPU']:g} GPUs{with_workers}; this machine's "
                    f"Ray instance has {totals.get('CPU', 0):g} and {totals.get('GPU', 0):g}: it would never start"
                )
                h.ref = Failure(f"RuntimeError: {msg}", msg + "\n")
                handles.append(h)
                continue
            options = {**request, "max_retries": self.max_retries, "name": f"esbench {cell.name}"}
            if group is not None:
                pg = placement_group(group, strategy="PACK", name=f"{ES_WORKERS_GROUP} {cell.id}")
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
            remote = gpu_task if request["num_gpus"] else cpu_task
            h.ref = remote.options(**options).remote(str(h.cd.cell_json), str(h.cd.path), env)
            if group is not None:
                self._groups[h.ref] = (pg, demand, time.monotonic())
            handles.append(h)
        return handles

    def wait(self, handles: list[Handle], timeout: float, refresh) -> list[tuple[Handle, Failure | None]]:
        import ray

        known: list[tuple[Handle, Failure | None]] = [(h, h.ref) for h in handles if isinstance(h.ref, Failure)]
        if known:
            return known
        by_ref = {h.ref: h for h in handles}
        done, rest = ray.wait(list(by_ref), num_returns=1, timeout=timeout)
        if done and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            done += more
        out: list[tuple[Handle, Failure | None]] = []
        for ref in done:
            try:
                ray.get(ref)
            except Exception as e:  # one failed cell must not stop the others
                out.append((by_ref[ref], Failure(*_describe(e))))
            else:
                out.append((by_ref[ref], None))
            self._release(ref)
        finished = set(done)
        waiting = [ref for ref in by_ref if ref not in finished]
        return out + [(by_ref[ref], f) for ref, f in self._unplaceable(waiting)]

    def _unplaceable(self, refs: list) -> list[tuple[Any, Failure]]:
        """Cells whose group is still unplaced after the ready timeout and asks more than the cluster has: failed
        (their tasks cancelled), where they would otherwise wait forever."""
        import ray

        from esbench.ray_session import ready_timeout

        out = []
        now, totals = time.monotonic(), None
        for ref in refs:
            if ref not in self._groups:
                continue
            pg, demand, since = self._groups[ref]
            if now - since < ready_timeout() or ray.wait([pg.ready()], timeout=0)[0]:
                continue
            totals = totals or ray.cluster_resources()
            if all(demand[r] <= totals.get(r, 0) for r in demand):
                continue  # it fits once running cells finish: keep waiting
            ray.cancel(ref, force=True)
            self._release(ref)
            msg = (
                f"cell asks for {demand['CPU']:g} CPUs and {demand['GPU']:g} GPUs at once (itself and its ES "
                f"workers); after {ready_timeout():g} s (ESBENCH_RAY_READY_TIMEOUT_S) the Ray cluster has "
                f"{totals.get('CPU', 0):g} CPUs and {totals.get('GPU', 0):g} GPUs: it cannot start"
            )
            out.append((ref, Failure(f"RuntimeError: {msg}", msg + "\n")))
        return out

    def _release(self, ref) -> None:
        from ray.util import remove_placement_group

        group = self._groups.pop(ref, None)
        if group is not None:
            remove_placement_group(group[0])

    def close(self) -> None:
        for ref in list(self._groups):
            self._release(ref)
        if self._session is not None:
            self._session.__exit__(None, None, None)
            self._session = None
