"""Answer extraction and checking, shared by evaluation (Pass@k, Maj@k) and training rewards.

`hash_answer` follows the paper's GSM8K gold rule: the number after `####` (regex
`####\\s*(-?[0-9][0-9,]*(?:\\.[0-9]+)?)`, commas stripped). The same rule reads the tiny model's answers, so one
verifier serves the synthetic families and GSM8K-format data.

The paper's tasks (arXiv 2608.27351, Tables 2-5) use the verifiers in `esbench.tasks.paper_verifiers`: math-verify
configured as the authors' artifact configures it, multiple-choice letters, HotpotQA exact match, a Countdown
equation checker and MBPP test execution in the sandbox. They are registered in `VERIFIERS` below.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol, cast

from esbench.tasks.verdict import Verdict, normalise_number  # re-exported: callers import them from here too

_HASH = re.compile(r"####\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")


def hash_answer(text: str) -> str | None:
    """The first `#### <number>` answer in `text`, normalised; None if there is none."""
    m = _HASH.search(text.replace("\u2212", "-"))
    return normalise_number(m.group(1)) if m else None


def verify_hash(response: str, gold: str) -> Verdict:
    answer = hash_answer(response)
    return Verdict(answer, answer is not None and answer == normalise_number(gold))


def verify_exact(response: str, gold: str) -> Verdict:
    """`#### <digits>` compared as a string: leading zeros matter (digit-string reversal)."""
    m = re.search(r"####\s*(\S+)", response)
    answer = m.group(1) if m else None
    return Verdict(answer, answer == gold)


class LazyVerifier(Protocol):
    """A registered verifier that imports its module on first call (`_paper`); `resolve` returns the function that
    does the work."""

    resolve: Callable[[], Callable[[str, str], Verdict]]

    def __call__(self, response: str, gold: str) -> Verdict: ...


# The source text of `_paper`'s inner `verify` is what release v1.0's scheme-1 fingerprint hashed for every paper
# task: editing it (even a comment inside it) breaks v1.0's pins (tests/leaderboard/test_release.py).
def _paper(name: str) -> LazyVerifier:
    """Lazy import: math-verify and the sandbox load only when a paper task is verified."""

    def verify(response: str, gold: str) -> Verdict:
        from esbench.tasks import paper_verifiers

        return getattr(paper_verifiers, name)(response, gold)

    def resolve():
        """The function that does the work (for the release's verifier fingerprint)."""
        from esbench.tasks import paper_verifiers

        return getattr(paper_verifiers, name)

    lazy = cast(LazyVerifier, verify)  # a function object takes attributes; its Callable type does not say so
    lazy.resolve = resolve
    return lazy


VERIFIERS: dict[str, Callable[[str, str], Verdict]] = {
    "hash": verify_hash,
    "exact": verify_exact,
    "math": _paper("verify_math"),
    "choice": _paper("verify_choice"),
    "hotpot": _paper("verify_hotpot"),
    "countdown": _paper("verify_countdown"),
    "mbpp": _paper("verify_mbpp"),
}
