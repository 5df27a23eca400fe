"""A cell's memory plan: its phases on the GPUs it is given, vLLM's own start-up check for each engine, the verdict
(fits, why not, the fix) and the tables `esbench plan --gpus N --gpu-memory GiB` prints.

Above the resident set (`esbench.memory`: the model's shape, the items of each phase, the sizing of a cell), which
the vLLM backend and GRPO import for their engine shares: they need none of the planning. `esbench plan` and
`esbench run` (the refusal of a cell predicted not to fit) read the plan from here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from esbench.memory import (
    VLLM_PROFILE_TOKENS,
    GiB,
    Item,
    Phase,
    Shape,
    Sizing,
    engine_share,
    es_phase,
    grpo_phase,
    model_shape,
    serving_phase,
    sizing_for,
    trl_engine_share,
    usable,
)


@dataclass
class CellPlan:
    id: str
    name: str
    phases: list[Phase] = field(default_factory=list)
    gpus: int = 1
    peak: float = 0.0
    fits: bool | None = True
    reason: str = ""
    fix: str = ""
    notes: list[str] = field(default_factory=list)
    sequence: int = 0  # L, the longest sequence the plan sized for

    def row(self) -> dict[str, Any]:
        worst = max(self.phases, key=lambda p: p.total) if self.phases else None
        return {
            "id": self.id,
            "cell": self.name,
            "gpus": self.gpus,
            "peak_gib_per_gpu": round(self.peak / GiB, 1),
            "peak_phase": worst.name if worst else None,
            "sequence_tokens": self.sequence,
            "fits": self.fits,
            "reason": self.reason,
            "fix": self.fix,
            "phases": {
                p.name: {
                    "gpus": p.gpus,
                    "gib": round(p.total / GiB, 2),
                    "items": {i.name + (" (host)" if i.host else ""): round(i.bytes / GiB, 2) for i in p.items},
                }
                for p in self.phases
            },
            "notes": self.notes,
        }


def _stages(method: dict[str, Any]) -> list[dict[str, Any]]:
    if method.get("kind") == "sequence":
        return list((method.get("config") or {}).get("stages") or [])
    return [method]


def cell_phases(spec: dict[str, Any], s: Sizing, workers: int = 1, grpo_gpus: int = 1) -> list[Phase] | None:
    """Every phase of a cell on one GPU each, or None when a stage's method declares no resident set (a plug-in)."""
    phases = [serving_phase(s, spec.get("eval") or {})]
    probe = bool((spec.get("eval") or {}).get("probe"))
    for stage in _stages(spec["method"]):
        kind, cfg = stage.get("kind"), stage.get("config") or {}
        if kind == "es":
            phases.append(es_phase(s, cfg, workers))
        elif kind == "grpo":
            phases.append(grpo_phase(s, cfg, grpo_gpus, probe))
        elif kind == "subtraction":  # generation and scoring around an fp32-master editor (the diagnostic)
            phase = serving_phase(s, {"entropy": True})
            phase.items.insert(1, Item("editor fp32 master", s.weights(4), "weight_editor('fp32-master')"))
            phase.name = "train subtraction"
            phases.append(phase)
        elif kind not in ("base", "checkpoint"):
            return None
    return phases


def engine_check(s: Sizing, share: float, what: str) -> str | None:
    """vLLM's own start-up check: its share must hold the weights, its profile forward and one longest
    sequence's KV cache (`max_model_len`), or it refuses to start."""
    h = s.shape
    need = s.weights() + VLLM_PROFILE_TOKENS * (4 * h.hidden + 2 * h.intermediate) * s.dtype_bytes
    need += s.sequence * h.kv_bytes_per_token(s.dtype_bytes)
    have = share * s.device_memory
    if need > have:
        fix = min(0.95, math.ceil(need / s.device_memory * 100 + 2) / 100)
        env = "ESBENCH_VLLM_MEMORY" if what == "engine" else "ESBENCH_TRL_VLLM_MEMORY"
        return (
            f"{what} share {share:g} holds {have / GiB:.1f} GiB < {need / GiB:.1f} GiB (weights + KV of one "
            f"{s.sequence}-token sequence); set {env}={fix:g}"
        )
    return None


