"""Hostile responses against the paper's verifiers (issue 22, "the math verifiers can be hung"): each one is a fast
wrong answer, recorded as such in `Verdict.error`, and honest answers are judged as before.

No pytest-timeout here: a call that could hang runs in a daemon thread joined with a deadline, or (the power tower,
which hung only in the main thread, where math-verify's signal timeouts apply) in a subprocess with a timeout.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import threading
import time

import pytest

from esbench.rewards import Reward
from esbench.tasks import get_task
from esbench.tasks import paper_verifiers as pv
from esbench.tasks.verdict import Verdict

DEADLINE_S = 5.0  # generous: each of these takes well under a second on one core


def _within(seconds: float, fn, *args):
    """`fn(*args)`, failing the test (instead of hanging it) when it runs past `seconds`."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn(*args)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} ran past {seconds} s"
    return out[0]


def test_verdict_error_defaults_to_none():
    assert Verdict("1", True).error is None
    assert Verdict(None, False, True, error="timeout").formatted


# ---------------------------------------------------------------------------------------------------------------
# linear scans


def test_last_boxed_is_linear_in_unclosed_boxes():
    """100k unclosed boxes (the former scan rescanned to the end from each: about 40 minutes)."""
    text = "\\boxed{42} " + "\\boxed{" * 100_000 + "x" * 1_000_000
    assert len(text) > 1_500_000
    assert _within(DEADLINE_S, pv.last_boxed, text) == "42"  # the last box that closes, as before
    v = _within(DEADLINE_S, pv.verify_choice, text.replace("42", "B"), "B")
    assert (v.answer, v.correct) == ("B", True)


def test_last_boxed_keeps_its_rules():
    assert pv.last_boxed("\\boxed{a} \\boxed{b{c}d}") == "b{c}d"
    assert pv.last_boxed("\\boxed{3} \\boxed{4") == "3"  # an unclosed last box falls back to one that closes
    assert pv.last_boxed("\\boxed{x \\boxed{y} z}") == "y"  # the last box to start, not the outermost
    assert pv.last_boxed("\\fbox \n{ 5 }") == "5"
    assert pv.last_boxed("} \\boxed{1}}") == "1"
    assert pv.last_boxed("\\boxed 7") is None


def test_choice_box_of_nested_text_is_too_long():
    box = "\\boxed{" + "\\text{" * 200_000 + "B" + "}" * 200_001
    v = _within(DEADLINE_S, pv.verify_choice, box, "B")
    assert (v.answer, v.correct, v.formatted, v.error) == (None, False, True, "too long")
    assert pv.verify_choice("\\boxed{\\text{B. Paris}}", "B").correct


def test_countdown_answer_of_nested_text_is_too_long():
    gold = json.dumps({"target": 1, "nums": [1]})
    resp = "<answer>" + "\\text{" * 200_000 + "1" + "}" * 200_000 + "</answer>"
    v = _within(DEADLINE_S, pv.verify_countdown, resp, gold)
    assert (v.correct, v.formatted, v.error) == (False, True, "too long")
    assert pv.verify_countdown("<answer>\\text{1}</answer>", gold).correct


