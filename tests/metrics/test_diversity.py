"""JS diversity on constructed populations whose answers are known."""

from __future__ import annotations

import math
import random

import pytest

from esbench.metrics import diversity as d


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 1.0])
def test_identical_members_have_zero_js(p):
    assert d.js_success([p] * 7) == pytest.approx(0.0, abs=1e-12)
    assert d.js_answers([["1", "2", None, "2"]] * 5) == pytest.approx(0.0, abs=1e-12)


def test_split_population_reaches_one_bit_the_maximum():
    assert d.js_success([1.0, 0.0] * 4) == pytest.approx(1.0)
    rng = random.Random(0)
    for _ in range(500):
        rates = [rng.random() for _ in range(rng.randint(2, 9))]
        assert 0.0 <= d.js_success(rates) <= 1.0 + 1e-12


def test_js_succ_is_between_zero_and_policy_js():
    """Projecting responses onto correct/incorrect cannot increase divergence (data processing inequality)."""
    rng = random.Random(1)
    correct = [True, False, True, False, False]  # five possible responses, two of them right
    strict = 0
    for _ in range(300):
        policies = []
        for _ in range(rng.randint(2, 6)):
            w = [rng.random() ** 3 for _ in correct]
            policies.append([x / sum(w) for x in w])
        rates = [sum(p for p, ok in zip(pi, correct, strict=True) if ok) for pi in policies]
        js_s, js_p = d.js_success(rates), d.js_policy(policies)
        assert -1e-12 <= js_s <= js_p + 1e-12
        strict += js_s < js_p - 1e-6
    assert strict > 250  # projection loses information in general, so the bound is usually strict
    # and the bound is tight when each policy puts all its mass on one outcome class
    assert d.js_success([1.0, 0.0]) == pytest.approx(d.js_policy([[1.0, 0.0], [0.0, 1.0]]))


def test_answer_cluster_variant():
    # N deterministic members with distinct answers: JS = log2 N; None is a cluster of its own
    assert d.js_answers([["a"] * 3, ["b"] * 3, [None] * 3, ["c"] * 3]) == pytest.approx(2.0)
    assert d.answer_entropy(["1", "1", "2", "2"]) == pytest.approx(1.0)
    assert d.answer_entropy(["7"] * 8) == 0.0


def test_population_summary_coverage_terms():
    # two members, two prompts, two samples: member 0 solves prompt 0 always, member 1 solves prompt 1 always
    correct = [[[True, True], [False, False]], [[False, False], [True, True]]]
    answers = [[["1", "1"], ["9", "9"]], [["8", "8"], ["2", "2"]]]
    s = d.population_summary(correct, answers)
    assert s["js_succ"] == pytest.approx(1.0)
    assert s["p_pop"] == pytest.approx(1.0)  # one of the two members always solves each prompt
    assert s["p_same"] == pytest.approx(1 - 0.5**2)  # two draws from the average member (p̄ = 0.5)
    assert s["success_rate"] == pytest.approx(0.5)
    assert (s["members"], s["prompts"], s["samples"]) == (2, 2, 2)
    assert s["js_answers"] == pytest.approx(math.log2(2))
