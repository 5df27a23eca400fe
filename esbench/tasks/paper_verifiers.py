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

Bounds (hostile responses: a trained policy writes them, a submission can too). Every scan here is linear in the
response. A response over `MAX_RESPONSE_CHARS`, or an extracted answer over `MAX_ANSWER_CHARS`, is wrong with
`error="too long"` before math-verify sees it. math-verify and sympy run in a long-lived child process (`_WORKER`)
with a `MATH_TIMEOUT_S` deadline per answer; one past it is killed and replaced, and the answer is wrong with
`error="timeout"`. math-verify's own `signal.alarm` timeouts are not enough: off the main thread (a threaded Ray
actor, a reward thread) `signal.signal` raises, so `parse` fails and every answer silently fell back to string
comparison; in the main thread the alarm cannot interrupt a long C call, and sympy's `float()` of a power tower (for
the Maj@k key) runs outside them. In the child's main thread they work as the artifact's do, and stay.

Every function a verifier here reaches, and the constants it reads, stay in this module: the published releases pin
their source under this module's name (`esbench.leaderboard.release.verifier_fingerprint`).
"""

from __future__ import annotations

import ast
import atexit
import json
import os
import re
import string
import sys
from fractions import Fraction
from functools import cache, lru_cache

from esbench.tasks.math_worker import _Worker
from esbench.tasks.verdict import Verdict, normalise_number

_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u00d7": "*", "\u00f7": "/", "\u22c5": "*"})


# A 2048-token response (every task config's budget; the paper's hard setting allows 8192) is ~8k characters of
# English or LaTeX at ~4 characters a token: 64 Ki characters is 8 a token at 8192 tokens. The longest honest gold
# answers are short: a number (GSM8K, AIME, AMC), a letter (GPQA, CommonsenseQA), a MATH-500 matrix or interval of
# well under 100 characters, a Countdown equation of at most 6 numbers.
MAX_RESPONSE_CHARS = 65_536
MAX_ANSWER_CHARS = 1_000
# Per answer, wall clock: math-verify's parse of response and gold, its verify and the Maj@k key together. Honest
# answers take milliseconds (a loaded machine may take 100 times that). Above math-verify's own 5 s per parse and per
# comparison, so that one of those fires first, as in the artifact; this one bounds what they cannot.
MATH_TIMEOUT_S = 10.0
TOO_LONG = "too long"

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"[{}]")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`) whose braces close, stripped; None if there is none.

    One pass with a stack of open braces: a box's content ends at the `}` that pops its `{`. When the last box never
    closes, an earlier one that does is the answer (as before: the former code rescanned from every box start to the
    end, quadratic in the number of unclosed boxes)."""
    starts = {m.end() - 1 for m in _BOX.finditer(text)}
    if not starts:
        return None
    stack: list[int] = []
    best = -1
    end = -1
    for m in _BRACE.finditer(text):
        i = m.start()
        if text[i] == "{":
            stack.append(i)
        elif stack:
            j = stack.pop()
            if j in starts and j > best:
                best, end = j, i
    return text[best + 1 : end].strip() if best >= 0 else None


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
    except Exception:  # math-verify raises on pathological input (and on its timeouts outside the main thread)
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


def _math_check(text: str, gold: str) -> tuple[str, bool] | None:
    """math-verify's part of `verify_math`, run in the worker: (vote key, correct), None when it extracts nothing."""
    from math_verify import verify

    pred = _parse(text, _configs()[0])
    if not pred:
        return None
    gold_parsed = parse_gold(gold)
    try:
        ok = bool(gold_parsed) and verify(gold_parsed, pred)
    except Exception:
        ok = False
    return _answer_key(pred[0]), bool(ok)


def verify_math(response: str, gold: str) -> Verdict:
    """math-verify within bounds (module docstring): too long or past `MATH_TIMEOUT_S` is wrong, with `error`."""
    if len(response) > MAX_RESPONSE_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return Verdict(None, False, False, error=TOO_LONG)
    text = response.translate(_MINUS)
    box = last_boxed(text)
    boxed = box is not None
    if boxed and len(box) > MAX_ANSWER_CHARS:
        return Verdict(None, False, True, error=TOO_LONG)
    status, found = _bounded(_math_check, (text, gold), MATH_TIMEOUT_S)
    if status != "ok":
        return Verdict(None, False, boxed, error=status)
    if found is not None:
        return Verdict(found[0], found[1], boxed)
    fallback = _fallback_answer(text)
    if fallback is None:
        return Verdict(None, False, boxed)
    answer = normalise_number(fallback.strip().rstrip("."))
    return Verdict(answer, answer == normalise_number(gold.translate(_MINUS).strip()), boxed)


# ---------------------------------------------------------------------------------------------------------------
# the bounded worker (a child process: `esbench.tasks.math_worker`)


_WORKER = _Worker(__name__)
os.register_at_fork(after_in_child=lambda: globals().__setitem__("_WORKER", _Worker(__name__)))
atexit.register(lambda: _WORKER._kill(restart=False))


def _bounded(fn, args: tuple, timeout: float) -> tuple[str, object]:
    """`fn(*args)` in the worker within `timeout` seconds: ("ok", value), else (the reason, None)."""
    return _WORKER.call(fn, args, timeout)