def test_extract_code_is_linear_in_fences_that_never_close():
    """In a subprocess: the former regexes hold the GIL for minutes, so a thread's deadline could not fire."""
    code = (
        "from esbench.tasks.paper_verifiers import extract_code as f;"
        "import json; print(json.dumps([f('``` ' * 400_000), f('```python' + '\\n' * 1_000_000),"
        "f('```python\\n1```' + ' ```' * 300_000)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE_S + 10)
    assert json.loads(out.stdout) == [None, None, "1"], out.stderr[-2000:]


def test_extract_code_matches_the_regexes_it_replaces():
    """The former regexes, on random mixes of the characters they care about."""
    rng = random.Random(0)
    alphabet = ["```", "`", "python", "py", "Python", "pyt", "\n", " ", "\t", "\u00a0", "x", "js"]
    for _ in range(5_000):
        t = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        assert pv._fenced_blocks(t, ("python", "py", "Python")) == re.findall(
            r"```(?:python|py|Python)\s*\n(.*?)```", t, re.S
        ), t
        assert pv._fenced_blocks(t, None) == re.findall(r"```[^\n]*\n(.*?)```", t, re.S), t


# ---------------------------------------------------------------------------------------------------------------
# math: length caps


def test_math_response_over_the_cap_is_too_long():
    """1.6 MB of unclosed boxes hung the former `last_boxed`; over `MAX_RESPONSE_CHARS` nothing is parsed."""
    text = "so the answer is \\boxed{1} " + "\\boxed{" * 100_000 + "1" * 900_000
    v = _within(DEADLINE_S, pv.verify_math, text, "1")
    assert (v.answer, v.correct, v.formatted, v.error) == (None, False, False, "too long")


def test_math_boxed_answer_over_the_cap_is_too_long():
    """A 2,000-character box that sympy would sum to the gold: judged correct before, now refused unparsed."""
    n = pv.MAX_ANSWER_CHARS // 2 + 1
    v = _within(DEADLINE_S, pv.verify_math, "\\boxed{" + "+".join(["1"] * n) + "}", str(n))
    assert (v.correct, v.formatted, v.error) == (False, True, "too long")


# ---------------------------------------------------------------------------------------------------------------
# math: the time limit


def test_power_tower_is_a_wrong_answer_within_the_limit():
    """In the main thread (where math-verify's alarms work) this never finished: sympy's `float()` of the tower, for
    the vote key, runs outside them. Now it is wrong, with `error="timeout"`, after `MATH_TIMEOUT_S`."""
    code = (
        "import json, time; from esbench.tasks import paper_verifiers as pv;"
        "pv.verify_math('\\\\boxed{1}', '1'); t = time.monotonic();"  # the worker started: time the verdict only
        "v = pv.verify_math('\\\\boxed{9^{9^{9^{9^{9}}}}}', '1');"
        "h = pv.verify_math('\\\\boxed{\\\\frac{1}{2}}', '0.5');"
        "print(json.dumps([time.monotonic() - t, v.correct, v.formatted, v.error, h.correct]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=pv.MATH_TIMEOUT_S + 60)
    assert out.returncode == 0, out.stderr[-2000:]
    took, correct, formatted, error, honest = json.loads(out.stdout.splitlines()[-1])
    assert (correct, formatted, error) == (False, True, "timeout")
    assert took < pv.MATH_TIMEOUT_S + 10  # the tower's limit, the replacement's start-up and the honest answer
    assert honest  # the replaced worker judges the next answer


BOMBS = [
    "\\boxed{10^{10^{10}}}",  # a bigint power in C: the alarm cannot interrupt it
    "\\boxed{(10^{10})!}",
    "The answer is 9**9**9**9",  # no box: math-verify's expression extraction finds it
]


def test_sympy_bombs_are_wrong_within_the_limit():
    """In the main thread of a subprocess, as the tower, with a 2 s limit."""
    code = (
        "import json, sys, time; from esbench.tasks import paper_verifiers as pv; pv.MATH_TIMEOUT_S = 2.0;"
        "pv.verify_math('\\boxed{1}', '1'); out = []\n"
        "for r in json.loads(sys.argv[1]):\n"
        "    t = time.monotonic(); v = pv.verify_math(r, '1')\n"
        "    out.append([time.monotonic() - t, v.answer, v.correct, v.error])\n"
        "print(json.dumps(out))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(BOMBS)], capture_output=True, text=True, timeout=len(BOMBS) * 10 + 30
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for bomb, (took, answer, correct, error) in zip(BOMBS, json.loads(out.stdout.splitlines()[-1]), strict=True):
        assert (answer, correct, error) == (None, False, "timeout"), bomb
        assert took < 2.0 + 5, bomb  # the limit and the replacement worker's start-up


def test_a_timeout_earns_only_the_format_reward(monkeypatch):
    """Training rewards go through the same bound: a boxed bomb is "boxed but wrong" (in this main thread)."""
    monkeypatch.setattr(pv, "MATH_TIMEOUT_S", 2.0)
    t = time.monotonic()
    assert Reward(get_task("gsm8k"))("\\boxed{9^{9^{9^{9^{9}}}}}", "1") == pytest.approx(0.1)
    assert time.monotonic() - t < 2.0 + 5


# ---------------------------------------------------------------------------------------------------------------
# math: honest answers


def test_math_is_judged_off_the_main_thread():
    """math-verify's `signal.alarm` raises off the main thread (a threaded or async Ray actor, a reward thread): the
    former code then fell back to string comparison, and `\\frac{1}{2}` against 0.5 was wrong."""
    v = _within(30, pv.verify_math, "so \\boxed{\\frac{1}{2}}", "0.5")
    assert (v.answer, v.correct, v.error) == ("0.5", True, None)


def test_a_dead_worker_is_replaced():
    assert pv.verify_math("\\boxed{7}", "7").correct  # the worker is up
    pv._WORKER.proc.kill()
    pv._WORKER.proc.wait()
    v = pv.verify_math("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}")
    assert (v.correct, v.error) == (True, None)


def test_evidence_rows_name_the_errors():
    """Per-problem evidence says which responses were given up on; ordinary rows keep their keys."""
    from esbench.evaluation import score_samples

    doc = {"id": "g0", "question": "q", "answer": "1"}
    long = "\\boxed{1} " + "x" * pv.MAX_RESPONSE_CHARS
    rows = score_samples("gsm8k", [{"doc_id": 0, "doc": doc, "resps": [["\\boxed{1}", long]]}])
    assert (rows[0]["correct"], rows[0]["errors"]) == ([True, False], [None, "too long"])
    assert "errors" not in score_samples("gsm8k", [{"doc_id": 0, "doc": doc, "resps": [["\\boxed{1}"]]}])[0]
