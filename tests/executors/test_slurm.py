"""The Slurm executor, run through submitit's LocalExecutor (real subprocesses, submitit's own job pickles, signal
handling and requeue): a cell reproduces the local executor's record, and a task preempted mid-training (submitit's
USR2 to the task process, as Slurm sends it) is checkpointed, requeued, and resumes to the uninterrupted record."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest
from executor_helpers import assert_same_cell, on_model, signal_after_first_checkpoint
from run_helpers import run_with, suite_cells

SETTINGS = (
    "ESBENCH_SLURM_PARTITION",
    "ESBENCH_SLURM_TIME_MIN",
    "ESBENCH_SLURM_GPUS_PER_TASK",
    "ESBENCH_SLURM_CPUS_PER_TASK",
    "ESBENCH_SLURM_ACCOUNT",
    "ESBENCH_SLURM_MEM_GB",
    "ESBENCH_SLURM_GRES",
    "ESBENCH_ES_WORKERS",
)


@pytest.fixture
def local_submitit(monkeypatch):
    monkeypatch.setenv("ESBENCH_SUBMITIT_CLUSTER", "local")
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)


def test_submitit_cell_reproduces_the_local_executor(tmp_path, tiny_model_dir, small_reference, local_submitit):
    from esbench.records import cell_dir

    suite, cells = suite_cells(tmp_path)
    (base,) = [c for c in cells if c.labels["method"] == "base"]
    failed, shown = run_with("slurm", [base], tmp_path / "slurm", suite)
    assert failed == []
    assert "submitted 1 cells to local" in shown and f"{base.name}: done" in shown
    assert_same_cell(cell_dir(small_reference, suite, base.id), cell_dir(tmp_path / "slurm", suite, base.id))
    outs = list((tmp_path / "slurm" / suite / ".submitit").glob("*/*_log.out"))
    assert len(outs) == 1 and "Job completed successfully" in outs[0].read_text()


def test_a_preempted_task_is_requeued_and_resumes_from_the_checkpoint(
    tmp_path, tiny_model_dir, checkpointed_es_reference, local_submitit
):
    """USR2 to the task process after the first ES checkpoint of 4: submitit calls `RunCell.checkpoint`, requeues
    (LocalExecutor: exit 144, the controller restarts the task), and the re-run resumes from work/."""
    from esbench.records import CellDir, cell_dir

    suite, cells = suite_cells(tmp_path, budget=4, es_extra=", checkpoint_every: 1")
    (es,) = [c for c in cells if c.labels["method"] == "es"]

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
    assert_same_cell(cell_dir(checkpointed_es_reference, suite, es.id), cd.path, train=True)  # local, uninterrupted
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

    suite, cells = suite_cells(tmp_path)
    (base,) = [c for c in cells if c.labels["method"] == "base"]
    broken = on_model(base, tmp_path / "no-such-model")
    failed, shown = run_with("slurm", [broken], tmp_path / "slurm", suite)
    assert [c.id for c, _ in failed] == [broken.id]
    # refused by run-cell's validation of cell.json, before anything loads
    assert failed[0][1].startswith("CellError: ") and "no-such-model" in failed[0][1]
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
    for name, value in zip(SETTINGS[:6], ("gpu", "720", "1", "8", "my-lab", "64"), strict=True):
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


REPO = Path(__file__).resolve().parents[2]


def _sbatch(params: dict, folder: Path, monkeypatch) -> str:
    """The sbatch script submitit writes for these parameters (its Slurm executor, minus the check for srun)."""
    import submitit
    from submitit.slurm import slurm

    monkeypatch.setattr(slurm.SlurmExecutor, "affinity", staticmethod(lambda: 1))
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(**params)  # rejects a name submitit does not know
    return executor._executor._make_submission_file_text("python -m esbench", "uid")


def test_paper_cells_ask_slurm_for_a_gpu_and_the_tiny_cells_do_not(tmp_path, monkeypatch):
    """paper-easy-smoke is `device: auto` on Qwen2.5-1.5B: each task asks for a GPU, 8 CPUs and 64 GB (its weights are
    not on this machine, so the per-GPU default), and 3 GPUs with `--es-workers 2` (the driver's replica and 2
    workers). The tiny suite's cells (`builtin:tiny`, also `auto`) ask for none and keep the partition's memory."""
    from esbench.executors.slurm import parameters
    from esbench.spec import load_suite

    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache: the weights' size is unknown
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    paper = load_suite(REPO / "suites" / "paper-easy-smoke.yaml").cells()
    assert {c.spec["backend"]["device"] for c in paper} == {"auto"}
    got = parameters(paper)
    assert (got["gpus_per_node"], got["cpus_per_task"], got["mem_gb"]) == (1, 8, 64)
    text = _sbatch(got, tmp_path / "sub", monkeypatch)
    for line in ("--gpus-per-node=1", "--cpus-per-task=8", "--mem=64GB", "--time=1440"):
        assert f"#SBATCH {line}\n" in text, text

    es = [c for c in paper if c.labels["method"] in ("es", "grpo-es")]
    monkeypatch.setenv("ESBENCH_ES_WORKERS", "2")
    got = parameters(es)
    assert (got["gpus_per_node"], got["cpus_per_task"], got["mem_gb"]) == (3, 24, 192)  # the driver's + 2
    base = [c for c in paper if c.labels["method"] == "base"]
    assert parameters(base)["gpus_per_node"] == 1  # no ES stage: the workers do not apply

    monkeypatch.delenv("ESBENCH_ES_WORKERS")
    _, tiny = suite_cells(tmp_path)
    got = parameters(tiny)
    assert (got["gpus_per_node"], got["cpus_per_task"], "mem_gb" in got) == (0, 1, False)
    assert "#SBATCH --gpus-per-node=0\n" in _sbatch(got, tmp_path / "sub2", monkeypatch)
    from esbench.spec import Cell

    cuda = [Cell({**c.spec, "backend": {**c.spec["backend"], "device": "cuda"}}, c.labels) for c in tiny]
    assert parameters(cuda)["gpus_per_node"] == 1  # asked for explicitly
    cpu = [Cell({**c.spec, "backend": {**c.spec["backend"], "device": "cpu"}}, c.labels) for c in paper]
    assert parameters(cpu)["gpus_per_node"] == 0

    monkeypatch.setenv("ESBENCH_SLURM_GRES", "gpu:a100:1")
    got = parameters(paper)
    assert got["slurm_gres"] == "gpu:a100:1" and "gpus_per_node" not in got
    assert "#SBATCH --gres=gpu:a100:1\n" in _sbatch(got, tmp_path / "sub3", monkeypatch)


def test_memory_grows_with_local_weights_and_simulated_engines(tmp_path, monkeypatch):
    """A model whose weights are on this machine sizes the task's memory: 15.2 GB of weights (Qwen2.5-7B's) with
    paper-bf16's 8 engines need 15.2 x 11 + 16 = 184 GB; a 1.5B model's 3.1 GB stay at the 64 GB floor."""
    from esbench.executors.slurm import parameters
    from esbench.spec import Cell, load_suite

    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    paper = load_suite(REPO / "suites" / "paper-easy-smoke.yaml").cells()
    (es,) = [c for c in paper if c.labels["method"] == "es"]
    assert es.spec["method"]["config"]["engines"] == 8

    def local_model(name: str, size: int) -> Cell:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        with open(folder / "model.safetensors", "wb") as f:
            f.truncate(size)  # sparse: the size is what counts
        return on_model(es, folder)

    assert parameters([local_model("7b", 15_200_000_000)])["mem_gb"] == 184
    assert parameters([local_model("1.5b", 3_100_000_000)])["mem_gb"] == 64
    monkeypatch.setenv("ESBENCH_SLURM_MEM_GB", "500")
    assert parameters([local_model("7b-again", 15_200_000_000)])["mem_gb"] == 500  # overridable
