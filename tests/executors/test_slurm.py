"""The Slurm executor, run through submitit's LocalExecutor (real subprocesses, submitit's own job pickles, signal
handling and requeue): a cell reproduces the local executor's record, and a task preempted mid-training (submitit's
USR2 to the task process, as Slurm sends it) is checkpointed, requeued, and resumes to the uninterrupted record."""

from __future__ import annotations

import signal
import threading

import pytest
from executor_helpers import assert_same_cell, run_with, signal_after_first_checkpoint, suite_cells

SETTINGS = (
    "ESBENCH_SLURM_PARTITION",
    "ESBENCH_SLURM_TIME_MIN",
    "ESBENCH_SLURM_GPUS_PER_TASK",
    "ESBENCH_SLURM_CPUS_PER_TASK",
    "ESBENCH_SLURM_ACCOUNT",
    "ESBENCH_SLURM_MEM_GB",
)


@pytest.fixture
def local_submitit(monkeypatch):
    monkeypatch.setenv("ESBENCH_SUBMITIT_CLUSTER", "local")
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)


def test_submitit_cell_reproduces_the_local_executor(tmp_path, tiny_model_dir, local_submitit):
    from esbench.records import cell_dir

    suite, cells = suite_cells(tmp_path)
    (base,) = [c for c in cells if c.labels["method"] == "base"]
    assert run_with("local", [base], tmp_path / "local", suite)[0] == []
    failed, shown = run_with("slurm", [base], tmp_path / "slurm", suite)
    assert failed == []
    assert "submitted 1 cells to local" in shown and f"{base.name}: done" in shown
    assert_same_cell(cell_dir(tmp_path / "local", suite, base.id), cell_dir(tmp_path / "slurm", suite, base.id))
    outs = list((tmp_path / "slurm" / suite / ".submitit").glob("*/*_log.out"))
    assert len(outs) == 1 and "Job completed successfully" in outs[0].read_text()


def test_a_preempted_task_is_requeued_and_resumes_from_the_checkpoint(tmp_path, tiny_model_dir, local_submitit):
    """USR2 to the task process after the first ES checkpoint of 4: submitit calls `RunCell.checkpoint`, requeues
    (LocalExecutor: exit 144, the controller restarts the task), and the re-run resumes from work/."""
    from esbench.records import CellDir, cell_dir

    suite, cells = suite_cells(tmp_path, budget=4, es_extra=", checkpoint_every: 1")
    (es,) = [c for c in cells if c.labels["method"] == "es"]
    assert run_with("local", [es], tmp_path / "local", suite)[0] == []

    cd = CellDir(cell_dir(tmp_path / "slurm", suite, es.id))
    sent: dict = {}
    preempt = threading.Thread(target=signal_after_first_checkpoint, args=(cd, signal.SIGUSR2, sent), daemon=True)
    preempt.start()
    failed, _ = run_with("slurm", [es], tmp_path / "slurm", suite)
    preempt.join(timeout=5)
    assert failed == []
    assert sent.get("step", 0) >= 1 and not sent["record_existed"], sent

    (out,) = (tmp_path / "slurm" / suite / ".submitit").glob("*/*_log.out")
    text = out.read_text()
    assert "this job is preempted" in text and "Calling checkpoint method" in text and "Requeued job" in text
    assert text.count("Starting with JobEnvironment") == 2 and "Job completed successfully" in text
    runs = [ln for ln in cd.log.read_text().splitlines() if f"cell {cd.path.name}: " in ln]
    assert len(runs) == 2 and "starting" in runs[0] and "resuming from work/" in runs[1], runs
    assert_same_cell(cell_dir(tmp_path / "local", suite, es.id), cd.path, train=True)
    assert not cd.work.exists() and not cd.lease.exists()


def test_checkpoint_requeues_the_same_call():
    from submitit.helpers import DelayedSubmission

    from esbench.executors.slurm import RunCell

    task = RunCell()
    again = task.checkpoint("/x/cell.json", "/x")
    assert isinstance(again, DelayedSubmission)
    assert again.function is task and again.args == ("/x/cell.json", "/x") and again.kwargs == {}


def test_failed_task_is_reported_with_its_traceback(tmp_path, tiny_model_dir, local_submitit):
    from esbench.records import cell_dir
    from esbench.spec import Cell

    suite, cells = suite_cells(tmp_path)
    (base,) = [c for c in cells if c.labels["method"] == "base"]
    broken = Cell({**base.spec, "model": {**base.spec["model"], "path": str(tmp_path / "no-such-model")}}, base.labels)
    failed, shown = run_with("slurm", [broken], tmp_path / "slurm", suite)
    assert [c.id for c, _ in failed] == [broken.id]
    assert failed[0][1].startswith("ValidationError: ") and "no-such-model" in failed[0][1]
    log = (cell_dir(tmp_path / "slurm", suite, broken.id) / "error.log").read_text()
    assert "Traceback (most recent call last)" in log and "no-such-model" in log
    assert "failed" in shown


def test_sbatch_parameters_come_from_the_environment(tmp_path, monkeypatch):
    from esbench.executors.slurm import cluster, parameters

    _, cells = suite_cells(tmp_path)
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert parameters(cells) == {
        "name": "esbench",
        "timeout_min": 1440,
        "tasks_per_node": 1,
        "nodes": 1,
        "gpus_per_node": 0,
        "cpus_per_task": 1,
    }
    for name, value in zip(SETTINGS, ("gpu", "720", "1", "8", "my-lab", "64"), strict=True):
        monkeypatch.setenv(name, value)
    got = parameters(cells)
    assert got["slurm_partition"] == "gpu" and got["slurm_account"] == "my-lab" and got["timeout_min"] == 720
    assert got["gpus_per_node"] == 1 and got["cpus_per_task"] == 8 and got["mem_gb"] == 64
    monkeypatch.setenv("ESBENCH_SLURM_MEM_GB", "lots")
    with pytest.raises(ValueError, match="ESBENCH_SLURM_MEM_GB"):
        parameters(cells)

    monkeypatch.delenv("ESBENCH_SUBMITIT_CLUSTER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    with pytest.raises(RuntimeError, match="sbatch"):
        cluster()
    monkeypatch.setenv("ESBENCH_SUBMITIT_CLUSTER", "debug")
    assert cluster() == "debug"
