"""Paired bootstrap over problems: the confidence interval of a metric difference between two cells.

Both cells answered the same problems, so resampling problem indices (the same indices for both cells) keeps the
pairing, as in Koehn 2004 ("Statistical Significance Tests for Machine Translation Evaluation") and lm-eval's
own bootstrap stderr. Used for the forgetting tables (held-out change against base, paper Table 10) and, with
seeds and tasks as further levels (`hierarchical_bootstrap`), for the paper's claims (`esbench.claims`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], iters: int = 2000, seed: int = 0, level: float = 0.95
) -> dict[str, float]:
    """Mean of b − a over problems with a percentile CI from `iters` paired resamples."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) == 0:
        raise ValueError(f"paired bootstrap needs two equal-length non-empty vectors, got {x.shape} and {y.shape}")
    diff = y - x
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diff), size=(iters, len(diff)))
    means = diff[idx].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return {"delta": float(diff.mean()), "lo": float(lo), "hi": float(hi), "se": float(means.std(ddof=1))}


def hierarchical_bootstrap(
    groups: Sequence[Sequence[Sequence[float]]], iters: int = 2000, seed: int = 0, level: float = 0.95
) -> dict[str, float]:
    """Mean of paired differences `groups[seed][stratum][problem]` with a percentile CI, resampling seeds, then
    problems within each stratum (a task) of each drawn seed.

    The statistic is the mean over seeds of the mean over strata of each stratum's mean, so every task weighs the
    same whatever its size (the paper's Average column). One seed and one stratum is exactly `paired_bootstrap`
    (the same draws); with one seed only problems are resampled. Every seed must hold the same strata and sizes
    (the same problems, evaluated under each seed).
    """
    shapes = {tuple(len(s) for s in g) for g in groups}
    if len(shapes) != 1 or not min(next(iter(shapes)), default=0):
        raise ValueError(f"hierarchical bootstrap needs seeds with the same non-empty strata, got sizes {shapes}")
    if len(groups) == 1 and len(groups[0]) == 1:
        diffs = groups[0][0]
        return paired_bootstrap([0.0] * len(diffs), diffs, iters, seed, level)
    strata = [np.asarray([g[t] for g in groups], dtype=float) for t in range(len(groups[0]))]  # seeds x problems
    n_seeds = len(groups)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n_seeds, size=(iters, n_seeds)) if n_seeds > 1 else np.zeros((iters, 1), dtype=int)
    means = np.zeros(iters)
    for j in range(n_seeds):  # each drawn seed resamples its problems afresh, even when drawn twice
        for d in strata:
            idx = rng.integers(0, d.shape[1], size=(iters, d.shape[1]))
            means += d[picks[:, j][:, None], idx].mean(axis=1)
    means /= n_seeds * len(strata)
    point = float(np.mean([d.mean() for d in strata]))
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return {"delta": point, "lo": float(lo), "hi": float(hi), "se": float(means.std(ddof=1))}
