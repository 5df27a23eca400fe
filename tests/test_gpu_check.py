"""`scripts/gpu-check.sh` and the gpu-reproduce workflow, up to the GPU boundary.

The script's CPU mode (`ESBENCH_GPU_CHECK_DEVICE=cpu`) runs the same steps as on a GPU box with tiny settings; here a
reduced run (the cells and the CUDA noise test, which must report itself skipped, not passed) checks its JSON. The
full run, on one H200 in at most 8 minutes, needs a GPU: its JSON goes in the GPU note."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import yaml

SCRIPT = "scripts/gpu-check.sh"


def test_the_script_parses_and_passes_shellcheck_where_installed(repo):
    subprocess.run(["bash", "-n", SCRIPT], cwd=repo, check=True)
    if shutil.which("shellcheck"):  # not installed here; CI images that have it lint the script too
        subprocess.run(["shellcheck", SCRIPT], cwd=repo, check=True)


def test_the_wheelhouse_holds_what_the_hf_path_imports_and_never_torch_or_transformers(repo):
    out = subprocess.run(
        ["bash", SCRIPT, "--requirements"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    pins = dict(line.split("==") for line in out.stdout.split())
    assert {"lm-eval", "trl", "datasets", "accelerate", "setuptools"} <= pins.keys()
    from importlib.metadata import version

    assert pins["trl"] == version("trl") and pins["lm-eval"] == version("lm-eval")  # this checkout's own pins
    # the GPU box keeps its own torch and transformers, and everything they depend on
    assert not {"torch", "transformers", "tokenizers", "safetensors", "numpy", "huggingface-hub"} & pins.keys()
    assert not [p for p in pins if p.startswith(("nvidia-", "triton", "vllm"))]


def test_cpu_mode_runs_the_cells_and_reports_the_cuda_test_as_skipped(repo, tiny_model_dir, tmp_path):
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "ESBENCH_GPU_CHECK_DEVICE": "cpu",
        "ESBENCH_GPU_CHECK_STEPS": "cells noise",
        "OMP_NUM_THREADS": "1",
        "TMPDIR": str(tmp_path),
    }
    out = subprocess.run(["bash", SCRIPT, "--skip-install"], cwd=repo, capture_output=True, text=True, env=env)
    summary = json.loads(out.stdout)
    assert out.returncode == 0, (summary, out.stderr[-2000:])
    assert summary["device"] == "cpu" and summary["ok"] is True
    assert set(summary["steps"]) == {"install", "cells", "noise"}
    cells = summary["steps"]["cells"]
    assert cells["status"] == "ok" and cells["seconds"] > 0
    assert sorted(name.split("/")[2] for name in cells["records"]) == ["base", "es", "grpo"]
    assert all(r["device"] == "cpu" and 0 <= r["pass@1"] <= 1 for r in cells["records"].values()), cells
    assert summary["steps"]["noise"] == {**summary["steps"]["noise"], "status": "skip", "reason": "needs a CUDA GPU"}
    assert summary["torch"] and summary["transformers"]
    assert not list(tmp_path.glob("esbench-gpu-check.*")), "the work folder is removed"


def test_on_a_gpu_box_a_skipped_cuda_test_is_a_failure_with_its_log_tail(repo, tmp_path):
    """In cuda mode the CUDA noise test must run: skipped (torch sees no GPU, as here) fails the summary."""
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "ESBENCH_GPU_CHECK_DEVICE": "cuda",
        "ESBENCH_GPU_CHECK_STEPS": "noise",
        "TMPDIR": str(tmp_path),
    }
    out = subprocess.run(["bash", SCRIPT, "--skip-install"], cwd=repo, capture_output=True, text=True, env=env)
    summary = json.loads(out.stdout)
    assert out.returncode == 1 and summary["ok"] is False
    noise = summary["steps"]["noise"]
    assert noise["status"] == "fail" and "torch sees no GPU" in noise["reason"] and noise["log_tail"]


def _workflow(repo) -> dict:
    return yaml.safe_load((repo / ".github/workflows/gpu-reproduce.yml").read_text())


def test_the_gpu_workflow_never_runs_on_every_push_and_cancels_superseded_runs(repo):
    wf = _workflow(repo)
    on = wf[True]  # YAML 1.1 reads the key `on` as a boolean
    assert "workflow_dispatch" in on and "pull_request" not in on and "pull_request_target" not in on
    assert "branches" not in (on.get("push") or {}), "a push to main must not queue a 12-hour GPU job"
    assert on["push"]["tags"] and on["schedule"]
    assert wf["concurrency"]["cancel-in-progress"] is True


def test_the_gpu_workflow_uses_python_3_11_keeps_the_attestations_and_runs_doctor_first(repo):
    steps = _workflow(repo)["jobs"]["reproduce"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    setup = steps[uses.index("actions/setup-python")]
    assert setup["with"]["python-version"] == "3.11"
    first_python = next(i for i, s in enumerate(steps) if "python" in s.get("run", "") or "pip" in s.get("run", ""))
    assert uses.index("actions/setup-python") < first_python
    build = steps[uses.index("docker/build-push-action")]["with"]
    assert build.get("push") is True and "load" not in build, "load: true drops the SBOM and provenance"
    assert build["sbom"] is True and build["provenance"].startswith("mode=")
    runs = [s.get("run", "") for s in steps]
    doctor = next(i for i, r in enumerate(runs) if "doctor" in r)
    smoke = next(i for i, r in enumerate(runs) if "esbench run " in r)
    assert doctor < smoke and "--device cuda" in runs[doctor] and "--json /out/doctor.json" in runs[doctor]
    upload = steps[doctor + 1]
    assert upload["uses"].startswith("actions/upload-artifact@") and upload["if"] == "always()"
    assert upload["with"]["path"] == "artifacts/doctor.json"


def test_actionlint_accepts_the_gpu_workflow(repo):
    actionlint = shutil.which("actionlint") or str(repo / ".venv/bin/actionlint")
    subprocess.run([actionlint, ".github/workflows/gpu-reproduce.yml"], cwd=repo, check=True)
