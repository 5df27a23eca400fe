"""The two-sided comparison rule on constructed numbers whose verdicts are known."""

from __future__ import annotations

import math

import pytest

from esbench.leaderboard.compare import Estimate, bootstrap_se, compare, estimate, seed_se, t_quantile
from esbench.leaderboard.release import DEFAULT_RULE

RULE = DEFAULT_RULE


def test_t_quantiles():
    assert t_quantile(None) == 1.96 and t_quantile(1) == 12.706 and t_quantile(4) == 2.776
    assert t_quantile(11) == 2.228  # between tabulated df: the smaller df, a wider (conservative) band
    with pytest.raises(ValueError):
        t_quantile(3, 0.9)


def test_bootstrap_se_is_the_closed_form_of_resampling():
    import random

    x = [1.0] * 30 + [0.0] * 70
    se = bootstrap_se(x)
    assert se == pytest.approx(math.sqrt(0.3 * 0.7 / 100))
    rng = random.Random(0)
    means = [sum(rng.choices(x, k=100)) / 100 for _ in range(4000)]
    mc = math.sqrt(sum((m - 0.3) ** 2 for m in means) / len(means))
    assert mc == pytest.approx(se, rel=0.08)


def test_estimate_uses_seeds_when_there_are_several_else_the_bootstrap():
    e = estimate([0.70, 0.72, 0.74])
    assert e.mean == pytest.approx(72.0) and e.se_source == "seeds" and e.df == 2
    assert e.se == pytest.approx(100 * seed_se([0.70, 0.72, 0.74])) and e.se == pytest.approx(100 * 0.02 / math.sqrt(3))
    one = estimate([0.5], [1.0, 0.0, 1.0, 0.0])
    assert one.se_source == "bootstrap" and one.df is None and one.se == pytest.approx(25.0)
    with pytest.raises(ValueError):
        estimate([0.5])


def test_small_deltas_are_reproduced_within_delta():
    v = compare(Estimate(70.9, 0.1, None, 1, "bootstrap"), 70.3, "pass@1", RULE)
    assert v.status == "reproduced" and v.band == 1.0 and v.delta == pytest.approx(0.6)


def test_two_sided_too_high_is_flagged_like_too_low():
    lo = compare(Estimate(68.0, 0.2, None, 1, "bootstrap"), 70.3, "pass@1", RULE)
    hi = compare(Estimate(72.6, 0.2, None, 1, "bootstrap"), 70.3, "pass@1", RULE)
    assert lo.status == hi.status == "fail"
    mid = compare(Estimate(71.8, 0.2, None, 1, "bootstrap"), 70.3, "pass@1", RULE)
    assert mid.status == "warn" and mid.warn_band == 2.0


def test_noise_widens_the_band():
    """Three noisy seeds: t(2)=4.303 times SE 1.0 gives a 4.3 pp band, so a 4 pp gap is still reproduced."""
    v = compare(Estimate(74.3, 1.0, 2, 3, "seeds"), 70.3, "pass@1", RULE)
    assert v.band == pytest.approx(4.303) and v.status == "reproduced"
    v = compare(Estimate(74.3, 1.0, 2, 3, "seeds"), 70.3, "pass@1", RULE, se_ref=1.0)
    assert v.band == pytest.approx(4.303 * math.sqrt(2))


def test_per_metric_delta_comes_from_the_release():
    rule = {**RULE, "delta_pp": {"maj@16": 3.0}, "delta_pp_default": 0.5}
    assert compare(Estimate(52.5, 0.0, None, 1, "bootstrap"), 50.0, "maj@16", rule).status == "reproduced"
    assert compare(Estimate(50.9, 0.0, None, 1, "bootstrap"), 50.0, "pass@2", rule).status == "warn"
