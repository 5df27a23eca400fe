"""Run cells on Slurm through submitit: one job array per `esbench run`, one array task per pending cell.

Each task calls `run_cell_file` (what `esbench run-cell CELL.json --out DIR` runs) on the cell's frozen `cell.json`,
so the cell's files are those of a local run. The output folder must be on a file system the compute nodes share
with the login node, and the job runs the same Python (`sys.executable`) with the submitting shell's environment
(sbatch exports it), so HF_HOME, HF_TOKEN and the like carry over. submitit's own files (the pickled task, sbatch
script, stdout/stderr) go to `<out>/<suite>/.submitit/<job id>/`; each cell's library logs to its `esbench.log`.

Settings (environment variables, read at submission):

| variable | sbatch option | default |
|---|---|---|
| `ESBENCH_SLURM_PARTITION` | `--partition` | the cluster's default |
| `ESBENCH_SLURM_ACCOUNT` | `--account` | none |
| `ESBENCH_SLURM_TIME_MIN` | `--time` (minutes, per task) | 1440 |
| `ESBENCH_SLURM_GPUS_PER_TASK` | `--gpus-per-node` (one task per job) | GPU cells: their largest need; else 0 |
| `ESBENCH_SLURM_GRES` | `--gres` (e.g. `gpu:a100:1`), instead of `--gpus-per-node` | none |
| `ESBENCH_SLURM_CPUS_PER_TASK` | `--cpus-per-task` | GPU cells: 8 per GPU; else the largest `backend.cpu_threads` |
| `ESBENCH_SLURM_MEM_GB` | `--mem` | GPU cells: 64 per GPU, more for large models; else the partition's |
| `ESBENCH_SUBMITIT_CLUSTER` | | `slurm` when `sbatch` is on PATH |

A GPU cell is decided on the login node, which usually has no GPU, from the spec alone (`wants_gpu`):
`backend.device: cuda` is one, `cpu` is not, and `auto` is one unless the model is one of esbench's CPU models
(`builtin:tiny`, a `pkg:` GGUF): every paper suite's cells ask for a GPU, the tiny suites' for none. It needs one
GPU, or W + 1 with `--es-workers` W for a cell with an ES stage (`executors.gpus_needed`). Its CPU and memory
defaults are sized for a vLLM cell: 8 CPUs per GPU (tokenisation, the engine's scheduler, data loading and the
verifiers run on the host), and 64 GB per GPU, raised where the model's weights are already on this machine (a
local folder, or the HF cache after `esbench prefetch`) to `weights × (engines + 3) + 16 GB`: loading the model,
the fp32 master and a checkpoint of paper-bf16's simulated engines all pass through host memory (a checkpoint of
Qwen2.5-7B's 8 engines holds 7 bf16 copies, about 107 GB). Qwen2.5-1.5B (3.1 GB of weights) gets 64 GB; 7B
(15.2 GB) with 8 engines, 184 GB.

`ESBENCH_SUBMITIT_CLUSTER=local` runs the tasks as subprocesses on this machine (submitit's LocalExecutor, with its
signal handling and requeue), `debug` runs them in this process (and drops into pdb on an error): both for testing.

All tasks of one array get the same resources, so a suite mixing GPU and CPU cells is best run in two passes
(`--only`). A typical university cluster, GPU partition, from a login node:

    export ESBENCH_SLURM_PARTITION=gpu ESBENCH_SLURM_ACCOUNT=my-lab ESBENCH_SLURM_TIME_MIN=720
    export HF_HOME=/scratch/$USER/hf                    # on the shared file system
    tmux new -s esbench 'esbench run suites/paper.yaml --out /scratch/$USER/runs --executor slurm'

The driver waits for every task (keep it in tmux/screen). If it is stopped, the Slurm jobs keep running; run
`esbench run` again once they are over (`squeue --me`): it skips the cells whose record exists and resumes the rest.
(A cell still running in an old job makes its new task wait for the lease, then fail with CellBusy.)

Preemption and time-outs: the submitted callable is `RunCell`, whose `checkpoint` returns a `DelayedSubmission` of
itself with the same arguments. When submitit's signal arrives (USR2, sent `signal_delay_s` = 90 s before the time
limit and, where the cluster is configured to send it, on preemption), submitit calls `checkpoint`, pickles the
result and requeues the task; the re-run calls `run-cell` again, which resumes from the cell's checkpoints under
`work/` (ES: every `checkpoint_every` updates; GRPO: the trainer's checkpoints). The signal unwinds the run with
SystemExit, so the cell's Lease is released cleanly. A task killed without a signal (node failure) and re-run by
Slurm or by a later `esbench run` resumes the same way once its lease expires (`run_cell_remote` waits for it). A
task that times out more than submitit's `max_num_timeout` (3) times is reported failed.

`jobs` (the local executor's concurrency) is accepted and ignored: Slurm decides how many tasks run at once.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from esbench.executors import Failure, Handle, gpus_needed, write_cell
from esbench.executors.remote import execution_env, run_cell_remote
from esbench.spec import Cell

log = logging.getLogger(__name__)

DEFAULT_TIME_MIN = 1440
CPUS_PER_GPU = 8  # a GPU cell's host work: tokenisation, vLLM's scheduler, verifiers
MEM_GB_PER_GPU = 64  # enough for a 1.5B-3B cell; larger local weights raise it (`mem_gb_for`)
CPU_MODELS = ("builtin:", "pkg:")  # esbench's embedded tiny model and packaged GGUFs: CPU-sized
POLL_S = {"slurm": 10.0}  # between status checks (the result files; sacct at most once a minute, by submitit)


class RunCell:
    """The submitted callable: run one cell folder. Checkpointable, so submitit requeues it on preemption/time-out."""

    def __call__(self, cell_json: str, directory: str, env: dict[str, str] | None = None) -> None:
        run_cell_remote(cell_json, directory, env=env)

    def checkpoint(self, *args: Any, **kwargs: Any):
        """Requeue the same call: `run-cell` resumes from the cell's own checkpoints, so nothing else is saved."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)


