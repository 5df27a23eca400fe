"""Pass@k against the exact combinatorial formula; Maj@k voting rules."""

from __future__ import annotations

import random
from math import comb

import pytest

from esbench.metrics.passk import majority_correct, mean_pass_at_k, pass_at_k


def exact(n: int, c: int, k: int) -> float:
    return 1 - comb(n - c, k) / comb(n, k)


def test_pass_at_k_matches_exact_formula_on_random_cases():
    rng = random.Random(0)
    cases = [
        (n, c, k)
        for n in (1, 2, 5, 16, 32, 64, 200)
        for c in {0, 1, n // 2, n - 1, n}
        if 0 <= c <= n
        for k in {1, 2, n // 3 or 1, n - c if n - c >= 1 else 1, n}
        if k <= n
    ]
    cases += [(n := rng.randint(1, 300), rng.randint(0, n), rng.randint(1, n)) for _ in range(2000)]
    for n, c, k in cases:
        assert pass_at_k(n, c, k) == pytest.approx(exact(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_when_fewer_failures_than_k_is_one():
    assert pass_at_k(10, 8, 3) == 1.0  # n - c = 2 < k: every k-subset holds a success
    assert pass_at_k(10, 8, 2) == pytest.approx(exact(10, 8, 2))


def test_pass_at_1_is_c_over_n():
    assert pass_at_k(32, 7, 1) == pytest.approx(7 / 32)


def test_pass_at_k_rejects_impossible_inputs():
    for bad in [(4, 5, 1), (4, 2, 0), (4, 2, 5), (4, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_mean_pass_at_k_averages_problems():
    assert mean_pass_at_k([[4, 0], [4, 4]], 2) == pytest.approx(0.5)


def test_majority_vote_uses_first_k_and_abstains_on_missing_answers():
    answers = ["3", None, "5", "5", None, "3", "3"]
    correct = [True, False, False, False, False, True, True]
    assert majority_correct(answers, correct, 1) is True
    assert majority_correct(answers, correct, 4) is False  # 5 wins 2:1; None abstains
    assert majority_correct(answers, correct, 7) is True  # 3 wins 3:2
    assert majority_correct([None, None], [False, False], 2) is False


def test_majority_tie_goes_to_first_seen_answer():
    assert majority_correct(["7", "8"], [False, True], 2) is False
    assert majority_correct(["8", "7"], [True, False], 2) is True
