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
