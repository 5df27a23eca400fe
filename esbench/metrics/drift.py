"""Parameter drift between a trained model and its start: whole-model and per parameter group, in fp32.

Paper: arXiv 2608.27351, Table 4 (relative whole-model L2 distance ‖θ−θ₀‖/‖θ₀‖, ES 40.7–44.1× GRPO; the largest
|Δθ| coordinates by group; magnitude thresholding), Tables 11–12 (functional sparsity: keeping only |Δθ| > τ, Eq. 16),
and its bf16 discussion: public ES code restores perturbations by bf16 subtraction, so part of the reported drift
is rounding. `bf16_steps` tells whether a coordinate's change is a whole number of bf16 steps, the signature of
a rounding artefact rather than a learned change. The paper's own GRPO figures are bf16 checkpoints, so `drift(...,
dtype=)` measures the weights as saved at a dtype (the runner's `drift`), an fp32 master's without it (`drift.master`).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Mapping

import torch

GROUPS = ("embeddings", "lm_head", "attention", "mlp", "norms", "biases", "other")

_RULES = [
    ("biases", re.compile(r"\.bias$")),
    ("norms", re.compile(r"norm", re.I)),
    ("embeddings", re.compile(r"embed|wte|wpe", re.I)),
    ("lm_head", re.compile(r"lm_head|output\.weight$")),
    ("attention", re.compile(r"attn|attention|q_proj|k_proj|v_proj|o_proj", re.I)),
    ("mlp", re.compile(r"mlp|ffn|feed_forward|gate_proj|up_proj|down_proj", re.I)),
]


def group_of(name: str) -> str:
    """The parameter group of a tensor name (biases first: an attention bias counts as a bias, as in Table 4)."""
    for group, rule in _RULES:
        if rule.search(name):
            return group
    return "other"


def unique_parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Named parameters with tied tensors counted once (under their first name)."""
    seen: set[int] = set()
    out = {}
    for name, p in model.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out[name] = p.detach()
    return out


def bf16_step(x: torch.Tensor) -> torch.Tensor:
    """The spacing of bf16 numbers at |x| (8 significant bits): 2^(floor(log2|x|) − 7); 2^-133 near zero."""
    x = x.to(torch.float32).abs().clamp_min(2.0**-126)
    return torch.exp2(torch.floor(torch.log2(x)) - 7)


