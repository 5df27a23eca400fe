"""Verifiers of the paper's tasks on gold edge cases (math-verify as the authors configure it, letters, HotpotQA EM,
Countdown equations, MBPP tests in the sandbox)."""

from __future__ import annotations

import json

import pytest

from esbench.rewards import Reward
from esbench.tasks import get_task
from esbench.tasks.paper_verifiers import (
    answer_tag,
    check_countdown,
    choice_letter,
    extract_code,
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
        ("\\boxed{C}", "C"),
        ("\\boxed{(C)}", "C"),
        ("\\boxed{\\text{C}}", "C"),
        ("\\boxed{\\text{D}}", "D"),
        ("\\boxed{A. bank}", "A"),
        ("The answer is (E).", None),  # boxed letters only (App. G.4): no "answer is" fallback any more
        ("\\boxed{Paris}", None),
        ("I am not sure.", None),
    ],
)
def test_choice_letter_extraction(response, letter):
    assert choice_letter(response) == letter


def test_choice_verdict_uses_the_last_box_and_formatted_means_a_box():
    assert verify_choice("First \\boxed{A}, no wait: \\boxed{C}", "C").correct
    assert not verify_choice("\\boxed{A}", "C").correct
    assert verify_choice("\\boxed{A}", "C").formatted  # boxed but wrong: the 0.1 format reward
    unboxed = verify_choice("The answer is (C).", "C")
    assert not unboxed.correct and not unboxed.formatted and unboxed.answer is None
    no_letter = verify_choice("\\boxed{Paris}", "C")
    assert no_letter.formatted and no_letter.answer is None and not no_letter.correct


@pytest.mark.parametrize(
    ("response", "content"),
    [
        ("<answer>Paris</answer>", "Paris"),
        ("<answer>  Eiffel Tower \n</answer>", "Eiffel Tower"),  # whitespace stripped
        ("<answer>Lyon</answer> on reflection <answer>Paris</answer>", "Paris"),  # the last pair wins
        ("<answer>draft <answer>Paris</answer>", "Paris"),  # an unclosed earlier tag does not swallow the last pair
        ("<answer>Paris</answer> then <answer>unclosed", "Paris"),
        ("<answer></answer>", ""),
        ("The answer is Paris.", None),  # no tags
        ("\\boxed{Paris}", None),  # a box is not an answer tag
        ("<answer>Paris", None),  # never closed
        ("</answer>Paris<answer>", None),  # closing before opening
    ],
)
def test_answer_tag_extraction(response, content):
    assert answer_tag(response) == content


def test_hotpot_reads_the_tags_only():
    assert squad_normalise("The  Eiffel Tower!") == "eiffel tower"
    assert verify_hotpot("<answer>the Eiffel Tower</answer>", "Eiffel Tower").correct
    assert verify_hotpot("Both are American.\n<answer> Yes. </answer>", "yes").correct
    assert verify_hotpot("<answer>no</answer> Actually: <answer>yes</answer>", "yes").correct  # last pair
    assert not verify_hotpot("<answer>Eiffel</answer>", "Eiffel Tower").correct  # exact match, not containment
    assert verify_hotpot("<answer>Eiffel</answer>", "Eiffel Tower").formatted
    for untagged in ("\\boxed{yes}", "So the answer is: Yes.", "no answer"):
        v = verify_hotpot(untagged, "yes")
        assert v.answer is None and not v.correct and not v.formatted, untagged
    empty = verify_hotpot("<answer> </answer>", "yes")
    assert empty.answer is None and empty.formatted and not empty.correct


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


def test_countdown_reads_answer_tags_only_and_unicode_operators():
    gold = json.dumps({"target": 98, "nums": [44, 19, 35]})
    assert verify_countdown("<answer>44 + 19 + 35 = 98</answer>", gold).correct
    assert verify_countdown("<answer>(44 \u2212 35) \u00d7 19 - 73</answer>", gold).formatted
    assert verify_countdown("<answer>44 \\times 2 + 19 - 35 + 26</answer>", gold).correct is False
    assert verify_countdown("<answer>1 + 2</answer> no: <answer> 35 + 19 + 44 </answer>", gold).correct  # last pair
    boxed = verify_countdown("\\boxed{44 + 19 + 35}", gold)  # a box is no longer read
    assert boxed.answer is None and not boxed.correct and not boxed.formatted
    assert verify_countdown("I cannot solve it", gold).answer is None
    empty = verify_countdown("<answer></answer>", gold)
    assert empty.answer is None and empty.formatted and not empty.correct


def test_extract_code_takes_one_python_block():
    assert extract_code("Sure:\n```python\ndef f():\n    return 1\n```\n") == "def f():\n    return 1"
    assert extract_code("```python\nx = 1\n```\nfixed:\n```python\nx = 2\n```") == "x = 2"  # the last block
    assert extract_code("```\ny = 3\n```") == "y = 3"  # an untagged fence when there is no python one
    assert extract_code("def f(): return 1") is None


def test_mbpp_runs_the_tests_in_the_sandbox():
    gold = json.dumps({"test_list": ["assert add(2, 3) == 5"], "test_imports": []})
    good = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```"
    bad = "```python\ndef add(a, b):\n    return a - b\n```"
    assert verify_mbpp(good, gold).correct
    assert not verify_mbpp(bad, gold).correct
    assert verify_mbpp("def add(a, b): return a + b", gold).answer is None  # no code block, nothing run
    hostile = "```python\nimport os\nos.remove('/etc/hostname')\ndef add(a, b):\n    return a + b\n```"
    assert not verify_mbpp(hostile, gold).correct
