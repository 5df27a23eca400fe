"""Training compute by the paper's formulas (arXiv 2608.27351 v2, App. G.2), from the tokens a run processed.

The paper compares ES and GRPO at matched FLOPs with

    FLOPs_GRPO = 8 · T · B · G · P · L        FLOPs_ES = 2 · T · N · D · P · L

T iterations (updates); B prompts per batch and G generations per prompt (GRPO); N population members and D prompts
per member (ES); P the model's parameter count; L tokens per sequence. 2·P FLOPs per token is one forward pass; GRPO
adds the 6·P of a training forward and backward pass over each rollout it generated.

esbench does not assume a nominal L. T·B·G·L (GRPO) and T·N·D·L (ES) are the number of tokens the rollouts hold,
summed over every rollout actually made. A rollout's tokens are its prompt tokens plus its generated tokens (a
sequence's prefill and decode both take a forward pass, and GRPO trains on both). So the formulas become

    FLOPs_GRPO = 8 · P · tokens_trained        FLOPs_ES = 2 · P · tokens_generated_over

- tokens_generated_over (ES): over every member and prompt of every update, the prompt's tokens (as the backends
  encode it, with no special tokens added) plus the tokens generated for it. The method logs them per update in
  train.jsonl as `tokens` (with `tokens_generated`).
- tokens_trained (GRPO): TRL's count of prompt plus completion tokens of the rollouts it generated
  (`num_tokens`, unpadded), logged per update in the same way. Every generated rollout is trained on once
  (`num_iterations = 1`) when the budget is a whole number of rollout batches, as in every esbench suite. A rollout
  batch counts at the update that generated it.
- A sequence (ES→GRPO) sums its stages, each by its own formula.
- The formulas are the paper's: they count no reference-model forward for a KL term (2·P per token more where
  β > 0) and no in-training probe, and neither does esbench.

P counts all parameters, embeddings and LM head included, with tied tensors once (`Backend.parameters()`).
App. G.2 writes P for the model's size, as the paper names its models (1.5B is the total count of
Qwen2.5-1.5B); and a tied input embedding does no matrix product while the LM head does, so counting the tensor
once matches the forward's work. Methods without a formula (a plug-in, a measurement) get no FLOPs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

# FLOPs per parameter per token, by method (App. G.2)
PER_TOKEN = {"es": 2, "grpo": 8}
FORMULAS = {
    "es": "FLOPs_ES = 2·T·N·D·P·L = 2·P·tokens (App. G.2)",
    "grpo": "FLOPs_GRPO = 8·T·B·G·P·L = 8·P·tokens (App. G.2)",
}


def grpo_flops_paper(T: int, B: int, G: int, P: int, L: int) -> int:
    """App. G.2's GRPO formula with a nominal sequence length L."""
    return 8 * T * B * G * P * L


def es_flops_paper(T: int, N: int, D: int, P: int, L: int) -> int:
    """App. G.2's ES formula with a nominal sequence length L."""
    return 2 * T * N * D * P * L


def grpo_flops(P: int, tokens: int) -> int:
    """8·P·tokens: `tokens` are the prompt + completion tokens of every rollout trained on (T·B·G·L)."""
    return 8 * P * tokens


def es_flops(P: int, tokens: int) -> int:
    """2·P·tokens: `tokens` are the prompt + generated tokens of every member's rollouts (T·N·D·L)."""
    return 2 * P * tokens


def method_flops(method: str, P: int, tokens: int) -> int | None:
    """The formula of `method` (es, grpo), or None for a method App. G.2 has no formula for."""
    per = PER_TOKEN.get(method)
    return None if per is None else per * P * tokens


def sequence_flops(P: int, stages: Iterable[tuple[str, int]]) -> int | None:
    """A sequence's FLOPs: each (method, tokens) stage by its own formula, summed; None if one has no formula."""
    total = 0
    for method, tokens in stages:
        f = method_flops(method, P, tokens)
        if f is None:
            return None
        total += f
    return total


