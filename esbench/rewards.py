r"""Training rewards. A reward is a callable `(response, gold) -> float` that a method applies to its rollouts.

`Reward` is the paper's verifier reward (arXiv 2608.27351, App. G): the task's own verifier, the one evaluation
uses, gives `correct` for a right answer, `formatted` for an extracted but wrong one, and 0 otherwise.

`paper_math_reward` is the rule the authors' artifact (yunpengba7/understanding-es, `score_training_response` in
`src/es_reproduction/rewards.py`) trains ES with on math (../shared/reference/paper_protocol.md, section 2): the
contents of the LAST `\boxed` (whitespace may precede its brace; no brace, unclosed braces or no `\boxed` gives 0;
`\fbox` is not a box), stripped; both sides go through the MATH dataset's string normalisation (Hendrycks et al.
2021) as the artifact writes it, and are compared as strings: 1 if equal, else 0.1. Unlike math-verify it neither
accepts an unboxed answer nor strips commas or trailing zeros (`\boxed{1,024}` against 1024 earns 0.1). The gold is
normalised by that same function and nothing else: the GSM8K loader takes it as the artifact does (the first
`#### n`, commas stripped), so `3.50` and `-0` stay as written. Re-implemented from the artifact's behaviour; the
differential cases in tests/fixtures/paper_reward_cases.json pin it (`PAPER_REWARD_VERSION`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np


@dataclass(frozen=True)
class Reward:
    """A task's training reward under a suite's `reward` rule: `verifier` (default) or `paper` (math only)."""

    task: Any  # esbench.tasks.TaskDef
    correct: float = 1.0
    formatted: float = 0.1
    rule: Literal["verifier", "paper"] = "verifier"

    def __call__(self, response: str, gold: str) -> float:
        if self.rule == "paper":
            return paper_math_reward(response, gold, self.correct, self.formatted)
        v = self.task.verify(response, gold)
        return self.correct if v.correct else (self.formatted if v.formatted else 0.0)

    def with_values(self, correct: float, formatted: float) -> Reward:
        return replace(self, correct=correct, formatted=formatted)


# ---------------------------------------------------------------------------------------------------------------
# the artifact's math reward

PAPER_REWARD_VERSION = 2
"""The `paper` rule's version, recorded in every cell spec that trains with it (`DatasetSpec.reward_version`), so
cells trained under an earlier rule get other ids. 1: esbench's first reading of the rule (accepted `\\fbox`,
`\\boxed 5`, raised on two unit suffixes, compared GSM8K golds normalised as numbers). 2: the artifact's function,
checked case by case (tests/fixtures/paper_reward_cases.json)."""


def last_boxed(text: str) -> str | None:
    """The stripped contents of the last `\\boxed`, braces matched; whitespace may stand before its brace.

    Only the last `\\boxed` counts: None when there is none, when no brace follows it, or when its braces never
    close (an earlier box is not a fallback). `\\fbox` is not a box."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    after = text[start + len("\\boxed") :].lstrip()
    if not after.startswith("{"):
        return None
    end = _closing_brace(after)
    return None if end is None else after[1:end].strip()


def _closing_brace(s: str) -> int | None:
    """Index of the `}` that closes the `{` at `s[0]`: where the running count (+1 per `{`, -1 per `}`) first
    returns to 0. Vectorised: a megabyte of braces takes milliseconds, a Python loop over it a good part of a second."""
    chars = np.frombuffer(s.encode("utf-32-le", "surrogatepass"), dtype="<u4")  # one element per character
    depth = np.cumsum((chars == ord("{")).astype(np.int64) - (chars == ord("}")))
    closed = np.flatnonzero(depth == 0)
    return int(closed[0]) if closed.size else None


def _fix_fracs(s: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{2}` -> `\\frac{1}{2}`; a piece that starts braced (or is empty) is kept.
    A one-character piece is malformed: then the whole string comes back unchanged."""
    parts = s.split("\\frac")
    out = [parts[0]]
    for part in parts[1:]:
        if part and part[0] != "{":
            if len(part) < 2:
                return s
            part = "{" + part[0] + "}" + (part[1:] if part[1] == "{" else "{" + part[1] + "}" + part[2:])
        out.append("\\frac" + part)
    return "".join(out)


def _fix_sqrt(s: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}`: the one character after an unbraced root gets braces (a space too)."""
    parts = s.split("\\sqrt")
    fixed = (p if not p or p[0] == "{" else "{" + p[0] + "}" + p[1:] for p in parts[1:])
    return parts[0] + "".join("\\sqrt" + p for p in fixed)


def _drop_unit_suffix(s: str) -> str:
    """`5\\text{ cm}` -> `5`: everything from a `\\text{ ` (with its space) on, when there is exactly one."""
    pieces = s.split("\\text{ ")
    return pieces[0] if len(pieces) == 2 else s


def _fix_a_slash_b(s: str) -> str:
    """`a/b` -> `\\frac{a}{b}` when both sides are digits (`str.isdigit`) once leading minus signs are dropped; the
    sides are kept as written (`03/4` -> `\\frac{03}{4}`)."""
    sides = s.split("/")
    if len(sides) == 2 and all(side.lstrip("-").isdigit() for side in sides):
        return "\\frac{" + sides[0] + "}{" + sides[1] + "}"
    return s


def math_normalise(s: str) -> str:
    """The MATH dataset's answer normalisation as the artifact applies it to both the box and the gold. It never
    raises: two unit suffixes leave the string as it is, and the other steps go on."""
    for old, new in (
        ("\n", ""),
        ("\\!", ""),
        ("\\\\", "\\"),
        ("tfrac", "frac"),
        ("dfrac", "frac"),
        ("\\left", ""),
        ("\\right", ""),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
        ("\\$", ""),
        ("\\%", ""),  # escaped signs only: a bare $ or % stays
    ):
        s = s.replace(old, new)
    s = _drop_unit_suffix(s)
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "x = 5" -> " 5"
        s = sides[1]
    s = _fix_fracs(_fix_sqrt(s).replace(" ", ""))
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_a_slash_b(s)


def paper_math_reward(response: str, gold: str, correct: float = 1.0, formatted: float = 0.1) -> float:
    """The artifact's ES math reward (module docstring): last box, MATH normalisation, string equality."""
    boxed = last_boxed(response)
    if boxed is None:
        return 0.0
    return correct if math_normalise(boxed) == math_normalise(gold) else formatted
