"""The subtraction diagnostic of arXiv 2608.27351 (Table 13, App. E.2–E.5).

For a direction ε and noise draws ξ: X₊ = F(θ+σε; ξ₊), X₀ = F(θ; ξ₀), X₋ = F(θ−σε; ξ₋). Subtracting a baseline
reduces the variance of an ES estimate only when the two evaluations are correlated enough:
κ_base = Var(X₊ − X₀) / Var(X₊) and κ_pair = Var(X₊ − X₋) / Var(X₊) are below 1 exactly then. With equal
variances, κ = 2(1 − Corr), so independent evaluations give κ = 2. Statistics are pooled over prompts, generation
seeds and directions (one observation per (prompt, seed, direction)), as App. E reports them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def subtraction_stats(x_plus: Sequence[float], x_zero: Sequence[float], x_minus: Sequence[float]) -> dict:
    """Corr(X₊, X₀), Corr(X₊, X₋), κ_base and κ_pair over pooled observations (population moments, ddof 0)."""
    xp, x0, xm = (np.asarray(v, dtype=np.float64) for v in (x_plus, x_zero, x_minus))
    if not (xp.shape == x0.shape == xm.shape) or xp.ndim != 1 or len(xp) < 2:
        raise ValueError("need three equally long 1-D series of at least two pooled observations")
    var = xp.var()
    if var == 0:
        raise ValueError("Var(X+) is 0: every perturbed evaluation gave the same value, κ is undefined")

    def corr(a, b):
        sd = a.std() * b.std()
        return float(((a - a.mean()) * (b - b.mean())).mean() / sd) if sd else float("nan")

    return {
        "corr_plus_zero": corr(xp, x0),
        "corr_plus_minus": corr(xp, xm),
        "kappa_base": float((xp - x0).var() / var),
        "kappa_pair": float((xp - xm).var() / var),
        "observations": int(len(xp)),
    }


def _t13(c0: float, kb: float, cm: float, kp: float) -> dict[str, float]:
    return {"corr_plus_zero": c0, "kappa_base": kb, "corr_plus_minus": cm, "kappa_pair": kp}


# Table 13 of the paper (Qwen2.5-1.5B-Instruct base), keyed (σ, esbench objective); from
# ../shared/reference/paper_tables.md. The paper's cross-entropy row is SST-2's; esbench's uses the task's golds.
PAPER_TABLE_13: dict[tuple[float, str], dict[str, float]] = {
    (1e-3, "reward-common"): _t13(0.2777, 1.4445, 0.1304, 1.9870),
    (1e-3, "reward-independent"): _t13(0.0561, 1.3577, 0.0224, 2.7847),
    (1e-3, "cross-entropy"): _t13(0.9776, 0.0447, 0.9196, 0.1557),
    (1e-3, "fixed-logprob"): _t13(0.9939, 0.0125, 0.9857, 0.0285),
    (1e-3, "fixed-policy-loss"): _t13(0.9939, 0.0167, 0.9903, 0.0194),
    (1e-3, "fixed-grpo"): _t13(0.9998, 0.0006, 0.9997, 0.0007),
    (1e-4, "reward-common"): _t13(0.8797, 0.2288, 0.5537, 0.8194),
    (1e-4, "reward-independent"): _t13(-0.0245, 1.4080, 0.0450, 2.3822),
    (3e-4, "reward-common"): _t13(0.5607, 1.0424, 0.3026, 1.9434),
    (3e-4, "reward-independent"): _t13(-0.0303, 1.6687, 0.0532, 2.4379),
}