def plan_cell(
    cell: Any,
    gpus: int,
    gpu_memory: float,
    workers: int | None = None,
    sequence: int | None = None,
    shape: Shape | None = None,
    grpo_gpus: int | None = None,
) -> CellPlan:
    """The plan of one cell (`esbench.spec.Cell`) on `gpus` GPUs of `gpu_memory` bytes each. ES's paper-bf16
    engines run as real ones when the GPUs allow (`--es-workers E`); GRPO takes the fewest GPUs (FSDP) it fits on."""
    spec = cell.spec
    plan = CellPlan(cell.id, cell.name)
    try:
        shape = shape or model_shape(spec["model"])
    except LookupError as e:
        plan.fits, plan.reason = None, str(e)
        return plan
    s = sizing_for(cell, shape, gpu_memory, sequence)
    engines = max([int((st.get("config") or {}).get("engines") or 1) for st in _stages(spec["method"])] + [1])
    if workers is None:  # the engines as real ones when there is a GPU per engine
        workers = engines if 1 < engines <= gpus else 1
    chosen = grpo_gpus  # `esbench run`: the --grpo-gpus it runs with; `esbench plan`: the fewest that fit
    grpo_gpus = chosen or 1
    phases = cell_phases(spec, s, workers, grpo_gpus)
    if phases is None:
        plan.fits, plan.reason = None, "a method without a declared resident set (a plug-in): no prediction"
        return plan
    if chosen is None and any(p.name == "train grpo" for p in phases):  # the fewest GPUs GRPO fits on
        grpo_gpus = _fewest_grpo_gpus(spec, s, workers, gpus)
        phases = cell_phases(spec, s, workers, grpo_gpus) or phases
    plan.phases = phases
    plan.gpus = max(p.gpus for p in phases)
    plan.peak = max(p.total for p in phases)
    problems = []
    if s.backend == "vllm":
        problems += [m for m in [engine_check(s, engine_share(), "engine")] if m]
        if any(p.name == "train grpo" for p in phases):
            problems += [m for m in [engine_check(s, trl_engine_share(), "TRL engine")] if m]
    if plan.gpus > gpus:
        problems.append(f"needs {plan.gpus} GPUs, {gpus} given")
    worst = max(phases, key=lambda p: p.total)
    if plan.peak > usable(gpu_memory):
        top = max(worst.items, key=lambda i: i.bytes)
        problems.append(
            f"{worst.name} needs {plan.peak / GiB:.1f} GiB per GPU > {usable(gpu_memory) / GiB:.1f} GiB usable of "
            f"{gpu_memory / GiB:g} (largest: {top.name} {top.bytes / GiB:.1f} GiB)"
        )
        plan.fix = _fix(spec, s, worst, engines, workers)
    plan.fits = not problems
    plan.reason = "; ".join(problems)
    if workers > 1:
        plan.notes.append(f"--es-workers {workers}")
    hosted = [i for p in phases for i in p.items if i.host and "replicas" in i.name and s.gpu]
    if hosted:
        ram = hosted[0].bytes / GiB
        plan.notes.append(
            f"{hosted[0].name} in host memory ({ram:.0f} GiB of RAM), copied in per shard; "
            f"--es-workers {engines} on {engines} GPUs needs none"
        )
    if grpo_gpus > 1:
        plan.notes.append(f"--grpo-gpus {grpo_gpus} (FSDP2 full shard)")
    plan.sequence = s.sequence
    return plan


def _fewest_grpo_gpus(spec: dict[str, Any], s: Sizing, workers: int, limit: int) -> int:
    """The fewest GPUs (1, 2, 4, 8, ...) up to `limit` on which every GRPO stage fits, else `limit`."""
    g = 1
    while g < limit:
        phases = cell_phases(spec, s, workers, g) or []
        if all(p.total <= usable(s.device_memory) for p in phases if p.name == "train grpo"):
            return g
        g = min(2 * g, limit)
    return limit


def _fix(spec, s: Sizing, worst: Phase, engines: int, workers: int) -> str:
    """What would make the worst phase fit, checked by planning it again that way."""
    if worst.name == "train grpo":
        g = _fewest_grpo_gpus(spec, s, workers, 64)
        return f"GRPO over {g} GPUs with FSDP2: --grpo-gpus {g}"
    if s.backend == "vllm":
        return "a smaller engine share (ESBENCH_VLLM_MEMORY) or a GPU with more memory"
    return f"a GPU with at least {math.ceil(worst.total / GiB)} GiB"


def plan_json(plans: list[CellPlan]) -> str:
    return json.dumps([p.row() for p in plans], indent=2)


def plan_markdown(title: str, plans: list[CellPlan], gpus: int, gpu_memory: float) -> str:
    """One suite's plan as a Markdown table (docs/memory-plan.md is made of these: `esbench plan --markdown`)."""
    lines = [
        f"### {title} on {gpus} x {gpu_memory / GiB:g} GiB",
        "",
        "| cell | GPUs | GiB per GPU | peak in | fits | why, fix, how |",
        "|---|---|---|---|---|---|",
    ]
    for p in plans:
        row = p.row()
        worst = row["peak_phase"] or "-"
        fits = {True: "yes", False: "**no**", None: "?"}[p.fits]
        how = "; ".join(x for x in [p.reason, p.fix and f"fix: {p.fix}", *p.notes] if x) or "-"
        peak = f"{row['peak_gib_per_gpu']:g}" if p.fits is not None else "?"
        lines.append(f"| {p.name} | {p.gpus} | {peak} | {worst} | {fits} | {how} |")
    sequences = sorted({p.sequence for p in plans if p.sequence})
    lines += ["", f"L (longest sequence sized for): {', '.join(map(str, sequences))} tokens.", ""]
    return "\n".join(lines)
