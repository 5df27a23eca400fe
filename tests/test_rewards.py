"""The paper artifact's ES math reward (`paper_math_reward`): the last boxed answer, the MATH normalisation, string
equality; 1 / 0.1 / 0. The differential cases (tests/fixtures/paper_reward_cases.json) pin it to the artifact's own
function, `score_training_response` in yunpengba7/understanding-es; the expected values come from that function's
rule, case by case, not from esbench."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from esbench.rewards import PAPER_REWARD_VERSION, last_boxed, math_normalise, paper_math_reward

CASES = json.loads((Path(__file__).parent / "fixtures" / "paper_reward_cases.json").read_text())["cases"]


def _gold(case: dict) -> str:
    """The gold the reward receives: as given, or from a GSM8K answer through esbench's GSM8K loader."""
    if "gold" in case:
        return case["gold"]
    from esbench.tasks.hub import SOURCES

    return SOURCES["gsm8k"].normalise({"question": "q", "answer": case["gsm8k_answer"]}, 0)["answer"]


@pytest.mark.parametrize("case", CASES, ids=[f"{i:03d}-{c['category']}" for i, c in enumerate(CASES)])
def test_the_artifacts_reward_case_by_case(case):
    got = paper_math_reward(case["response"], _gold(case), 1.0, case.get("format_reward", 0.1))
    assert got == case["expected"], case.get("note", "")


def test_the_cases_cover_every_category_the_issue_names():
    counts: dict[str, int] = {}
    for c in CASES:
        counts[c["category"]] = counts.get(c["category"], 0) + 1
    named = {
        "values", "boxed-whitespace", "fbox", "box-spaces", "a-slash-b", "text-units", "nested-braces", "last-box",
        "unbalanced", "fractions", "sqrt", "degrees", "dollars-percent", "leading-dot", "lhs-rule", "one-half",
        "gold-as-given", "gsm8k-gold",
    }  # fmt: skip
    assert len(CASES) >= 120 and named <= set(counts) and min(counts[k] for k in named) >= 4
    assert {c["expected"] for c in CASES} >= {0.0, 0.1, 1.0, 0.5}


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


def test_last_boxed_is_the_last_boxed_with_a_brace():
    assert last_boxed(r"so \boxed{\frac{1}{2}} and then \boxed{a{b}c}") == "a{b}c"
    assert last_boxed("\\boxed \n { 7 }") == "7"  # whitespace before the brace, the contents stripped
    assert last_boxed(r"$\boxed 7$ done") is None  # no brace: no answer
    assert last_boxed(r"\boxed{3} \fbox{4}") == "3"  # \fbox is not a box
    assert last_boxed(r"\boxed{3} \boxed{4") is None  # the last box never closes: no fallback to an earlier one
    assert last_boxed("no box at all") is None


def test_normalisation_keeps_what_the_original_keeps():
    assert math_normalise("03/4") == r"\frac{03}{4}"  # digits as written
    assert math_normalise("-3/4") == r"\frac{-3}{4}"
    assert math_normalise(r"\frac{1}2") == r"\frac{1}2"  # a braced numerator is left alone
    assert math_normalise("50%") == "50%"  # only an escaped percent sign is dropped
    assert math_normalise(r"5\text{ m}\text{ s}") == r"5\text{m}\text{s}"  # two unit suffixes: kept, and it goes on


MB = 1 << 20


@pytest.mark.parametrize(
    "response",
    [
        "x" * MB + r"\boxed{18}",
        r"\boxed{" + "1" * MB + "}",
        r"\boxed" + "{" * (MB // 2) + "}" * (MB // 2),  # deep nesting
        r"\boxed" + "{" * MB,  # never closes
        r"\boxed{" + "{}" * (MB // 2),  # depth 1-2 all the way, never closes
        r"\boxed{1}" * (MB // 9),
        r"\boxed{" + r"\frac12" * (MB // 7) + "}",
        r"\boxed{" + r"\sqrt2" * (MB // 6) + "}",
        r"\boxed{" + r"5\text{ m}" * (MB // 10) + "}",
        r"\boxed" + " " * MB + "{18}",
    ],
    ids=["text", "long-box", "nested", "unclosed", "shallow", "boxes", "fracs", "sqrts", "units", "spaces"],
)
def test_a_megabyte_response_scores_in_well_under_a_second(response):
    """Linear time in the response: a rollout that never stops must not stall a population's scoring."""
    best = min(_timed(paper_math_reward, response, "18") for _ in range(2))
    assert best < 1.0, f"{best:.2f} s"


def _timed(f, *args) -> float:
    t = time.perf_counter()
    f(*args)
    return time.perf_counter() - t


def test_the_spec_records_the_paper_rules_version():
    """`reward: paper` cells carry the rule's version in their spec, so their ids moved with the rule; verifier
    cells carry none and keep theirs."""
    from pydantic import ValidationError

    from esbench.spec_schema import DatasetSpec

    assert DatasetSpec(task="gsm8k", reward="paper").model_dump() == {
        "task": "gsm8k",
        "size": None,
        "reward": "paper",
        "reward_version": PAPER_REWARD_VERSION,
    }
    assert PAPER_REWARD_VERSION == 2  # 1 was the rule before the artifact's cases
    assert DatasetSpec(task="gsm8k").model_dump() == {"task": "gsm8k", "size": None, "reward": "verifier"}
    with pytest.raises(ValidationError, match="implements version"):
        DatasetSpec(task="gsm8k", reward="paper", reward_version=1)
    with pytest.raises(ValidationError, match="belongs to"):
        DatasetSpec(task="gsm8k", reward_version=PAPER_REWARD_VERSION)


def test_custom_values():
    assert paper_math_reward(r"\boxed{7}", "7", correct=2.0, formatted=0.5) == 2.0
    assert paper_math_reward(r"\boxed{8}", "7", correct=2.0, formatted=0.5) == 0.5


def test_a_suite_selects_the_training_reward_per_dataset():
    """`reward: paper` swaps the verifier for the artifact's rule in training; other tasks refuse it."""
    import pytest
    from pydantic import ValidationError

    from esbench.rewards import Reward
    from esbench.spec_schema import DatasetSpec
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
