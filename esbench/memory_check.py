"""The memory plan checked against what a run holds on the CPU (issue 25's bar: within 15 %).

Above `esbench.memory` in the layers: it trains through the method recipes on the HF backend, which the plan
itself must not import (the backends read their engine shares from it). Used by tests/test_memory.py and
benchmarks/memory_plan.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from esbench.memory import Sizing, cpu_peak, es_phase, grpo_phase, shape_from_config

# Small ES and GRPO runs whose CPU peaks check the plan (tests/test_memory.py, benchmarks/memory_plan.py).
CHECK_RUNS: dict[str, dict[str, Any]] = {
    "es": {"population": 4, "batch_size": 8, "max_new_tokens": 32, "sigma": 0.01, "alpha": 0.005},
    "grpo": {
        "prompts_per_rollout": 4,
        "num_generations": 4,
        "ppo_minibatch_prompts": 4,
        "micro_batch": 4,
        "max_completion_length": 32,
    },
}


def measured_against_plan(model: Any, tokenizer: Any, kind: str, settings: dict[str, Any], workdir: Path) -> dict:
    """Train `kind` ("es" or "grpo") for 2 updates on tiny_arith on the HF backend on the CPU under `cpu_peak`, and
    size the same run with the plan: the measured and predicted peaks, in bytes, and the plan's items."""
    from esbench.backends.hf import HFBackend
    from esbench.methods import TrainContext, registry
    from esbench.rewards import Reward
    from esbench.tasks import get_task

    task = get_task("tiny_arith")
    rows = task.rows("train", 16)
    cls = registry.get(kind)
    weights = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())

    def train() -> None:
        backend = HFBackend(model, tokenizer, device="cpu")
        log = Path(workdir) / "train.jsonl"
        ctx = TrainContext(seed=0, workdir=Path(workdir), log_path=log, prompt=task.prompt, backend=backend)
        cls().train(rows, Reward(task), 2, cls.Config(**settings), ctx)

    _, above = cpu_peak(train)
    prompt = max(len(tokenizer(task.prompt(r))["input_ids"]) for r in rows)
    new = settings.get("max_new_tokens") or settings["max_completion_length"]
    dtype_bytes = next(iter(model.parameters())).element_size()
    s = Sizing(shape_from_config(model.config), dtype_bytes, "hf", device_memory=0, sequence=prompt + new, gpu=False)
    phase = es_phase(s, settings, 1) if kind == "es" else grpo_phase(s, settings, 1, False)
    measured = above + weights  # the weights were allocated before the measurement started
    return {
        "method": kind,
        "params": s.p,
        "measured_bytes": measured,
        "predicted_bytes": phase.total,
        "predicted_over_measured": phase.total / measured,
        "items_mib": {i.name: round(i.bytes / 2**20, 2) for i in phase.items},
    }
