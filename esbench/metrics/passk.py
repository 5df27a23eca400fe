"""Pass@k and Maj@k from per-problem evidence.

Pass@k uses the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code",
Codex paper), 1 - C(n-c, k)/C(n, k), in its numerically stable product form 1 - prod_{i=n-c+1}^{n} (1 - k/i).
Maj@k is a plurality vote over the first k normalised answers, where a failed extraction abstains (the paper's
Table 15 protocol); ties go to the answer seen first, so the vote is deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    prob_all_fail = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_fail *= 1.0 - k / i
    return 1.0 - prob_all_fail


def mean_pass_at_k(per_problem: Sequence[Sequence[int]], k: int) -> float:
    """Mean Pass@k over problems given `[n, c]` pairs."""
    return sum(pass_at_k(n, c, k) for n, c in per_problem) / len(per_problem)


def majority_correct(answers: Sequence[str | None], correct: Sequence[bool], k: int) -> bool:
    """Whether the plurality answer among the first k samples is correct (None answers abstain)."""
    votes = Counter(a for a in answers[:k] if a is not None)
    if not votes:
        return False
    top = max(votes.values())
    winner = next(a for a in answers[:k] if a is not None and votes[a] == top)
    return next(ok for a, ok in zip(answers, correct, strict=False) if a == winner)
