"""The memory plan (`esbench.memory`) against measured peaks, for ES and GRPO, printed as JSON.

Each run trains 2 updates on tiny_arith with the real recipes (`es`; `grpo` through TRL) on the HF backend on the
CPU, under `esbench.memory.cpu_peak` (the peak bytes torch's allocator holds, from the profiler's memory events),
and the plan sizes the same run from the model's config alone. `predicted_over_measured` is their ratio, measured
side by side in one process (issue 25's bar: within 15 %). The profiler slows the runs several times.

    python benchmarks/memory_plan.py                          # tiny and llama-100m, ES and GRPO
    python benchmarks/memory_plan.py --model tiny --method es
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load  # noqa: E402

from esbench import memory_check  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="+", default=["tiny", "llama-100m"])
    ap.add_argument("--method", nargs="+", default=list(memory_check.CHECK_RUNS))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name in args.model:
        for kind in args.method:
            model, tokenizer, _ = load(name, "cpu", "float32")
            with tempfile.TemporaryDirectory() as work:
                settings = memory_check.CHECK_RUNS[kind]
                row = memory_check.measured_against_plan(model, tokenizer, kind, settings, Path(work))
            rows.append({"model": name, **row, "settings": settings})
            del model
    worst = max(abs(r["predicted_over_measured"] - 1) for r in rows)
    print(json.dumps({"runs": rows, "worst_relative_error": worst}, indent=2))


if __name__ == "__main__":
    main()
