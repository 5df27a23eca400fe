"""Training-curve statistics of the paper's population sweep (arXiv 2608.27351, Table 6 / Fig. 5, App. F).

The paper smooths each run's per-update mean training reward with a debiased exponential moving average of weight
0.99: s_t = 0.99·s_{t−1} + 0.01·x_t from s_0 = 0, reported as s_t / (1 − 0.99^t) (the bias correction of Adam,
Kingma & Ba 2015, which removes the pull toward the zero start). A reduced population "matches" the reference when
its smoothed reward is within 0.01 of it. The band drawn around a curve is the local SD: the same debiased EMA of
x², minus the squared mean, so band and curve share one window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def debiased_ema(xs: Sequence[float], beta: float = 0.99) -> list[float]:
    """s_t / (1 − β^t) for t = 1..T, with s_t = β·s_{t−1} + (1 − β)·x_t and s_0 = 0."""
    if not 0 <= beta < 1:
        raise ValueError(f"beta must be in [0, 1), got {beta}")
    out, s = [], 0.0
    for t, x in enumerate(xs, start=1):
        s = beta * s + (1 - beta) * x
        out.append(s / (1 - beta**t))
    return out


def local_sd(xs: Sequence[float], beta: float = 0.99) -> list[float]:
    """√(EMA(x²) − EMA(x)²), both debiased: the spread of x within the EMA's window (0 for t = 1)."""
    mean, sq = debiased_ema(xs, beta), debiased_ema([x * x for x in xs], beta)
    return [math.sqrt(max(q - m * m, 0.0)) for m, q in zip(mean, sq, strict=True)]


def matches(value: float, reference: float, tol: float = 0.01) -> bool:
    """Table 6's shading rule: a reduced population matches N = 64 when within `tol` of it."""
    return abs(value - reference) <= tol + 1e-12
