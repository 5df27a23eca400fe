"""One way to reach Ray, shared by the ray executor (cells as tasks) and the ES population (members on actors).

`session()` uses the caller's Ray session when one is initialised (and leaves it running), connects to
`ESBENCH_RAY_ADDRESS` (set by `--ray-address`) when given, and otherwise starts a private local instance with its own
short temporary directory (Ray's unix sockets live under it: 108-byte path limit), no dashboard and no worker output
on the driver, which it shuts down and removes on exit, so no Ray session or /tmp/ray folder outlives it.

GPUs (ADR in `esbench.es.population`): a private instance started by a process whose own replica sits on a GPU is
given only the other GPUs (`gpus`), so Ray never hands the driver's GPU to an actor. `wait_ready` bounds the wait for
a placement group and names what was asked for and what the cluster has; `pin_assigned_gpus` makes `cuda` in a task or
actor mean the GPU Ray assigned it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

TEMP_PREFIX = "esbench-ray-"
READY_TIMEOUT_S = 300.0  # default wait for GPUs held by others to free up (ESBENCH_RAY_READY_TIMEOUT_S)
ES_WORKERS_GROUP = "esbench-es-workers"  # placement groups named so reserve a cell task's GPUs and its ES workers'


def fresh_temp_dir() -> str:
    return tempfile.mkdtemp(prefix=TEMP_PREFIX)


@contextlib.contextmanager
def session(num_cpus: int | None = None, gpus: Sequence[str] | None = None) -> Iterator[str | None]:
    """Yield the private instance's temp dir, or None when an existing session or cluster is used.

    `gpus`: the GPU ids a private instance may hand out (default: all it detects). Ray maps the slots it assigns to
    the `CUDA_VISIBLE_DEVICES` its raylet started with, so the instance starts with exactly these visible.
    """
    import ray

    if ray.is_initialized():  # the caller's own Ray session: use it, leave it running
        yield None
        return
    address = os.environ.get("ESBENCH_RAY_ADDRESS")
    tmp = None
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        tmp = fresh_temp_dir()
        try:
            with _visible_gpus(gpus):
                ray.init(
                    address="local",  # never attach to a cluster named by RAY_ADDRESS by accident
                    num_cpus=num_cpus or os.cpu_count(),
                    num_gpus=None if gpus is None else len(gpus),
                    include_dashboard=False,
                    log_to_driver=False,
                    _temp_dir=tmp,
                )
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    try:
        yield tmp
    finally:
        ray.shutdown()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _visible_gpus(gpus: Sequence[str] | None) -> Iterator[None]:
    """`CUDA_VISIBLE_DEVICES` = `gpus` while Ray starts its raylet (which its workers inherit), then as it was; the
    caller's own CUDA context is already made, so it keeps its device."""
    if gpus is None:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def ready_timeout() -> float:
    """How long to wait for a placement group's resources (ESBENCH_RAY_READY_TIMEOUT_S, default 300 s)."""
    return float(os.environ.get("ESBENCH_RAY_READY_TIMEOUT_S", READY_TIMEOUT_S))


def cluster_gpus() -> tuple[float, float]:
    """(GPUs in the cluster, GPUs free now)."""
    import ray

    return ray.cluster_resources().get("GPU", 0.0), ray.available_resources().get("GPU", 0.0)


def wait_ready(group: Any, what: str, timeout: float | None = None) -> None:
    """Wait for placement group `group` to be reserved, or remove it and raise naming the request and the cluster.

    Without it a request the cluster cannot meet waits forever in `ray.get`.
    """
    import ray
    from ray.util import remove_placement_group

    timeout = ready_timeout() if timeout is None else timeout
    try:
        ray.get(group.ready(), timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(group)
        total, free = cluster_gpus()
        raise RuntimeError(
            f"{what}: not reserved within {timeout:g} s (ESBENCH_RAY_READY_TIMEOUT_S); the Ray cluster has "
            f"{total:g} GPUs, {free:g} free now, and {ray.cluster_resources().get('CPU', 0):g} CPUs"
        ) from None


def pin_assigned_gpus() -> list[str]:
    """Inside a Ray task or actor: narrow `CUDA_VISIBLE_DEVICES` to the GPUs Ray assigned, so `cuda` (= `cuda:0`)
    is the assigned GPU. Ray already does so unless RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES is set; call it
    before CUDA is initialised. Returns the assigned ids ([] on CPU)."""
    import ray

    ids = [str(i) for i in ray.get_gpu_ids()]
    if ids and set(os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")) != set(ids):
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    return ids