def _worker_main() -> None:
    """The child's loop: a JSON request per line on stdin, a JSON reply per line on the original stdout.

    Stray output goes to stderr, so it cannot corrupt a reply. Ctrl-C is the parent's to handle. Address space is
    capped; each request runs under a CPU-time limit a little above the parent's deadline, and the loop ends when
    stdin closes or the parent is gone, so no orphan outlives its parent by more than one deadline."""
    import resource
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)  # 2 GiB, 30 times its own: a MemoryError is a wrong answer
    limit = 2 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    parent = os.getppid()
    _configs()
    import math_verify  # noqa: F401  (loaded before "ready", so the first deadline covers only the work)

    out.write(b"ready\n")
    for line in sys.stdin.buffer:
        if os.getppid() != parent:
            break
        name, args, timeout = json.loads(line)
        used = resource.getrusage(resource.RUSAGE_SELF)
        cpu = int(used.ru_utime + used.ru_stime + timeout) + 2
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu if hard == resource.RLIM_INFINITY else min(cpu, hard), hard))
        try:
            reply = ["ok", globals()[name](*args)]
        except Exception as e:  # a bug or a pathological input; the parent counts the answer wrong
            reply = ["error", f"{type(e).__name__}: {e}"[:200]]
        out.write(json.dumps(reply).encode() + b"\n")


# ---------------------------------------------------------------------------------------------------------------
# multiple choice


_LETTER = re.compile(r"^\(?([A-J])\)?(?:[.:)\s]|$)")


def choice_letter(text: str) -> str | None:
    """The option letter in the last box (`B`, `(B)`, `\\text{B}`, `B. Paris`); None without one.

    Only a box counts: the paper extracts a boxed letter for multiple choice and its system prompt asks for one. The
    former "the answer is (B)" fallback is gone: it credited responses that ignore the requested format, which the
    paper's scoring does not, and it let `answer` and `formatted` disagree.
    """
    return _box_letter(last_boxed(text))


def _box_letter(boxed: str | None) -> str | None:
    """The letter a box's content names; None for a box over `MAX_ANSWER_CHARS` (`strip_latex_text` is quadratic
    in nested `\\text{`)."""
    if boxed is None or len(boxed) > MAX_ANSWER_CHARS:
        return None
    m = _LETTER.match(strip_latex_text(boxed).strip())
    return m.group(1) if m else None


def verify_choice(response: str, gold: str) -> Verdict:
    """Formatted means a box was found (the 0.1 format reward), even when no letter can be read from it."""
    boxed = last_boxed(response)
    if boxed is not None and len(boxed) > MAX_ANSWER_CHARS:
        return Verdict(None, False, True, error=TOO_LONG)
    letter = _box_letter(boxed)
    return Verdict(letter, letter is not None and letter == gold.strip().upper(), boxed is not None)


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
    if len(raw) > MAX_ANSWER_CHARS:  # `strip_latex_text` is quadratic in nested `\text{`; honest equations are short
        return Verdict(None, False, True, error=TOO_LONG)
    expr = countdown_expression(raw)
    if expr is None:
        return Verdict(None, False, True)
    return Verdict(expr.replace(" ", ""), check_countdown(expr, int(g["target"]), [int(n) for n in g["nums"]]), True)


# ---------------------------------------------------------------------------------------------------------------
# MBPP


def extract_code(text: str) -> str | None:
    """The last fenced code block (```python ... ``` preferred), or None: the system prompt asks for exactly one
    Python block, and when a model writes more the last is its final solution."""
    blocks = _fenced_blocks(text, ("python", "py", "Python")) or _fenced_blocks(text, None)
    return blocks[-1].strip() if blocks else None


_SPACE = re.compile(r"\s*")


def _fenced_blocks(text: str, tags: tuple[str, ...] | None) -> list[str]:
    """What `re.findall(r"```(?:python|py|Python)\\s*\\n(.*?)```", text, re.S)` returns with `tags`, and
    `r"```[^\\n]*\\n(.*?)```"` without, in linear time: those regexes rescan to the end of the text from every
    fence that cannot close (``` ``` ``` ... on one line took minutes for a megabyte).

    With `tags`, a fence opens when a tag (the first that matches, as the alternation tries them) is followed by
    whitespace holding a newline; the body starts after the run's last newline. Without, the body starts after the
    fence's line. Either way it ends at the next ```. A fence with no closing ``` after its body's start means none
    after it can close either, so the scan stops there."""
    blocks: list[str] = []
    pos = 0
    while (p := text.find("```", pos)) >= 0:
        if tags is None:
            start = text.find("\n", p + 3) + 1
            if not start:
                break
        else:
            tag = next((t for t in tags if text.startswith(t, p + 3)), None)
            run = _SPACE.match(text, p + 3 + len(tag)).end() if tag else -1
            start = text.rfind("\n", p + 3 + len(tag), run) + 1 if tag else 0
            if not start:
                pos = p + 1
                continue
        end = text.find("```", start)
        if end < 0:
            break
        blocks.append(text[start:end])
        pos = end + 3
    return blocks


@lru_cache(maxsize=1 << 16)  # lm-eval's process_results and esbench's scoring both verify each sample
def verify_mbpp(response: str, gold: str) -> Verdict:
    from esbench.tasks.mbpp_judge import run_tests

    g = json.loads(gold)
    code = extract_code(response)
    if code is None:
        return Verdict(None, False, False)
    ok = run_tests(code, list(g["test_list"]), list(g.get("test_imports") or []), timeout=float(g.get("timeout", 10)))
    return Verdict(code, ok, True)
