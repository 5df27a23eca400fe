"""Verifiers of the paper's tasks on gold edge cases (math-verify as the authors configure it, letters, HotpotQA EM,
Countdown equations, MBPP tests in the sandbox)."""

from __future__ import annotations

import json

import pytest

from esbench.rewards import Reward
from esbench.tasks import get_task
from esbench.tasks.paper_verifiers import (
    check_countdown,
    choice_letter,
    last_boxed,
    squad_normalise,
    verify_choice,
    verify_countdown,
    verify_hotpot,
    verify_math,
    verify_mbpp,
)


@pytest.mark.parametrize(
    ("response", "gold", "correct"),
    [
        ("So she pays \\boxed{1,234} dollars.", "1234", True),  # thousands comma in the answer
        ("\\boxed{1{,}234}", "1234", True),  # LaTeX-braced comma
        ("The change is \\boxed{-5}.", "-5", True),  # negative
        ("The change is \\boxed{\u22125}.", "-5", True),  # unicode minus
        ("\\boxed{5}", "-5", False),  # sign matters
        ("It costs \\boxed{2.50}", "2.5", True),  # decimals, trailing zero
        ("It costs \\boxed{2.05}", "2.5", False),
        ("\\boxed{\\frac{1}{2}}", "0.5", True),  # fraction vs decimal
        ("Result: \\boxed{\\boxed{7}}", "7", True),  # nested box
        ("\\boxed{\\$18}", "18", True),  # units/currency stripped
        ("First \\boxed{3}, then \\boxed{4}", "4", False),  # several boxes: the authors' boxed="all" gives {3, 4}
        ("I think the answer is 42.", "42", True),  # no box: expression fallback, as the artifact does
        ("No idea.", "42", False),  # missing answer
        ("\\boxed{\\frac{5}{6}}", "\\frac{5}{6}", True),  # LaTeX gold (MATH-500, DeepScaleR)
        ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}", True),
        ("\\boxed{0.75}", "\\frac{3}{4}", True),
        ("\\boxed{\\frac{3}{5}}", "\\frac{3}{4}", False),
    ],
)
def test_math_verify_edge_cases(response, gold, correct):
    assert verify_math(response, gold).correct is correct


def test_math_answers_are_normalised_for_majority_votes():
    a = verify_math("\\boxed{1,234}", "1234")
    b = verify_math("so \\boxed{1234.0}", "1234")
    assert a.answer == b.answer
    assert verify_math("nothing here", "1").answer is None


def test_math_format_reward_needs_a_box():
    """ES reward (Table 14): 1 correct, 0.1 boxed but wrong, 0 otherwise; an unboxed number earns no format bonus."""
    reward = Reward(get_task("gsm8k"))
    assert reward("\\boxed{72}", "72") == 1.0
    assert reward("\\boxed{71}", "72") == pytest.approx(0.1)
    assert reward("The answer is 71", "72") == 0.0
    assert reward("The answer is 72", "72") == 1.0
    assert reward("", "72") == 0.0


def test_last_boxed_balances_braces_and_ignores_unclosed():
    assert last_boxed("\\boxed{\\frac{1}{2}} and \\boxed{x^{2}}") == "x^{2}"
    assert last_boxed("\\boxed{unclosed") is None
    assert last_boxed("no box") is None


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("\\boxed{B}", "B"),
        ("\\boxed{(C)}", "C"),
        ("\\boxed{\\text{D}}", "D"),
        ("\\boxed{A. bank}", "A"),
        ("The answer is (E).", "E"),
        ("\\boxed{Paris}", None),
        ("I am not sure.", None),
    ],
)
def test_choice_letter_extraction(response, letter):
    assert choice_letter(response) == letter


def test_choice_verdict_uses_the_last_box():
    assert verify_choice("First \\boxed{A}, no wait: \\boxed{C}", "C").correct
    assert not verify_choice("\\boxed{A}", "C").correct
    assert not verify_choice("nothing", "C").formatted


def test_hotpot_squad_normalisation_and_exact_match():
    assert squad_normalise("The  Eiffel Tower!") == "eiffel tower"
    assert verify_hotpot("\\boxed{\\text{the Eiffel Tower}}", "Eiffel Tower").correct
    assert verify_hotpot("So the answer is: Yes.", "yes").correct
    assert not verify_hotpot("\\boxed{Eiffel}", "Eiffel Tower").correct  # exact match, not containment
    assert verify_hotpot("no answer", "yes").answer is None


@pytest.mark.parametrize(
    ("expr", "ok"),
    [
        ("44 + 19 + 35", True),
        ("(44 - 35) * 19 - 73", False),  # 73 is not a given number
        ("44 + 19 + 35 + 0", False),  # extra number
        ("44 + 19", False),  # a number unused
        ("44 + 19 + 35 + 35 - 35", False),  # a number reused
        ("35 + 19 + 44", True),
        ("98", False),
        ("__import__('os').system('true')", False),  # no names, calls or attributes: never eval'd
        ("44 ** 19 + 35", False),  # power is not an allowed operator
        ("44 / (19 - 19) + 35", False),  # division by zero
    ],
)
def test_countdown_checker(expr, ok):
    assert check_countdown(expr, 98, [44, 19, 35]) is ok


def test_countdown_division_is_exact():
    assert check_countdown("(6 / 4) * 4 + 2", 8, [6, 4, 4, 2])
    assert not check_countdown("7 / 2 + 1", 4, [7, 2, 1])  # 4.5, no integer truncation


def test_countdown_reads_box_tags_and_unicode_operators():
    gold = json.dumps({"target": 98, "nums": [44, 19, 35]})
    assert verify_countdown("\\boxed{44 + 19 + 35 = 98}", gold).correct
    assert verify_countdown("<answer>(44 \u2212 35) \u00d7 19 - 73</answer>", gold).formatted
    assert verify_countdown("\\boxed{44 \\times 2 + 19 - 35 + 26}", gold).correct is False
    assert verify_countdown("I cannot solve it", gold).answer is None


def test_mbpp_runs_the_tests_in_the_sandbox():
    gold = json.dumps({"test_list": ["assert add(2, 3) == 5"], "test_imports": []})
    good = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```"
    bad = "```python\ndef add(a, b):\n    return a - b\n```"
    assert verify_mbpp(good, gold).correct
    assert not verify_mbpp(bad, gold).correct
    assert verify_mbpp("def add(a, b): return a + b", gold).answer is None  # no code block, nothing run
    hostile = "```python\nimport os\nos.remove('/etc/hostname')\ndef add(a, b):\n    return a + b\n```"
    assert not verify_mbpp(hostile, gold).correct
