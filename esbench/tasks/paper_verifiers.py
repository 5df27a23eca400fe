"""Verifiers of the paper's tasks (arXiv 2608.27351): math, multiple choice, HotpotQA, Countdown and MBPP.

Math follows the authors' artifact (yunpengba7/understanding-es, `rewards.py`): math-verify 0.9.0 `parse` with
`LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)` and the normalisation
`NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True)`, plus
`ExprExtractionConfig()`, first match; the gold is parsed as an expression and compared with `verify(gold, pred)`.
When math-verify extracts nothing, the artifact falls back to the last `#### n`, `\\boxed{}` or "answer is n" and
compares normalised numbers; so does this module. The 0.1 format reward goes to a response with a `\\boxed{...}`.

The held-out tasks extract their answer as the paper's App. G.4 says each family does (its system prompt asks for
exactly that format, see `esbench.tasks`):
- multiple choice (CommonsenseQA, GPQA): the option letter in the last `\\boxed{}`; formatted = a box was found;
- HotpotQA: the last `<answer>...</answer>` pair, SQuAD-style normalised exact match (lower case, no punctuation or
  articles, collapsed spaces);
- Countdown: the last `<answer>...</answer>` pair, an arithmetic expression parsed with `ast` (never `eval`), using
  exactly the given numbers, each once (the TinyZero / Countdown-Tasks rule), evaluated in exact fractions and equal
  to the target;
- MBPP: the last fenced code block (the prompt asks for exactly one), run with the task's tests in
  `esbench.tasks.sandbox`.
Structured golds arrive JSON-encoded in the row's `answer` string.
"""

from __future__ import annotations

import ast
import json
import re
import string
from fractions import Fraction
from functools import cache, lru_cache

from esbench.tasks.verdict import Verdict, normalise_number

_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u00d7": "*", "\u00f7": "/", "\u22c5": "*"})


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if absent or unclosed."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i].strip()
    return None


def strip_latex_text(s: str) -> str:
    """`\\text{Paris}` -> `Paris`; also `\\textbf`, `\\mathrm`; drops `$`."""
    prev = None
    while prev != s:
        prev = s
        s = re.sub(r"\\(?:text|textbf|textit|mathrm|mathbf|texttt)\s*\{([^{}]*)\}", r"\1", s)
    return s.replace("$", "").strip()


# ---------------------------------------------------------------------------------------------------------------
# math


@cache
def _configs():
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    norm = NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True)
    pred = (
        LatexExtractionConfig(normalization_config=norm, boxed_match_priority=0, try_extract_without_anchor=False),
        ExprExtractionConfig(),
    )
    return pred, (ExprExtractionConfig(),), (LatexExtractionConfig(),)


def _parse(text: str, config) -> list:
    from math_verify import parse

    try:
        return parse(text, extraction_config=config, extraction_mode="first_match")
    except Exception:  # math-verify raises on pathological input and on timeouts outside the main thread
        return []


def parse_gold(gold: str) -> list:
    """A gold answer: a plain expression (GSM8K `72`, `-3.5`) or, failing that, LaTeX (`\\frac{1}{2}`)."""
    _, expr, latex = _configs()
    gold = gold.translate(_MINUS).strip()
    return _parse(gold, expr) or _parse(f"${gold}$", latex)


def _fallback_answer(text: str) -> str | None:
    """The artifact's fallback when math-verify extracts nothing: `####`, the last box, "answer is"."""
    hashes = re.findall(r"####\s*(-?[\d,]+\.?\d*)", text)
    if hashes:
        return hashes[-1]
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    said = re.findall(r"(?:answer|result)\s+(?:is|=)\s*(-?[\d,]+\.?\d*)", text, re.I)
    return said[-1] if said else None


def _answer_key(value) -> str:
    """A vote key for Maj@k: real numbers as shortest decimals (`1,234` = `1234.0`, `1/2` = `0.5`), else sympy's str."""
    try:
        if getattr(value, "is_number", False) and value.is_real:
            return normalise_number(f"{float(value):.12g}")
    except (TypeError, ValueError, OverflowError):
        pass
    return str(value)


def verify_math(response: str, gold: str) -> Verdict:
    from math_verify import verify

    text = response.translate(_MINUS)
    boxed = last_boxed(text) is not None
    pred = _parse(text, _configs()[0])
    if pred:
        gold_parsed = parse_gold(gold)
        try:
            ok = bool(gold_parsed) and verify(gold_parsed, pred)
        except Exception:
            ok = False
        return Verdict(_answer_key(pred[0]), bool(ok), boxed)
    fallback = _fallback_answer(text)
    if fallback is None:
        return Verdict(None, False, boxed)
    answer = normalise_number(fallback.strip().rstrip("."))
    return Verdict(answer, answer == normalise_number(gold.translate(_MINUS).strip()), boxed)


# ---------------------------------------------------------------------------------------------------------------
# multiple choice


