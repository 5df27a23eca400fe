"""`esbench doctor`: on this CPU it runs the CPU subset of every check and exits 0; `--device cuda` here stops at
once with a one-line reason; a failing check is a row with its fix (exit 1), and what needs it is skipped; a suite
whose pinned model is not cached fails the cache check with `esbench prefetch SUITE`.

What only a GPU can show (the driver and free-memory rows passing, CUDA generation, TRL's colocated vLLM, the table
noise CPU against CUDA) runs in `scripts/gpu-check.sh` and the gpu-reproduce workflow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from esbench import doctor, doctor_checks, doctor_env
from esbench.cli import main

GPU_PATHS = [
    "tiny model",
    "HF generation",
    "vLLM engine start",
    "perturb, restore, checksum",
    "paper-bf16 ES update",
    "GRPO step (TRL)",
    "table noise CPU vs device",
    "bounded scoring memory",
]


def _esbench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "esbench.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "250", **(env or {})},
        timeout=600,
    )


def test_doctor_on_this_cpu_prints_its_table_and_exits_0(tmp_path, tiny_model_dir):
    out = _esbench("doctor", "--json", str(tmp_path / "doctor.json"))
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "Traceback" not in text
    report = json.loads((tmp_path / "doctor.json").read_text())
    rows = {r["check"]: r for r in report["rows"]}
    assert report["device"] == "cpu" and report["ok"] is True
    assert list(rows)[:4] == ["driver", "torch sees the GPU", "free GPU memory", "vllm import and ops"]
    assert [n for n in rows if n in GPU_PATHS] == GPU_PATHS
    for name in GPU_PATHS:  # the CPU subset really ran, each path on the CPU
        assert rows[name]["result"] == "ok", rows[name]
        assert name in text  # and is in the printed table
    assert rows["free GPU memory"] == {**rows["free GPU memory"], "result": "skip", "detail": "needs a GPU"}
    assert (
        rows["vllm import and ops"]["result"] == "ok" and "compiled ops loaded" in rows["vllm import and ops"]["detail"]
    )
    assert "CPU only" in rows["table noise CPU vs device"]["detail"]  # honest: no CPU-vs-GPU comparison was made
    assert "HF generation" in rows["GRPO step (TRL)"]["detail"]  # colocated vLLM needs a GPU
    assert "on vllm" in rows["paper-bf16 ES update"]["detail"]
    assert "bounded" in rows["bounded scoring memory"]["detail"]
    assert report["gpu"]["cuda_available"] is False


def test_device_cuda_without_a_gpu_exits_nonzero_with_one_line_and_no_traceback(tmp_path):
    out = _esbench("doctor", "--device", "cuda", "--json", str(tmp_path / "d.json"))
    assert out.returncode != 0
    assert "Traceback" not in out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("esbench doctor: --device cuda: "), out.stderr
    assert "torch" in lines[0] and "GPU" in lines[0]
    report = json.loads((tmp_path / "d.json").read_text())
    assert report["ok"] is False and report["reason"] in lines[0]


def test_device_cuda_with_a_driver_too_old_for_torch_names_both_and_the_fix(monkeypatch, capsys):
    """A host whose GPU torch cannot use (CUDA detection monkeypatched): the reason names driver, CUDA and fix."""
    import torch

    from esbench import gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(gpu, "host_has_nvidia_gpu", lambda: True)
    monkeypatch.setattr(gpu, "driver_version", lambda: "550.54.15")
    monkeypatch.setattr(gpu, "torch_cuda_build", lambda: "13.0")
    assert main(["doctor", "--device", "cuda"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "550.54.15" in err[0] and "CUDA 13.0" in err[0] and ">= 580" in err[0] and "Fix:" in err[0]


def test_a_failing_check_makes_a_row_with_its_fix_skips_what_needs_it_and_exits_1(monkeypatch, tmp_path, capsys):
    def broken(state):
        raise RuntimeError("engine exploded\nsecond line of a long message")

    def never(state):
        raise AssertionError("a check whose prerequisite failed must not run")

    plan = [
        doctor_checks.Check("driver", doctor_env.check_driver, "unused"),
        doctor_checks.Check("vLLM engine start", broken, "set ESBENCH_VLLM_MEMORY lower"),
        doctor_checks.Check("perturb, restore, checksum", never, "unused", ("vLLM engine start",)),
    ]
    monkeypatch.setattr(doctor, "checks", lambda suite=None: plan)
    monkeypatch.setenv("COLUMNS", "250")  # rich folds long cells at the terminal width
    assert main(["doctor", "--device", "cpu", "--json", str(tmp_path / "d.json")]) == 1
    shown = capsys.readouterr().out
    assert "Traceback" not in shown
    assert "set ESBENCH_VLLM_MEMORY lower" in shown and "engine exploded" in shown
    rows = {r["check"]: r for r in json.loads((tmp_path / "d.json").read_text())["rows"]}
    assert rows["vLLM engine start"]["result"] == "fail"
    assert rows["vLLM engine start"]["detail"] == "RuntimeError: engine exploded second line of a long message"
    assert rows["vLLM engine start"]["fix"] == "set ESBENCH_VLLM_MEMORY lower"
    assert rows["perturb, restore, checksum"]["result"] == "skip"
    assert rows["perturb, restore, checksum"]["detail"] == "needs vLLM engine start (fail)"
    assert rows["driver"]["result"] == "skip"  # no NVIDIA GPU here: not a failure on the CPU


SUITE = """\
name: needs-a-hub-model
models:
  qwen: {{path: Qwen/Qwen2.5-0.5B-Instruct, revision: {rev}}}
methods:
  base: {{}}
seeds: [0]
eval:
  tasks: [tiny_arith]
  limit: 2
  n: 1
  k: [1]
"""


def test_a_suite_with_an_uncached_pinned_model_fails_the_cache_check_with_the_prefetch_fix(
    monkeypatch, tmp_path, capsys
):
    suite = tmp_path / "hub.yaml"
    suite.write_text(SUITE.format(rev="7ae557604adf67be50417f59c2c2f167def9a775"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    monkeypatch.setenv("COLUMNS", "250")
    real = doctor.checks
    monkeypatch.setattr(doctor, "checks", lambda s=None: [c for c in real(s) if c.name == "suite artefacts cached"])
    assert main(["doctor", str(suite), "--device", "cpu", "--json", str(tmp_path / "d.json")]) == 1
    (row,) = json.loads((tmp_path / "d.json").read_text())["rows"]
    assert row["result"] == "fail"
    assert "Qwen/Qwen2.5-0.5B-Instruct@7ae557604adf" in row["detail"] and "not in the local cache" in row["detail"]
    assert row["fix"].startswith(f"esbench prefetch {suite}")
    assert "esbench prefetch" in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["builtin", "invalid"])
def test_the_cache_check_passes_a_suite_without_hub_artefacts_and_fails_an_invalid_one(kind, tmp_path):
    suite = tmp_path / "s.yaml"
    text = SUITE.replace("qwen: {{path: Qwen/Qwen2.5-0.5B-Instruct, revision: {rev}}}", "tiny: {{path: builtin:tiny}}")
    suite.write_text(text.format() if kind == "builtin" else "name: x\nmodels: 3\n")
    state = doctor_checks.State(device="cpu", suite=str(suite))
    try:
        (row,) = doctor.run_checks(state, [c for c in doctor.checks(str(suite)) if c.name == "suite artefacts cached"])
    finally:
        state.close()
    if kind == "builtin":
        assert row.result == "ok" and "nothing to fetch" in row.detail
    else:
        assert row.result == "fail" and row.fix == f"esbench validate {suite}"
