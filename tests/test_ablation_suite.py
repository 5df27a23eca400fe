"""The ablation suites (Fig. 1(c)) evaluate held-out tasks (issue 23): the paper says two-point ES brings "no
training-reward or held-out advantage", so the held-out half of that claim needs held-out evaluations, the easy
setting's five, with the same eval block for every arm."""

from __future__ import annotations

from pathlib import Path

import pytest

from esbench.spec import load_suite

REPO = Path(__file__).resolve().parents[1]


def _suite(name: str):
    return load_suite(REPO / "suites" / f"{name}.yaml")


def test_paper_ablations_evaluate_the_easy_settings_held_out_tasks():
    easy, abl = _suite("paper-easy").spec.eval, _suite("paper-ablations").spec.eval
    assert abl.held_out == easy.held_out == ["commonsense_qa", "hotpotqa", "countdown", "gpqa_diamond", "mbpp"]
    assert abl.tasks == easy.tasks  # GSM8K (the train task) and the five held-out tasks
    # and at the easy setting's evaluation settings, so the held-out numbers sit beside Table 2's
    for key in ("n", "k", "temperature", "top_p", "max_new_tokens", "greedy", "limit"):
        assert getattr(abl, key) == getattr(easy, key), key


@pytest.mark.parametrize("name", ["paper-ablations", "tiny-ablations"])
def test_every_arm_is_evaluated_on_the_same_held_out_tasks(name):
    suite = _suite(name)
    cells = suite.cells()
    methods = {c.spec["method"]["config"].get("antithetic") for c in cells}
    assert methods == {False, True}  # one-point and two-point are both there
    evals = [c.spec["eval"] for c in cells]
    assert all(e == evals[0] for e in evals)  # one eval block: like with like
    held = evals[0]["held_out"]
    train = {c.spec["dataset"]["task"] for c in cells}
    assert held and set(held) <= set(evals[0]["tasks"]) and not set(held) & train


def test_tiny_ablations_mirror_the_paper_suite_with_the_tiny_held_out_tasks():
    tiny, full = _suite("tiny-ablations").spec.eval, _suite("tiny").spec.eval
    assert tiny.held_out == full.held_out == ["tiny_reverse", "tiny_max"]
    assert tiny.limit == 50 and tiny.n == 4  # the CPU budget: 50 problems x 4 samples per task