def device_count(device_type: str, es_workers: int = 1) -> int:
    """Devices a cell's training held: on CUDA, the GPUs visible to the cell's process (an executor gives each cell
    its own), or the Ray ES workers if more (each replica holds one); on CPU, 1 (the process, whatever its threads)."""
    if device_type != "cuda":
        return 1
    import torch

    return max(torch.cuda.device_count(), es_workers, 1)


def update_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """train.jsonl's update rows (probe rows have no reward), in update order."""
    return sorted((r for r in rows if "reward_mean" in r), key=lambda r: r["update"])


def _stages(kind: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Update rows grouped by sequence stage (one stage for a plain method), in order."""
    out: list[dict[str, Any]] = []
    for r in rows:
        key = (r.get("stage"), r.get("stage_method", kind))
        if not out or out[-1]["key"] != key:
            out.append({"key": key, "method": key[1], "rows": []})
        out[-1]["rows"].append(r)
    return out


def cell_compute(
    kind: str,
    rows: Sequence[dict[str, Any]],
    parameters: int,
    train_seconds: float,
    devices: int,
    device: str,
) -> dict[str, Any]:
    """A trained cell's `compute` section from its train.jsonl rows (module docstring): FLOPs by the formula, the P
    and tokens it used, per stage for a sequence, wall-clock and device-seconds of training, and the cumulative
    FLOPs at each probe point (`curve`: FLOPs spent before the probe at `update`, for curves against compute)."""
    ups = update_rows(rows)
    stages = []
    for st in _stages(kind, ups):
        counted = all("tokens" in r for r in st["rows"])
        tokens = sum(r["tokens"] for r in st["rows"]) if counted else None
        flops = None if tokens is None else method_flops(st["method"], parameters, tokens)
        stages.append({"method": st["method"], "updates_logged": len(st["rows"]), "tokens": tokens, "flops": flops})
    known = bool(stages) and all(s["flops"] is not None for s in stages)
    flops = sum(s["flops"] for s in stages) if known else None
    tokens = sum(s["tokens"] for s in stages) if known else None
    generated = sum(r.get("tokens_generated", 0) for r in ups) if known else None
    methods = [s["method"] for s in stages]
    if kind in FORMULAS:
        formula = FORMULAS[kind]
    elif methods and all(m in FORMULAS for m in methods):
        formula = " + ".join(f"{m}: {PER_TOKEN[m]}·P·tokens" for m in methods) + " (App. G.2, per stage)"
    else:
        formula = f"none: App. G.2 has no formula for {kind!r}"
    out: dict[str, Any] = {
        "formula": formula,
        "flops": flops,
        "parameters": parameters,
        "parameters_counted": "all, tied tensors once",
        "tokens": {
            "total": tokens,
            "generated": generated,
            "prompt": None if tokens is None else tokens - generated,
        },
        "train_seconds": round(train_seconds, 3),
        "device": device,
        "devices": devices,
        "device_seconds": round(train_seconds * devices, 3),
        "curve": [],
    }
    if len(stages) > 1:
        out["stages"] = stages
    if flops is not None:
        cum, spent = {}, 0
        for r in ups:
            method = r.get("stage_method", kind)
            spent += method_flops(method, parameters, r["tokens"]) or 0
            cum[r["update"]] = spent
        for p in sorted({r["update"] for r in rows if "probe" in r}):
            before = [u for u in cum if u < p]
            out["curve"].append({"update": p, "flops": cum[max(before)] if before else 0})
    return out


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float | None:
    """The piecewise-linear value of a curve [(FLOPs, value), ...] at `x`, or None outside its span. Where points
    share an x (updates that spent no counted FLOPs), the later one holds from there on."""
    pts = sorted(points, key=lambda p: p[0])  # stable: of equal x, the later point stays later
    if not pts or x < pts[0][0] or x > pts[-1][0]:
        return None
    exact = [y for px, y in pts if px == x]
    if exact:
        return exact[-1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x0 < x < x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None  # unreachable: x lies strictly inside the span and on no point


def format_flops(x: float | None) -> str:
    """1.2e15 (two significant digits, no '+'); — when unknown."""
    if x is None:
        return "—"
    if x == 0:
        return "0"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"
