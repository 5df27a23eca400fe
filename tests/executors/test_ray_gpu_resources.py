"""The Ray executor on GPUs, with a local Ray that pretends to have 3 (`ray.init(num_gpus=3)` on this CPU: Ray counts
them and sets CUDA_VISIBLE_DEVICES per task and actor; the cells themselves run on the CPU, `device: auto`).

- GPU cells run one per worker process (Ray's `max_calls=1`), so no cell inherits an earlier cell's GPU state.
- ES cells with `--es-workers 2` need 3 GPUs each (the driver's replica and two workers): two of them on 3 GPUs queue
  and both finish, instead of each holding a GPU while its workers wait for the others; the workers' GPUs are never
  the cell task's own.
- A cell asking for more GPUs than the cluster has fails after the ready timeout, naming both, instead of waiting
  forever.
What only a real GPU shows (a CUDA context or vLLM engine surviving in a reused worker, two replicas filling one GPU's
memory) is what these rules prevent; here the accounting itself is checked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from run_helpers import suite_cells

FAKE_GPUS = 3
DEADLINE_S = 420  # a deadlock fails the test instead of hanging it


@pytest.fixture(scope="module")
def fake_gpu_ray():
    """One local Ray session with 2 CPUs and 3 pretend GPUs for the module; esbench uses it as the caller's own."""
    import ray

    from esbench.ray_session import fresh_temp_dir

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "ESBENCH_RAY_ADDRESS", "ESBENCH_ES_WORKERS")}
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ.pop("ESBENCH_RAY_ADDRESS", None)
    tmp = fresh_temp_dir()
    ray.init(
        address="local",
        num_cpus=2,
        num_gpus=FAKE_GPUS,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=tmp,
    )
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _small(cell, seed: int = 0):
    """The cell with a seed of its own and a one-task, one-sample evaluation (its run takes seconds)."""
    from esbench.spec import Cell

    ev = {**cell.spec["eval"], "tasks": ["tiny_arith"], "held_out": [], "limit": 2, "n": 1, "k": [1]}
    return Cell({**cell.spec, "seed": seed, "eval": ev}, cell.labels)


def _drive(cells, out: Path, suite: str) -> tuple[dict[str, object], list]:
    """Submit `cells` to a RayExecutor and follow them up to DEADLINE_S: {cell id: Failure or None}, and the cells
    still pending then (cancelled)."""
    import ray

    from esbench.executors.ray import RayExecutor
    from esbench.records import cell_dir

    ex = RayExecutor()
    results: dict[str, object] = {}
    try:
        pending = ex.submit(cells, lambda c: cell_dir(out, suite, c.id))
        end = time.monotonic() + DEADLINE_S
        while pending and time.monotonic() < end:
            for h, failure in ex.wait(pending, 1.0, lambda h: None):
                pending.remove(h)
                results[h.cell.id] = failure
        for h in pending:
            ray.cancel(h.ref, force=True)
    finally:
        ex.close()
    return results, [h.cell for h in pending]


def _task_pid(cd: Path) -> int:
    (pid,) = re.findall(r"starting \(pid (\d+)\)", (cd / "esbench.log").read_text())
    return int(pid)


def test_gpu_cells_each_get_a_fresh_worker_process(tmp_path, tiny_model_dir, fake_gpu_ray):
    """Two GPU cells one after the other: without max_calls=1 Ray hands the second the idle worker of the first."""
    from esbench.records import cell_dir

    suite, cells = suite_cells(tmp_path, budget=1)
    (base,) = [c for c in cells if c.labels["method"] == "base"]
    first, second = _small(base, 0), _small(base, 1)
    for cell in (first, second):  # one after the other, so the first one's worker is idle when the second starts
        results, stuck = _drive([cell], tmp_path / "out", suite)
        assert results == {cell.id: None} and not stuck
    pids = [_task_pid(cell_dir(tmp_path / "out", suite, c.id)) for c in (first, second)]
    assert pids[0] != pids[1], pids


def test_es_cells_with_workers_queue_for_their_gpus_instead_of_deadlocking(
    tmp_path, tiny_model_dir, fake_gpu_ray, monkeypatch
):
    """Two ES cells × (driver + 2 workers) on 3 GPUs: both finish, one at a time; each worker holds a GPU of its own,
    never its cell task's."""
    from esbench.records import cell_dir

    monkeypatch.setenv("ESBENCH_ES_WORKERS", "2")
    suite, cells = suite_cells(tmp_path, budget=1)
    (es,) = [c for c in cells if c.labels["method"] == "es"]
    both = [_small(es, 0), _small(es, 1)]
    results, stuck = _drive(both, tmp_path / "out", suite)
    assert not stuck, f"cells {[c.name for c in stuck]} did not finish within {DEADLINE_S} s (deadlock?)"
    assert results == {c.id: None for c in both}
    for c in both:
        cd = cell_dir(tmp_path / "out", suite, c.id)
        assert (cd / "record.json").exists()
        (line,) = [ln for ln in (cd / "esbench.log").read_text().splitlines() if "ES workers placed: " in ln]
        placed = json.loads(line.split("ES workers placed: ", 1)[1])
        driver, workers = placed["driver"], placed["workers"]
        assert driver["pid"] == _task_pid(cd) and len(driver["gpus"]) == 1
        assert driver["cuda_visible_devices"] == driver["gpus"][0]
        seen = [w["cuda_visible_devices"] for w in workers]
        assert [w["gpus"] for w in workers] == [[s] for s in seen]  # Ray narrowed each to its one GPU
        assert len({*seen, driver["gpus"][0]}) == FAKE_GPUS, placed  # three different GPUs: none shared
        assert all(w["device"] == "cpu" for w in workers)  # the driver's device (auto on this CPU)


