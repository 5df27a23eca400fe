"""The paper artifact's ES math reward (`paper_math_reward`): the last boxed answer, the MATH normalisation, string
equality; 1 / 0.1 / 0. Cases are the rule's own statements in ../shared/reference/paper_protocol.md (section 2) and
edges derived from it, each chosen where math-verify would score differently."""

from __future__ import annotations

import pytest

from esbench.rewards import last_boxed, math_normalise, paper_math_reward


@pytest.mark.parametrize(
    ("response", "gold", "reward"),
    [
        (r"Adding them up, the total is \boxed{18}.", "18", 1.0),
        (r"First \boxed{20}, but on reflection the answer is \boxed{18}", "18", 1.0),  # the LAST box counts
        (r"First \boxed{18}, then I revised it to \boxed{20}", "18", 0.1),
        ("The answer is 18.", "18", 0.0),  # correct but unboxed: 0 (math-verify would give 1)
        (r"\boxed{1,024}", "1024", 0.1),  # commas are not normalised on the prediction side
        (r"\boxed{18.0}", "18", 0.1),  # nor are trailing zeros
        (r"\boxed{\dfrac{1}{2}}", r"\frac{1}{2}", 1.0),
        (r"\boxed{0.5}", r"\frac12", 1.0),
        (r"\boxed{3/4}", r"\frac{3}{4}", 1.0),
        (r"\boxed{x = 5}", "5", 1.0),  # a short left-hand side is dropped
        (r"\boxed{5\text{ cm}}", "5", 1.0),  # trailing units
        (r"\boxed{90^\circ}", "90", 1.0),
        (r"\boxed{\$42}", "42", 1.0),
        (r"\boxed{50\%}", "50", 1.0),
        (r"\boxed{\left(1, 2\right)}", "(1,2)", 1.0),
        (r"\boxed{\sqrt3}", r"\sqrt{3}", 1.0),
        (r"\boxed{", "5", 0.0),  # a box that never closes is no box
    ],
)
def test_the_artifacts_rule(response, gold, reward):
    assert paper_math_reward(response, gold) == reward


def test_last_boxed_matches_braces_and_knows_the_unbraced_form():
    assert last_boxed(r"so \boxed{\frac{1}{2}} and then \boxed{a{b}c}") == "a{b}c"
    assert last_boxed(r"$\boxed 7$ done") == "7"
    assert last_boxed(r"\fbox{3}") == "3"
    assert last_boxed("no box at all") is None


def test_normalisation_keeps_what_the_original_keeps():
    assert math_normalise("03/4") == "03/4"  # not a canonical integer ratio
    assert math_normalise("-3/4") == r"\frac{-3}{4}"
    assert math_normalise(r"\frac{1}2") == r"\frac{1}2"  # a braced numerator is left alone
    assert math_normalise("50%") == "50%"  # only an escaped percent sign is dropped
    with pytest.raises(ValueError):
        math_normalise(r"5\text{ m}\text{ s}")
    # where the original raises, the raw strings are compared
    assert paper_math_reward(r"\boxed{5\text{ m}\text{ s}}", r"5\text{ m}\text{ s}") == 1.0


def test_custom_values():
    assert paper_math_reward(r"\boxed{7}", "7", correct=2.0, formatted=0.5) == 2.0
    assert paper_math_reward(r"\boxed{8}", "7", correct=2.0, formatted=0.5) == 0.5


def test_a_suite_selects_the_training_reward_per_dataset():
    """`reward: paper` swaps the verifier for the artifact's rule in training; other tasks refuse it."""
    import pytest
    from pydantic import ValidationError

    from esbench.rewards import Reward
    from esbench.spec import DatasetSpec
    from esbench.tasks import get_task

    gsm = get_task("gsm8k")
    unboxed = "The answer is 1024."
    verifier, paper = Reward(gsm), Reward(gsm, rule=DatasetSpec(task="gsm8k", reward="paper").reward)
    assert verifier(unboxed, "1024") == 1.0 and paper(unboxed, "1024") == 0.0  # math-verify accepts it unboxed
    assert verifier("\\boxed{1,024}", "1024") == 1.0 and paper("\\boxed{1,024}", "1024") == 0.1
    assert paper.with_values(2.0, 0.5)("\\boxed{1,024}", "1024") == 0.5  # the method's values, the suite's rule
    assert DatasetSpec(task="gsm8k").reward == "verifier"
    with pytest.raises(ValidationError, match="not a math task"):
        DatasetSpec(task="commonsense_qa", reward="paper")
