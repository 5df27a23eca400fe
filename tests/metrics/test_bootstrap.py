"""Paired bootstrap intervals cover a known difference at about their nominal rate."""

from __future__ import annotations

import numpy as np
import pytest

from esbench.metrics.bootstrap import paired_bootstrap


def test_constant_shift_gives_a_degenerate_interval():
    a = [0.0, 0.5, 1.0, 0.25]
    out = paired_bootstrap(a, [x + 0.1 for x in a])
    assert out["delta"] == pytest.approx(0.1)
    assert out["lo"] == pytest.approx(0.1) and out["hi"] == pytest.approx(0.1)


def test_interval_covers_a_known_difference_at_about_95_percent():
    rng = np.random.default_rng(0)
    true_delta, hits, reps = 0.08, 0, 200
    for rep in range(reps):
        difficulty = rng.random(150)  # paired problems: both models see the same difficulty
        a = (rng.random(150) < difficulty).astype(float)
        b = (rng.random(150) < np.clip(difficulty + true_delta, 0, 1)).astype(float)
        # the expected difference of this draw's problems (the pairing target), not of the population
        target = float(np.mean(np.clip(difficulty + true_delta, 0, 1) - difficulty))
        out = paired_bootstrap(a, b, iters=400, seed=rep)
        hits += out["lo"] <= target <= out["hi"]
    assert 0.88 <= hits / reps <= 0.99


def test_pairing_narrows_the_interval():
    rng = np.random.default_rng(1)
    a = rng.random(200)
    b = a + 0.02 + rng.normal(0, 0.01, 200)  # strongly paired
    paired = paired_bootstrap(a, b)
    assert paired["lo"] > 0  # the pairing makes a 2-point shift clearly significant
    assert paired["hi"] - paired["lo"] < 0.01


def test_rejects_unpaired_input():
    with pytest.raises(ValueError, match="equal-length"):
        paired_bootstrap([1.0, 0.0], [1.0])
