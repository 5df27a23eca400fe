"""The two-sided comparison rule (ADR 0009, written out in leaderboard/README.md).

Over a run's seeds, a metric is *reproduced* when |mean − ref| ≤ band, with
band = max(δ, t_{q, df} · √(SE_run² + SE_ref²)). It is *warn* up to `warn_factor` × band and *fail* beyond.
Two-sided on purpose: a run that beats the paper by far is as suspicious as one that falls short (MLPerf's RCP
check only guards one side). All quantities are in percentage points, as the paper prints them.

SE_run is the standard error of the mean over seeds (df = seeds − 1). With one seed it is the per-problem
bootstrap standard error, which for a mean of per-problem values has the closed form √(var₀(x)/P) (the variance
of the bootstrap distribution of the mean, with ddof 0), so it needs no resampling and no random seed; df = ∞.

Seed variance (ADR 0011). The bootstrap SE of one seed measures only which problems and which samples were drawn;
a second training seed moves the number by more than that. When the release carries a seed SD s_seed for a metric
(rule key `seed_sd_pp`, or `seed_sd` on a reference value), a single-seed run's band is
max(δ, t · √(SE_run² + SE_ref² + s_seed²)). s_seed is the SD of one seed's result around the mean over seeds
(ddof 1 over per-seed values), not the SE of a k-seed mean: the run being judged is one draw, whose deviation from
the population mean has variance s_seed², whatever k the estimate came from. With two or more seeds the run's SE
over seeds already contains the seed variance, so nothing is added. A release without the key adds nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Two-sided 95 % Student-t quantiles t_{0.975, df}; df = 0 stands for the normal limit.
_T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
    60: 2.000,
    0: 1.960,
}


def t_quantile(df: int | None, q: float = 0.975) -> float:
    """t_{q, df} from a table (no scipy dependency); df None or 0 means the normal quantile."""
    if q != 0.975:
        raise ValueError("only the 0.975 quantile is tabulated; a release changing it must extend this table")
    if not df:
        return _T975[0]
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    usable = [d for d in _T975 if d and d <= df]
    return _T975[max(usable)]  # the next smaller tabulated df: a slightly wider, conservative band


def bootstrap_se(per_problem: Sequence[float]) -> float:
    """Standard error of the mean under a per-problem bootstrap: √(var₀(x)/P)."""
    p = len(per_problem)
    if p == 0:
        raise ValueError("no problems")
    mean = sum(per_problem) / p
    return math.sqrt(sum((x - mean) ** 2 for x in per_problem) / p / p)


def seed_se(values: Sequence[float]) -> float:
    """Standard error of the mean over seeds (ddof 1)."""
    k = len(values)
    if k < 2:
        raise ValueError("need at least two seeds")
    mean = sum(values) / k
    return math.sqrt(sum((x - mean) ** 2 for x in values) / (k - 1) / k)


@dataclass(frozen=True)
class Estimate:
    """A metric over a run's seeds, in percentage points."""

    mean: float
    se: float
    df: int | None  # None: normal limit (single-seed bootstrap)
    seeds: int
    se_source: str  # "seeds" or "bootstrap"


def estimate(per_seed: Sequence[float], per_problem_first_seed: Sequence[float] | None = None) -> Estimate:
    """Combine per-seed values (fractions in [0, 1]) into a mean and SE in percentage points."""
    if not per_seed:
        raise ValueError("no seeds")
    mean = 100.0 * sum(per_seed) / len(per_seed)
    if len(per_seed) >= 2:
        return Estimate(mean, 100.0 * seed_se(per_seed), len(per_seed) - 1, len(per_seed), "seeds")
    if per_problem_first_seed is None:
        raise ValueError("one seed needs per-problem values for the bootstrap SE")
    return Estimate(mean, 100.0 * bootstrap_se(per_problem_first_seed), None, 1, "bootstrap")


def pooled_seed_sd(groups: Sequence[Sequence[float]]) -> float | None:
    """The seed SD pooled over cells: √(Σ (k_i − 1)·s_i² / Σ (k_i − 1)) over groups of per-seed values (one group
    per cell, in the values' unit). Groups of one seed say nothing about seed variance and are skipped; None when
    no group has two seeds. A release maker fills `seed_sd_pp` with this; `compare` never estimates it itself."""
    num = dof = 0.0
    for values in groups:
        k = len(values)
        if k < 2:
            continue
        mean = sum(values) / k
        num += sum((x - mean) ** 2 for x in values)
        dof += k - 1
    return math.sqrt(num / dof) if dof else None


def seed_sd_for(
    rule: dict[str, Any],
    metric: str,
    task: str | None = None,
    method: str | None = None,
    ref: dict[str, Any] | None = None,
) -> float | None:
    """The seed SD (pp) the release carries for this comparison, or None (the default: no seed term).

    Most specific first: `seed_sd` on the reference value itself (a multi-seed reference run of that very cell),
    then the rule's `seed_sd_pp` under `METHOD/TASK/METRIC`, `TASK/METRIC`, `METRIC` (METHOD as the paper map keys
    it: `es`, `sequence:es,grpo`). Seed spread differs by orders of magnitude between GSM8K Pass@1 and AIME Pass@32,
    so a per-metric value alone is coarse; the narrower keys let a release be exact where it has the data."""
    value = (ref or {}).get("seed_sd")
    if value is None:
        table = rule.get("seed_sd_pp") or {}
        keys = [f"{method}/{task}/{metric}"] if method and task else []
        keys += [f"{task}/{metric}"] if task else []
        value = next((table[k] for k in [*keys, metric] if table.get(k) is not None), None)
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"seed SD for {metric} must be a finite number >= 0, got {value}")
    return value


@dataclass(frozen=True)
class Verdict:
    status: str  # reproduced | warn | fail
    delta: float  # mean − ref, pp
    band: float  # reproduced if |delta| <= band
    warn_band: float  # warn if band < |delta| <= warn_band
    delta_pp: float
    t: float
    seed_sd: float = 0.0  # the seed SD that went into the band (0: none carried, or the run has >= 2 seeds)


def compare(
    est: Estimate,
    ref: float,
    metric: str,
    rule: dict[str, Any],
    se_ref: float | None = None,
    seed_sd: float | None = None,
) -> Verdict:
    """Classify `est` against a reference value `ref` (pp) under the release's `rule`.

    `seed_sd` (pp, from `seed_sd_for`) widens a single-seed run's band by the seed-to-seed variance its bootstrap
    SE cannot see; it is ignored for a run of several seeds, whose SE over seeds already holds it. Adding a
    variance term can only widen the band, never narrow it."""
    delta_pp = float(rule["delta_pp"].get(metric, rule["delta_pp_default"]))
    se_ref = float(rule["se_ref_pp_default"] if se_ref is None else se_ref)
    s_seed = float(seed_sd) if seed_sd is not None and est.seeds < 2 else 0.0
    if not math.isfinite(s_seed) or s_seed < 0:
        raise ValueError(f"seed SD must be a finite number >= 0, got {seed_sd}")
    t = t_quantile(est.df, rule["quantile"])
    band = max(delta_pp, t * math.sqrt(est.se**2 + se_ref**2 + s_seed**2))
    warn_band = rule["warn_factor"] * band
    d = est.mean - ref
    status = "reproduced" if abs(d) <= band else ("warn" if abs(d) <= warn_band else "fail")
    return Verdict(status, d, band, warn_band, delta_pp, t, s_seed)