_LETTER = re.compile(r"^\(?([A-J])\)?(?:[.:)\s]|$)")


def choice_letter(text: str) -> str | None:
    """The option letter in the last box (`B`, `(B)`, `\\text{B}`, `B. Paris`); None without one.

    Only a box counts: the paper extracts a boxed letter for multiple choice and its system prompt asks for one. The
    former "the answer is (B)" fallback is gone: it credited responses that ignore the requested format, which the
    paper's scoring does not, and it let `answer` and `formatted` disagree.
    """
    boxed = last_boxed(text)
    if boxed is None:
        return None
    m = _LETTER.match(strip_latex_text(boxed).strip())
    return m.group(1) if m else None


def verify_choice(response: str, gold: str) -> Verdict:
    """Formatted means a box was found (the 0.1 format reward), even when no letter can be read from it."""
    letter = choice_letter(response)
    return Verdict(letter, letter is not None and letter == gold.strip().upper(), last_boxed(response) is not None)


# ---------------------------------------------------------------------------------------------------------------
# <answer> tags (HotpotQA, Countdown)


def answer_tag(text: str) -> str | None:
    """Content of the last `<answer>...</answer>` pair, whitespace stripped; None without a closed pair.

    The last closing tag and the nearest opening tag before it: a model that drafts an answer and then corrects it
    is scored on the correction, and a stray unclosed `<answer>` earlier in the text cannot swallow the final pair.
    """
    end = text.rfind("</answer>")
    start = text.rfind("<answer>", 0, end) if end >= 0 else -1
    return text[start + len("<answer>") : end].strip() if start >= 0 else None


# ---------------------------------------------------------------------------------------------------------------
# HotpotQA


def squad_normalise(s: str) -> str:
    """The SQuAD / HotpotQA answer normalisation: lower case, no punctuation, no articles, single spaces."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def verify_hotpot(response: str, gold: str) -> Verdict:
    """Exact match of the tagged answer; tags present but empty are formatted, with no answer."""
    raw = answer_tag(response)
    if raw is None:
        return Verdict(None, False, False)
    answer = squad_normalise(raw) if raw else None
    return Verdict(answer, answer is not None and answer == squad_normalise(gold), True)


# ---------------------------------------------------------------------------------------------------------------
# Countdown


class _Unsafe(ValueError):
    pass


def _eval(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body, used)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _eval(node.operand, used)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
        a, b = _eval(node.left, used), _eval(node.right, used)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if b == 0:
            raise _Unsafe("division by zero")
        return a / b
    raise _Unsafe(f"not allowed in a Countdown equation: {type(node).__name__}")


def countdown_expression(raw: str) -> str | None:
    """The equation inside the answer tags, in Python syntax: LaTeX and unicode operators mapped, a trailing
    `= target` dropped; None when nothing is left."""
    raw = strip_latex_text(raw).translate(_MINUS)
    raw = raw.replace("\\times", "*").replace("\\cdot", "*").replace("\\div", "/").replace("\\left", "")
    raw = raw.replace("\\right", "").replace("{", "(").replace("}", ")")
    raw = raw.split("=")[0].strip()
    return raw or None


def check_countdown(expression: str, target: int, nums: list[int]) -> bool:
    """True iff `expression` uses exactly the multiset `nums` and evaluates (exactly) to `target`."""
    if len(expression) > 200:
        return False
    try:
        tree = ast.parse(expression, mode="eval")
        used: list[int] = []
        value = _eval(tree, used)
    except (SyntaxError, _Unsafe, RecursionError, ValueError):
        return False
    return sorted(used) == sorted(nums) and value == target


def verify_countdown(response: str, gold: str) -> Verdict:
    g = json.loads(gold)
    raw = answer_tag(response)
    if raw is None:
        return Verdict(None, False, False)
    expr = countdown_expression(raw)
    if expr is None:
        return Verdict(None, False, True)
    return Verdict(expr.replace(" ", ""), check_countdown(expr, int(g["target"]), [int(n) for n in g["nums"]]), True)


# ---------------------------------------------------------------------------------------------------------------
# MBPP


def extract_code(text: str) -> str | None:
    """The last fenced code block (```python ... ``` preferred), or None: the system prompt asks for exactly one
    Python block, and when a model writes more the last is its final solution."""
    blocks = re.findall(r"```(?:python|py|Python)\s*\n(.*?)```", text, re.S)
    if not blocks:
        blocks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
    return blocks[-1].strip() if blocks else None


@lru_cache(maxsize=1 << 16)  # lm-eval's process_results and esbench's scoring both verify each sample
def verify_mbpp(response: str, gold: str) -> Verdict:
    from esbench.tasks.sandbox import run_tests

    g = json.loads(gold)
    code = extract_code(response)
    if code is None:
        return Verdict(None, False, False)
    ok = run_tests(code, list(g["test_list"]), list(g.get("test_imports") or []), timeout=float(g.get("timeout", 10)))
    return Verdict(code, ok, True)
