"""Paired bootstrap over problems: the confidence interval of a metric difference between two cells.

Both cells answered the same problems, so resampling problem indices (the same indices for both cells) keeps the
pairing, as in Koehn 2004 ("Statistical Significance Tests for Machine Translation Evaluation") and lm-eval's
own bootstrap stderr. Used for the forgetting tables (held-out change against base, paper Table 10).
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