def _int_env(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def cluster() -> str:
    """ESBENCH_SUBMITIT_CLUSTER, or `slurm` when sbatch is on PATH."""
    name = os.environ.get("ESBENCH_SUBMITIT_CLUSTER", "").strip()
    if name:
        return name
    if shutil.which("sbatch") is None:
        raise RuntimeError(
            "--executor slurm: no `sbatch` on PATH (run from a Slurm login node, or set ESBENCH_SUBMITIT_CLUSTER=local "
            "to run the jobs as local subprocesses)"
        )
    return "slurm"


def wants_gpu(spec: dict[str, Any]) -> bool:
    """Whether a cell asks Slurm for GPUs (module docstring): `cuda`, or `auto` on a model that is not CPU-sized."""
    device = (spec.get("backend") or {}).get("device", "auto")
    if device != "auto":
        return device == "cuda"
    return not str((spec.get("model") or {}).get("path", "")).startswith(CPU_MODELS)


def weights_bytes(model: dict[str, Any]) -> int | None:
    """The size of the model's weight files where they are on this machine (a local folder, or the HF cache's
    snapshot of the pinned revision), else None. Read offline: nothing is downloaded."""
    path = str(model.get("path", ""))
    folder = Path(os.path.expanduser(path))
    if not folder.is_dir():
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(path, "config.json", revision=model.get("revision"))
        except Exception:  # not a hub id, or no cache
            return None
        if not isinstance(found, str):
            return None
        folder = Path(found).parent
    sizes = [f.stat().st_size for pattern in ("*.safetensors", "*.bin") for f in folder.glob(pattern)]
    return sum(sizes) or None


def mem_gb_for(spec: dict[str, Any], gpus: int) -> int:
    """Host memory for a GPU cell (module docstring): 64 GB per GPU, or weights × (engines + 3) + 16 GB."""
    size = weights_bytes(spec.get("model") or {})
    if size is None:
        return MEM_GB_PER_GPU * gpus
    method = spec.get("method") or {}
    stages = (method.get("config") or {}).get("stages") or [method]
    engines = max(int((st.get("config") or {}).get("engines", 1)) for st in stages)
    return max(MEM_GB_PER_GPU * gpus, math.ceil(size / 1e9 * (engines + 3)) + 16)


def parameters(cells: list[Cell]) -> dict[str, Any]:
    """submitit AutoExecutor parameters from the ESBENCH_SLURM_* environment (module docstring) and the cells."""
    backends = [c.spec.get("backend") or {} for c in cells]
    gpu_cells = [c.spec for c in cells if wants_gpu(c.spec)]
    need = max((gpus_needed(spec) for spec in gpu_cells), default=0)
    gpus = _int_env("ESBENCH_SLURM_GPUS_PER_TASK")
    gpus = need if gpus is None else gpus
    cpus = _int_env("ESBENCH_SLURM_CPUS_PER_TASK")
    threads = max(int(b.get("cpu_threads", 1)) for b in backends)
    params: dict[str, Any] = {
        "name": "esbench",
        "timeout_min": _int_env("ESBENCH_SLURM_TIME_MIN") or DEFAULT_TIME_MIN,
        "tasks_per_node": 1,
        "nodes": 1,
        "gpus_per_node": gpus,
        "cpus_per_task": cpus if cpus is not None else max(threads, CPUS_PER_GPU * gpus),
    }
    if gres := os.environ.get("ESBENCH_SLURM_GRES", "").strip():  # clusters that count GPUs as generic resources
        params.pop("gpus_per_node")
        params["slurm_gres"] = gres
    mem = _int_env("ESBENCH_SLURM_MEM_GB")
    if mem is None and gpus and gpu_cells:
        mem = max(mem_gb_for(spec, gpus) for spec in gpu_cells)
    if mem is not None:
        params["mem_gb"] = mem
    if partition := os.environ.get("ESBENCH_SLURM_PARTITION", "").strip():
        params["slurm_partition"] = partition
    if account := os.environ.get("ESBENCH_SLURM_ACCOUNT", "").strip():
        params["slurm_account"] = account
    return params


def _describe(error: BaseException) -> tuple[str, str]:
    """("Type: message", detail). submitit's FailedJobError carries the task's traceback as text; the lines after the
    last traceback's frames are the cell's `module.Type: message`."""
    detail = str(error)
    lines = detail.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if starts:
        rest = lines[starts[-1] + 1 :]
        head = next((i for i, line in enumerate(rest) if line and not line[0].isspace()), len(rest))
        tail = rest[head:]
        tail = tail[: next((i for i, line in enumerate(tail) if line.startswith("-" * 22)), len(tail))]
        if tail:
            kind, sep, message = tail[0].partition(": ")
            text = "\n".join([message, *tail[1:]]).strip() if sep else ""
            return f"{kind.rsplit('.', 1)[-1]}: {text}", detail
    first = next((x for x in lines if x.strip()), "")
    return f"{type(error).__name__}: {first}", detail


class SlurmExecutor:
    """One submitit job array per submit, one task per cell (module docstring)."""

    def __init__(self, jobs: int = 1):
        self.message: str | None = None  # `jobs` is the local executor's; Slurm decides how many tasks run at once
        self.name = ""
        self._jobs: list[Any] = []

    def submit(self, cells: list[Cell], dir_of: Callable[[Cell], Path]) -> list[Handle]:
        import submitit

        self.name = cluster()
        handles = [Handle(cell, write_cell(cell, dir_of)) for cell in cells]
        executor = submitit.AutoExecutor(folder=handles[0].cd.path.parent / ".submitit" / "%j", cluster=self.name)
        executor.update_parameters(**parameters(cells))
        env = execution_env()
        self._jobs = executor.map_array(
            RunCell(), [str(h.cd.cell_json) for h in handles], [str(h.cd.path) for h in handles], [env for _ in handles]
        )
        for h, job in zip(handles, self._jobs, strict=True):
            h.ref = job
        ids = sorted({str(j.job_id).split("_")[0] for j in self._jobs})
        logs = handles[0].cd.path.parent / ".submitit"
        self.message = f"submitted {len(handles)} cells to {self.name} (job {', '.join(ids)}; submitit logs: {logs})"
        return handles

    def wait(self, handles: list[Handle], timeout: float, refresh) -> list[tuple[Handle, Failure | None]]:
        deadline = time.monotonic() + timeout
        while True:
            finished = [h for h in handles if h.ref.done()]
            if finished or time.monotonic() >= deadline:
                break
            time.sleep(min(POLL_S.get(self.name, 0.5), max(deadline - time.monotonic(), 0.0)))
        out: list[tuple[Handle, Failure | None]] = []
        for h in finished:
            try:
                error = h.ref.exception()
            except Exception as e:  # the task never produced a result (killed, cancelled)
                error = e
            if error is None:
                out.append((h, None))
            else:
                summary, detail = _describe(error)
                out.append((h, Failure(summary, f"job {h.ref.job_id}\n{detail}")))
        return out

    def close(self) -> None:
        if self.name != "slurm":  # local subprocesses must not outlive the driver; Slurm jobs carry on
            for job in self._jobs:
                if not job.done():
                    job.cancel(check=False)
