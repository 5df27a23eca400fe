r"""Training rewards. A reward is a callable `(response, gold) -> float` that a method applies to its rollouts.

`Reward` is the paper's verifier reward (arXiv 2608.27351, App. G): the task's own verifier, the one evaluation
uses, gives `correct` for a right answer, `formatted` for an extracted but wrong one, and 0 otherwise.

`paper_math_reward` is the rule the authors' artifact (yunpengba7/understanding-es) actually trains ES with on math
(../shared/reference/paper_protocol.md, section 2): the LAST brace-matched `\boxed{...}` of the response, no box
gives 0; both sides go through the MATH dataset's string normalisation (Hendrycks et al. 2021) and are compared as
strings: 1 if equal, else 0.1. Unlike math-verify it neither accepts an unboxed answer nor strips commas or trailing
zeros from the prediction (`\boxed{1,024}` against 1024 earns 0.1). The gold is
taken as given: esbench's GSM8K loader already strips its commas. Written here from that description.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal


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


def last_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` (or `\\fbox{...}`), braces matched; `\\boxed 5` (no braces) up to a
    `$` or the end. None when there is none, or its braces never close."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start:]
    head = "\\boxed" if rest.startswith("\\boxed") else "\\fbox"
    after = rest[len(head) :]
    if after.startswith(" "):
        return after[1:].split("$")[0].strip()
    if not after.startswith("{"):
        return None
    depth = 0
    for i, ch in enumerate(after):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return after[1:i]
    return None


def _fix_fracs(s: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}` and `\\frac1{2}` -> `\\frac{1}{2}`; a braced numerator is left as it is."""
    parts = s.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if part.startswith("{"):
            out += part
            continue
        if len(part) < 2:
            return s  # malformed: the whole string unchanged
        a, b = part[0], part[1]
        out += "{" + a + "}" + part[1:] if b == "{" else "{" + a + "}{" + b + "}" + part[2:]
    return out


def _fix_a_slash_b(s: str) -> str:
    """`a/b` of two integers written canonically -> `\\frac{a}{b}` (`03/4` is not canonical, so it stays)."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def _fix_sqrt(s: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}`: the one character after an unbraced root gets braces."""
    parts = s.split("\\sqrt")
    out = parts[0]
    for part in parts[1:]:
        out += "\\sqrt" + (part if part.startswith("{") or not part else "{" + part[0] + "}" + part[1:])
    return out


def math_normalise(s: str) -> str:
    """The MATH dataset's answer normalisation, as the artifact applies it to both sides. Raises ValueError where
    the original asserts (two `\\text{ ` unit suffixes); `paper_math_reward` then compares the raw strings."""
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "")
    if "\\text{ " in s:  # trailing units: "5\\text{ cm}" -> "5"
        units = s.split("\\text{ ")
        if len(units) != 2:
            raise ValueError("more than one unit suffix")
        s = units[0]
    s = s.replace("\\%", "")  # an escaped percent sign only; a bare % stays
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    lhs = s.split("=")
    if len(lhs) == 2 and len(lhs[0]) <= 2:  # "x=5" -> "5"
        s = lhs[1]
    s = _fix_sqrt(s)
    s = s.replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_a_slash_b(s)


def paper_math_reward(response: str, gold: str, correct: float = 1.0, formatted: float = 0.1) -> float:
    """The artifact's ES math reward (module docstring): last box, MATH normalisation, string equality."""
    boxed = last_boxed(response)
    if boxed is None:
        return 0.0
    try:
        same = math_normalise(boxed) == math_normalise(gold)
    except ValueError:  # the original's fallback: the raw strings
        same = boxed == gold
    return correct if same else formatted