def bf16_steps(theta0: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """(θ − bf16(θ₀)) in units of the bf16 step at bf16(θ₀), in fp64 (an integer for bf16-rounded changes)."""
    start = theta0.to(torch.bfloat16).to(torch.float64)
    return (theta.to(torch.float64) - start) / bf16_step(start).to(torch.float64)


def drift(
    start: Mapping[str, torch.Tensor],
    end: Mapping[str, torch.Tensor],
    ideal: Mapping[str, torch.Tensor] | None = None,
    top: int = 100,
    dtype: torch.dtype | None = None,
) -> dict:
    """Relative L2 drift, per-group shares and the `top` largest |Δθ| coordinates, computed in fp32.

    `ideal` (optional) is the fp32 trajectory the update rule intended (an fp32 master, or ES's bf16 shadow); then
    the rounding residual θ − ideal is reported as a share of the squared drift.
    `dtype` (optional): θ₀ and θ are first cast to it, one tensor at a time, so the drift is that of the weights as
    saved at that dtype (an fp32 master's bf16 checkpoint: Table 4's max |Δθ| are whole bf16 steps).
    """
    sq_delta = sq_base = sq_round = 0.0
    groups = {g: {"params": 0, "sq_delta": 0.0, "sq_base": 0.0} for g in GROUPS}
    heap: list[tuple[float, str, int, float, float, float]] = []  # min-heap (|Δ|, name, index, θ₀, Δ, steps)
    changed = total = 0
    for name, t0 in start.items():
        a = _at(t0, dtype).to(torch.float32).flatten()
        e = _at(end[name], dtype).to(a.device, torch.float32).flatten()  # θ₀ is on the CPU; θ may be on a GPU
        d = e - a
        g = groups[group_of(name)]
        g["params"] += a.numel()
        ds, bs = float(d.pow(2).sum()), float(a.pow(2).sum())
        g["sq_delta"] += ds
        g["sq_base"] += bs
        sq_delta += ds
        sq_base += bs
        changed += int((d != 0).sum())
        total += d.numel()
        if ideal is not None:
            sq_round += float((e - ideal[name].to(a.device, torch.float32).flatten()).pow(2).sum())
        k = min(top, d.numel())
        vals, idx = d.abs().topk(k)
        steps = bf16_steps(a[idx], a[idx] + d[idx]).tolist()
        for v, i, st in zip(vals.tolist(), idx.tolist(), steps, strict=True):
            item = (v, name, i, float(a[i]), float(d[i]), st)
            if len(heap) < top:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
    top_items = sorted(heap, reverse=True)
    top_rows = []
    for _, name, i, a0, dv, st in top_items:
        top_rows.append(
            {"name": name, "group": group_of(name), "index": i, "theta0": a0, "delta": dv, "bf16_steps": st}
        )
    out = {
        "relative_l2": (sq_delta / sq_base) ** 0.5 if sq_base else 0.0,
        "l2": sq_delta**0.5,
        "base_l2": sq_base**0.5,
        "changed_fraction": changed / max(total, 1),
        "max_abs_delta": top_items[0][0] if top_items else 0.0,
        "groups": {
            g: {
                "params": v["params"],
                "share": v["sq_delta"] / sq_delta if sq_delta else 0.0,
                "relative_l2": (v["sq_delta"] / v["sq_base"]) ** 0.5 if v["sq_base"] else 0.0,
                "top": sum(r["group"] == g for r in top_rows),
            }
            for g, v in groups.items()
            if v["params"]
        },
        "top": top_rows,
        "top_bf16_step_share": step_multiple_share(top_rows),
    }
    if ideal is not None:
        out["rounding_share"] = sq_round / sq_delta if sq_delta else 0.0
    return out


def _at(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    return t if dtype is None else t.to(dtype)


def step_multiple_share(rows: Iterable[dict], tol: float = 1e-3) -> float:
    """Share of coordinates whose change is a non-zero whole number of bf16 steps."""
    rows = list(rows)
    hits = sum(
        1 - tol <= abs(s) < 2**20 and abs(s - round(s)) <= tol  # past 2^20 steps (θ₀ ≈ 0) the test means nothing
        for s in (r["bf16_steps"] for r in rows)
    )
    return hits / len(rows) if rows else 0.0


@torch.no_grad()
def threshold(start: Mapping[str, torch.Tensor], end: Mapping[str, torch.Tensor], tau: float) -> tuple[dict, dict]:
    """θ₀ + Δ·1[|Δ| > τ] per tensor, and the paper's update sparsity (Eq. 16) with the relative drift kept.

    Eq. 16: s_τ = |{i : 0 < |Δθᵢ| ≤ τ}| / |{i : |Δθᵢ| > 0}|. Coordinates that did not change are in neither set,
    so a bf16 update that rounded most coordinates away is not counted as "sparse" for it. `dropped_pct` is the
    share of all coordinates ablated, for comparison with esbench ≤ v1.3's sparsity (which divided by all).
    """
    out, ablated, changed, total, sq, sq_base = {}, 0, 0, 0, 0.0, 0.0
    for name, t0 in start.items():
        a = t0.to(torch.float32)
        d = end[name].to(a.device, torch.float32) - a
        keep = d.abs() > tau
        moved = int((d != 0).sum())
        out[name] = a + d * keep
        changed += moved
        ablated += moved - int(keep.sum())
        total += d.numel()
        sq += float((d * keep).pow(2).sum())
        sq_base += float(a.pow(2).sum())
    return out, {
        "tau": tau,
        "sparsity_pct": 100.0 * ablated / changed if changed else 0.0,
        "changed_pct": 100.0 * changed / max(total, 1),
        "dropped_pct": 100.0 * ablated / max(total, 1),
        "relative_l2": (sq / sq_base) ** 0.5,
    }
