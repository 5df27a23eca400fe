"""`--es-workers W` GPU accounting for a cell run in a plain process (local executor, `esbench run-cell`), with Ray
pretending to have GPUs on this CPU (the replicas themselves run on the CPU; the driver's GPU is monkeypatched in):

- the private Ray instance gets only the GPUs other than the driver's, so every worker holds a GPU of its own and
  none holds the driver's (`CUDA_VISIBLE_DEVICES` per actor);
- fewer such GPUs than W fails at once, naming them, on a private instance;
- on a Ray session the cell did not start, a request it cannot meet fails after the ready timeout with the request
  and the cluster's GPUs, where it used to wait forever in `ray.get` (run in a child process with a timeout, so a
  regression fails instead of hanging the suite).
Two replicas on one real GPU, or a GPU replica's memory, only a GPU can show.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from esbench.backends.hf import HFBackend
from esbench.es.population import Rollout
from esbench.methods import es_ray
from esbench.methods.es_ray import RayPopulation, driver_gpu
from esbench.models import load_model

SPEC = Rollout(population=4, antithetic=False, sigma=0.05, temperature=0.0, max_new_tokens=8, common_sampling_seed=True)


@pytest.fixture
def tiny_backend(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir))
    return HFBackend(loaded.model, loaded.tokenizer, device="cpu", cpu_threads=1)


@pytest.fixture
def driver_on_gpu_0_of_3(monkeypatch):
    """The driver's replica 'on GPU 0' of a 3-GPU machine: workers ask for a GPU each, and the private instance may
    give them GPUs 1 and 2 (the real `driver_gpu` is tested below)."""
    monkeypatch.setattr(es_ray, "worker_gpus", lambda backend: 1.0)
    monkeypatch.setattr(es_ray, "driver_gpu", lambda device: ("0", ["1", "2"]))
    monkeypatch.setenv("ESBENCH_RAY_READY_TIMEOUT_S", "30")  # a regression ends instead of waiting forever


def test_workers_get_gpus_of_their_own_never_the_drivers(tiny_backend, ray_env, tmp_path, driver_on_gpu_0_of_3):
    import ray

    editor = tiny_backend.weight_editor()
    pop = RayPopulation(tiny_backend, editor, SPEC, 0, 2, tmp_path)
    try:
        assert ray.cluster_resources().get("GPU") == 2  # GPU 0 is the driver's, outside Ray's pool
        seen = sorted(p["cuda_visible_devices"] for p in pop.placement)
        assert seen == ["1", "2"] and sorted(g for p in pop.placement for g in p["gpus"]) == ["1", "2"]
        assert os.environ.get("CUDA_VISIBLE_DEVICES") is None  # the driver's own variable is left as it was
    finally:
        pop.close()


def test_fewer_free_gpus_than_workers_fails_at_once_naming_them(tiny_backend, ray_env, tmp_path, driver_on_gpu_0_of_3):
    editor = tiny_backend.weight_editor()
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        RayPopulation(tiny_backend, editor, SPEC, 0, 3, tmp_path)
    assert time.monotonic() - t0 < 25  # no wait for the ready timeout: a private instance never grows
    assert str(e.value).startswith("--es-workers 3 asks Ray for 3 GPUs (1 per worker) besides the driver's (GPU 0)")
    assert "this machine has 2 other GPUs" in str(e.value)


CHILD = """
import os, sys, time
os.environ.update(RAY_AUTH_MODE="disabled", ESBENCH_RAY_READY_TIMEOUT_S="2")
import ray, torch
from esbench.backends.hf import HFBackend
from esbench.methods import es_ray
from esbench.es.population import Rollout
from esbench.methods.es_ray import RayPopulation
from esbench.models import load_model
from esbench.ray_session import fresh_temp_dir

torch.set_num_threads(1)
es_ray.worker_gpus = lambda backend: 1.0  # the driver 'on a GPU' of a 1-GPU Ray session it did not start
loaded = load_model(sys.argv[1])
backend = HFBackend(loaded.model, loaded.tokenizer, device="cpu", cpu_threads=1)
spec = Rollout(population=4, antithetic=False, sigma=0.05, temperature=0.0, max_new_tokens=8, common_sampling_seed=True)
ray.init(address="local", num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False,
         _temp_dir=fresh_temp_dir())
t0 = time.monotonic()
try:
    RayPopulation(backend, backend.weight_editor(), spec, 0, 2, sys.argv[2])
    print("NO ERROR")
except RuntimeError as e:
    print(f"ERROR after {time.monotonic() - t0:.1f} s: {e}")
print("placement groups left:", sum(g["state"] != "REMOVED" for g in ray.util.placement_group_table().values()))
ray.shutdown()
"""


def test_an_unmeetable_request_on_a_session_it_did_not_start_fails_after_the_ready_timeout(tiny_model_dir, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ESBENCH_RAY_ADDRESS", None)
    cmd = [sys.executable, "-c", textwrap.dedent(CHILD), str(tiny_model_dir), str(tmp_path)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env).stdout
    except subprocess.TimeoutExpired:
        pytest.fail("RayPopulation waited forever for GPUs the Ray session does not have")
    assert "ERROR after" in out, out
    line = next(ln for ln in out.splitlines() if ln.startswith("ERROR after"))
    assert float(line.split()[2]) < 30
    assert "--es-workers 2 asks Ray for 2 GPUs (1 per worker) besides the driver's" in line
    assert "not reserved within 2 s (ESBENCH_RAY_READY_TIMEOUT_S)" in line and "the Ray cluster has 1 GPUs" in line
    assert "placement groups left: 0" in out  # the unmet reservation was withdrawn


def test_driver_gpu_names_the_drivers_gpu_and_the_others(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert driver_gpu(torch.device("cuda", 0)) == ("0", ["1", "2"])
    assert driver_gpu(torch.device("cuda")) == ("1", ["0", "2"])  # no index: the current device
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6,7")  # indices are positions in the visible list
    assert driver_gpu(torch.device("cuda", 2)) == ("7", ["4", "6"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aa, GPU-bb")
    assert driver_gpu(torch.device("cuda", 0)) == ("GPU-aa", ["GPU-bb"])