def test_a_cell_asking_more_gpus_than_the_cluster_has_fails_after_the_ready_timeout(
    tmp_path, tiny_model_dir, fake_gpu_ray, monkeypatch
):
    """Driver + 3 workers = 4 GPUs on a 3-GPU cluster the executor did not start (an autoscaler might add nodes):
    it waits the ready timeout, then fails naming the request and the cluster, without running the cell."""
    monkeypatch.setenv("ESBENCH_ES_WORKERS", "3")
    monkeypatch.setenv("ESBENCH_RAY_READY_TIMEOUT_S", "2")
    suite, cells = suite_cells(tmp_path, budget=1)
    (es,) = [c for c in cells if c.labels["method"] == "es"]
    t0 = time.monotonic()
    results, stuck = _drive([_small(es)], tmp_path / "out", suite)
    assert not stuck and time.monotonic() - t0 < 60
    (failure,) = results.values()
    assert failure.summary.startswith("RuntimeError: cell asks for 1 CPUs and 4 GPUs at once")
    assert "has 2 CPUs and 3 GPUs: it cannot start" in failure.summary


def test_gpu_cells_with_es_workers_reserve_one_gpu_each_beside_their_own():
    from esbench.executors.ray import bundles, es_workers, resources

    es = {"method": {"kind": "es"}, "backend": {"device": "cuda"}}
    seq = {"method": {"kind": "sequence", "config": {"stages": [{"kind": "grpo"}, {"kind": "es"}]}}, **es}
    grpo = {"method": {"kind": "grpo"}, "backend": {"device": "cuda"}}
    env = {"ESBENCH_ES_WORKERS": "2"}
    assert [es_workers(s, env) for s in (es, seq, grpo)] == [2, 2, 0]
    assert es_workers(es, {"ESBENCH_ES_WORKERS": "1"}) == 0 and es_workers(es, {}) == 0
    gpu = resources(es, cluster_gpus=0)
    assert bundles(gpu, 2) == [{"CPU": 1, "GPU": 1}, {"GPU": 1.0}, {"GPU": 1.0}]
    assert bundles(gpu, 0) is None  # no workers: the task's own request is all
    cpu = resources({"backend": {"device": "cpu", "cpu_threads": 2}}, cluster_gpus=4)
    assert bundles(cpu, 2) is None  # CPU workers hold no resources (their cell holds the CPUs)


def test_pin_assigned_gpus_makes_cuda_the_assigned_gpu_when_ray_leaves_the_variable_alone(fake_gpu_ray):
    """With RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES Ray assigns a GPU but leaves CUDA_VISIBLE_DEVICES unset,
    so `cuda` would be GPU 0 whichever GPU was assigned; pinning narrows it to the assigned one."""
    import ray

    def probe():
        from esbench.ray_session import pin_assigned_gpus

        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        return before, pin_assigned_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES")

    noset = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}}
    task = ray.remote(max_calls=1)(probe).options(num_cpus=0, num_gpus=1, runtime_env=noset)
    before, ids, after = ray.get(task.remote(), timeout=120)
    assert before is None and len(ids) == 1 and after == ids[0]
    assert ray.get(ray.remote(probe).options(num_cpus=0).remote(), timeout=120)[1] == []  # a CPU task: no GPU


def test_paper_bf16_engines_reserve_one_gpu_per_engine_with_engine_zero_in_the_task():
    """`engines: 8` with `--es-workers 8`: the artifact's 8 GPUs, the cell task's (engine 0) and 7 actors'."""
    from esbench.executors.ray import bundles, es_workers, resources

    cfg = {"precision": "paper-bf16", "engines": 8}
    es = {"method": {"kind": "es", "config": cfg}, "backend": {"device": "cuda"}}
    seq = {
        "method": {"kind": "sequence", "config": {"stages": [{"kind": "es", "config": cfg}, {"kind": "grpo"}]}},
        "backend": {"device": "cuda"},
    }
    env = {"ESBENCH_ES_WORKERS": "8"}
    assert [es_workers(s, env) for s in (es, seq)] == [7, 7]
    group = bundles(resources(es, cluster_gpus=0), es_workers(es, env))
    assert sum(b.get("GPU", 0) for b in group) == 8 and len(group) == 8
