"""Population diversity: the paper's verifier-projected Jensen–Shannon divergence and an answer-cluster variant.

Paper: arXiv 2608.27351, Section "Why ES keeps coverage". For one prompt x and a population of N policies πᵢ with
success rates pᵢ(x), JS_succ(x) = h(p̄) − (1/N) Σ h(pᵢ), h the binary entropy in bits. It is the Jensen–Shannon
divergence of the members' Bernoulli "is it correct" distributions, so 0 ≤ JS_succ ≤ JS_pol = (1/N) Σ KL(πᵢ ‖ π̄)
(data processing: projecting responses onto correct/incorrect cannot increase divergence), and it is 0 when all
members agree and 1 bit when half always succeed and half always fail.

The answer-cluster variant replaces the Bernoulli with the categorical distribution over normalised answers
(a failed extraction is its own cluster): JS_ans = H(q̄) − (1/N) Σ H(qᵢ). `answer_entropy` is H of the pooled
answers of one policy's samples for one prompt, which is what base, GRPO and ES models are compared on at
evaluation time (each cell's own n samples per problem; see docs/analyses.md).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence


def binary_entropy(p: float) -> float:
    """h(p) in bits, with h(0) = h(1) = 0."""
    if p <= 0.0 or p >= 1.0:
        return 0.0
    return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def entropy(dist: dict[object, float] | Sequence[float]) -> float:
    """Shannon entropy in bits of a distribution (normalised here)."""
    values = list(dist.values()) if isinstance(dist, dict) else list(dist)
    total = sum(values)
    return -sum(v / total * math.log2(v / total) for v in values if v > 0)


def js_success(rates: Sequence[float]) -> float:
    """JS_succ for one prompt from the members' success rates pᵢ."""
    if not rates:
        raise ValueError("need at least one member")
    mean = sum(rates) / len(rates)
    return binary_entropy(mean) - sum(binary_entropy(p) for p in rates) / len(rates)


def cluster_distribution(answers: Sequence[str | None]) -> dict[object, float]:
    """Empirical distribution over normalised answers; a failed extraction (None) is one cluster."""
    counts = Counter("<none>" if a is None else a for a in answers)
    return {a: c / len(answers) for a, c in counts.items()}


def js_answers(member_answers: Sequence[Sequence[str | None]]) -> float:
    """Generalised JS over members' answer-cluster distributions for one prompt."""
    dists = [cluster_distribution(a) for a in member_answers]
    pooled: defaultdict[object, float] = defaultdict(float)  # a Counter holds ints; these are probabilities
    for d in dists:
        for a, p in d.items():
            pooled[a] += p / len(dists)
    return entropy(dict(pooled)) - sum(entropy(d) for d in dists) / len(dists)


def answer_entropy(answers: Sequence[str | None]) -> float:
    """Entropy (bits) of one policy's answer clusters for one prompt."""
    return entropy(cluster_distribution(answers))


def kl(p: Sequence[float], q: Sequence[float]) -> float:
    """KL(p ‖ q) in bits for two distributions on the same finite support."""
    return sum(pi * math.log2(pi / qi) for pi, qi in zip(p, q, strict=True) if pi > 0)


def js_policy(policies: Sequence[Sequence[float]]) -> float:
    """JS_pol = (1/N) Σ KL(πᵢ ‖ π̄) for explicit distributions over a shared response set (small examples)."""
    mean = [sum(col) / len(policies) for col in zip(*policies, strict=True)]
    return sum(kl(p, mean) for p in policies) / len(policies)


def population_summary(correct: Sequence[Sequence[Sequence[bool]]], answers: Sequence[Sequence[Sequence]]) -> dict:
    """Mean JS_succ / JS_ans over prompts from [member][prompt][sample] evidence, plus P_pop and P_same.

    P_pop is the chance that at least one of N members (one sample each) solves a prompt; P_same is the chance
    that N samples from one average member do; the paper's coverage gain is their difference.
    """
    members, prompts = len(correct), len(correct[0])
    js_s, js_a, p_pop, p_same, p_bar = [], [], [], [], []
    for j in range(prompts):
        rates = [sum(correct[i][j]) / len(correct[i][j]) for i in range(members)]
        js_s.append(js_success(rates))
        js_a.append(js_answers([answers[i][j] for i in range(members)]))
        mean = sum(rates) / members
        p_bar.append(mean)
        p_pop.append(1 - math.prod(1 - r for r in rates))
        p_same.append(1 - (1 - mean) ** members)
    avg = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {
        "members": members,
        "prompts": prompts,
        "samples": len(correct[0][0]),
        "js_succ": avg(js_s),
        "js_answers": avg(js_a),
        "success_rate": avg(p_bar),
        "p_pop": avg(p_pop),
        "p_same": avg(p_same),
    }
