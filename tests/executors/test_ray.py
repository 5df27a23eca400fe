"""The Ray executor: cells run as Ray tasks on a private local instance produce the local executor's files bit for bit,
a failing cell is reported like the local executor reports it, and a task whose worker dies mid-training is retried
and resumes from the cell's checkpoints to the same record. Nothing of the Ray instance outlives the call."""

from __future__ import annotations

import json
import signal
import threading

from executor_helpers import assert_same_cell, on_model, signal_after_first_checkpoint
from run_helpers import run_with, suite_cells


def test_ray_cells_reproduce_the_local_executor(tmp_path, tiny_model_dir, small_reference, ray_env):
    from esbench.records import cell_dir

    suite, cells = suite_cells(tmp_path)
    assert sorted(c.labels["method"] for c in cells) == ["base", "es"]
    failed, shown = run_with("ray", cells, tmp_path / "ray", suite)
    assert failed == []
    assert len(ray_env) == 1  # one private instance for the whole call
    for c in cells:
        a, b = cell_dir(small_reference, suite, c.id), cell_dir(tmp_path / "ray", suite, c.id)  # local, jobs=1
        assert_same_cell(a, b, train=c.labels["method"] == "es")
        assert json.loads((b / "cell.json").read_text()) == c.to_json()
        assert (b / "esbench.log").exists() and not (b / "error.log").exists()
        assert f"{c.name}: done" in shown
    assert "cells" in shown and "2/2" in shown


def test_ray_reports_failed_and_unschedulable_cells(tmp_path, tiny_model_dir, ray_env):
    from esbench.records import cell_dir
    from esbench.spec import Cell

    suite, cells = suite_cells(tmp_path)
    (base,) = [c for c in cells if c.labels["method"] == "base"]
    broken = on_model(base, tmp_path / "no-such-model")
    greedy = Cell({**base.spec, "backend": {**base.spec["backend"], "cpu_threads": 4096}}, base.labels)
    failed, shown = run_with("ray", [broken, greedy], tmp_path / "ray", suite)
    assert [c.id for c, _ in failed] == [broken.id, greedy.id]
    (_, err_broken), (_, err_greedy) = failed
    kind, _, message = err_broken.partition(": ")
    assert kind.isidentifier() and "no-such-model" in message
    log = (cell_dir(tmp_path / "ray", suite, broken.id) / "error.log").read_text()
    assert "Traceback" in log and "no-such-model" in log  # the worker's traceback
    assert err_greedy.startswith("RuntimeError: ") and "4096" in err_greedy and "never start" in err_greedy
    assert (cell_dir(tmp_path / "ray", suite, greedy.id) / "error.log").exists()
    assert not (cell_dir(tmp_path / "ray", suite, greedy.id) / "record.json").exists()
    assert "failed" in shown


def test_resources_follow_the_cell_backend():
    from esbench.executors.ray import resources

    spec = {"backend": {"device": "cpu", "cpu_threads": 3}}
    assert resources(spec, cluster_gpus=8) == {"num_cpus": 3, "num_gpus": 0}
    assert resources({"backend": {"device": "cuda", "cpu_threads": 3}}, 0) == {"num_cpus": 1, "num_gpus": 1}
    assert resources({"backend": {"device": "auto", "cpu_threads": 2}}, 0) == {"num_cpus": 2, "num_gpus": 0}
    assert resources({"backend": {"device": "auto", "cpu_threads": 2}}, 1) == {"num_cpus": 1, "num_gpus": 1}


def test_a_grpo_cell_on_several_gpus_holds_them_all(monkeypatch):
    """`--grpo-gpus G`: the cell task launches its G ranks itself, so Ray must give the task G GPUs."""
    from esbench.executors.ray import resources

    monkeypatch.setenv("ESBENCH_GRPO_GPUS", "4")
    grpo = {"backend": {"device": "cuda"}, "method": {"kind": "grpo", "config": {}}}
    es = {"backend": {"device": "cuda"}, "method": {"kind": "es", "config": {}}}
    assert resources(grpo, 8) == {"num_cpus": 1, "num_gpus": 4}
    assert resources(es, 8) == {"num_cpus": 1, "num_gpus": 1}


def test_a_killed_ray_worker_is_retried_and_resumes_from_the_checkpoint(
    tmp_path, tiny_model_dir, checkpointed_es_reference, ray_env
):
    """SIGKILL the worker running an ES cell after its first checkpoint: Ray retries the task on a fresh worker, the
    dead worker's lease is stale (its pid is gone), and the retry resumes from work/ to the uninterrupted record."""
    from esbench.records import CellDir, cell_dir

    suite, cells = suite_cells(tmp_path, budget=4, es_extra=", checkpoint_every: 1")
    (es,) = [c for c in cells if c.labels["method"] == "es"]

    cd = CellDir(cell_dir(tmp_path / "ray", suite, es.id))
    killed: dict = {}
    killer = threading.Thread(target=signal_after_first_checkpoint, args=(cd, signal.SIGKILL, killed), daemon=True)
    killer.start()
    failed, _ = run_with("ray", [es], tmp_path / "ray", suite)
    killer.join(timeout=5)
    assert failed == []
    assert killed.get("step", 0) >= 1 and not killed["record_existed"], killed
    assert_same_cell(cell_dir(checkpointed_es_reference, suite, es.id), cd.path, train=True)  # local, uninterrupted
    assert not cd.work.exists() and not cd.lease.exists()
    runs = [ln for ln in cd.log.read_text().splitlines() if f"cell {cd.path.name}: " in ln]
    assert len(runs) == 2 and "starting" in runs[0] and "resuming from work/" in runs[1], runs
