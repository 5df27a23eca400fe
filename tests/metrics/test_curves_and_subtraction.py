"""Table 6's debiased EMA and Table 13's subtraction statistics on hand-computed and constructed data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from esbench.metrics.curves import debiased_ema, local_sd, matches
from esbench.metrics.subtraction import subtraction_stats


def test_debiased_ema_against_a_hand_computed_series():
    # β = 0.5 keeps the arithmetic by hand: s1 = 0.5·1 = 0.5 → 0.5/0.5 = 1; s2 = 0.25 + 0.5·3 = 1.75 → 1.75/0.75;
    # s3 = 0.875 + 0.5·2 = 1.875 → 1.875/0.875
    assert debiased_ema([1.0, 3.0, 2.0], beta=0.5) == pytest.approx([1.0, 7 / 3, 15 / 7])
    # the paper's β = 0.99: the first value is reproduced exactly (no pull toward s0 = 0), a constant stays constant
    assert debiased_ema([0.7] * 300) == pytest.approx([0.7] * 300)
    xs = [0.1 * (t % 5) for t in range(300)]
    s, expect = 0.0, []
    for t, x in enumerate(xs, 1):
        s = 0.99 * s + 0.01 * x
        expect.append(s / (1 - 0.99**t))
    assert debiased_ema(xs) == pytest.approx(expect)


def test_local_sd_and_the_within_001_rule():
    assert local_sd([0.5] * 10) == pytest.approx([0.0] * 10, abs=1e-6)  # √ of a cancellation: ~1e-8 left
    # β = 0.5 on [0, 2]: mean 4/3, mean of squares (0.5·4)/0.75 = 8/3, SD √(8/3 − 16/9) = √8/3
    assert local_sd([0.0, 2.0], beta=0.5)[1] == pytest.approx(math.sqrt(8) / 3)
    assert matches(0.705, 0.714) and not matches(0.70, 0.7101)


def test_kappa_and_correlations_on_constructed_data():
    x = np.array([1.0, 2.0, 4.0, 7.0, 3.0, 5.0])
    # a baseline that equals X₊ up to a constant: perfect correlation, subtraction removes all variance
    same = subtraction_stats(x, x + 3.0, -x)
    assert same["corr_plus_zero"] == pytest.approx(1.0) and same["kappa_base"] == pytest.approx(0.0)
    # X₋ = −X₊: Corr −1 and Var(2X₊)/Var(X₊) = 4
    assert same["corr_plus_minus"] == pytest.approx(-1.0) and same["kappa_pair"] == pytest.approx(4.0)
    # an orthogonal baseline of equal variance: Corr 0 and κ = 2(1 − 0) = 2
    centred = x - x.mean()
    orth = np.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    orth = orth - orth.mean()
    orth -= centred * (orth @ centred) / (centred @ centred)  # exactly uncorrelated
    orth *= centred.std() / orth.std()  # equal variance
    stats = subtraction_stats(x, orth, x)
    assert stats["corr_plus_zero"] == pytest.approx(0.0, abs=1e-12) and stats["kappa_base"] == pytest.approx(2.0)
    assert stats["kappa_pair"] == pytest.approx(0.0) and stats["observations"] == 6
    # κ = 2(1 − ρ) with equal variances, for any ρ (here 0.6)
    rho = 0.6
    y = rho * centred + math.sqrt(1 - rho**2) * orth
    assert subtraction_stats(x, y, x)["kappa_base"] == pytest.approx(2 * (1 - rho))
    with pytest.raises(ValueError, match="undefined"):
        subtraction_stats([1.0, 1.0], [0.0, 1.0], [0.0, 1.0])


TABLE_13_LINES = """\
## Table 13 - subtraction diagnostic, Qwen2.5-1.5B base. Corr(X+,X0) k_base Corr(X+,X-) k_pair
(a) sigma=1e-3: GSM8K regen reward, common seed 0.2777 1.4445 0.1304 1.9870 ; independent seed 0.0561 1.3577 0.0224 2.7847
    SST-2 CE fixed batch 0.9776 0.0447 0.9196 0.1557 ; mean token logprob fixed rollout 0.9939 0.0125 0.9857 0.0285
    policy seq loss fixed rollout 0.9939 0.0167 0.9903 0.0194 ; GRPO surrogate fixed rollout 0.9998 0.0006 0.9997 0.0007
(b) GSM8K regen reward: 1e-4 common 0.8797 0.2288 0.5537 0.8194 ; 1e-4 indep -0.0245 1.4080 0.0450 2.3822
    3e-4 common 0.5607 1.0424 0.3026 1.9434 ; 3e-4 indep -0.0303 1.6687 0.0532 2.4379 ; 1e-3 = panel (a)
"""  # noqa: E501 (verbatim from ../shared/reference/paper_tables.md)


def test_paper_table_13_transcription_matches_the_reference_tables():
    """The report's Table 13 references hold exactly the numbers of the table's lines (copied above, and checked
    against the reference file itself when this checkout has it)."""
    import re
    from pathlib import Path

    from esbench.metrics.subtraction import PAPER_TABLE_13

    numbers = [float(x) for x in re.findall(r"-?\d+\.\d{4}", TABLE_13_LINES)]
    ours = [v for row in PAPER_TABLE_13.values() for v in row.values()]
    assert len(PAPER_TABLE_13) == 10 and sorted(ours) == sorted(numbers)
    ref = Path(__file__).resolve().parents[3] / "shared" / "reference" / "paper_tables.md"
    if ref.exists():
        original = ref.read_text().splitlines()
        assert all(line in original for line in TABLE_13_LINES.splitlines())
