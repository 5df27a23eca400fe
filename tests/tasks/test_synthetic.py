"""Synthetic families: deterministic splits, disjoint train/test, and gold targets that pass their verifier."""

from __future__ import annotations

import pytest

from esbench.tasks import TASKS, get_task, rows_hash, synthetic

SYNTHETIC = sorted(name for name, task in TASKS.items() if task.source is None)


@pytest.mark.parametrize("name", SYNTHETIC)
def test_gold_targets_verify_and_splits_are_disjoint(name):
    task = get_task(name)
    test = task.rows("test", 200)
    train = task.rows("train", 300)
    assert not {r["question"] for r in test} & {r["question"] for r in train}
    assert len({r["question"] for r in test}) == 200
    for row in test + train:
        assert task.verify(synthetic.target(row), row["answer"]).correct, row


@pytest.mark.parametrize("name", SYNTHETIC)
def test_splits_are_deterministic_and_prefix_stable(name):
    task = get_task(name)
    assert rows_hash(task.rows("test", 50)) == rows_hash(task.rows("test", 50))
    assert task.rows("test", 100)[:50] == task.rows("test", 50), "a smaller limit is a prefix of a larger one"


def test_arith_worked_solution_is_consistent():
    row = synthetic.make_split("arith", "test", 1)[0]
    value = None
    for line in row["solution"].split("\n"):
        lhs, rhs = line.split("=")
        assert eval(lhs) == int(rhs)  # noqa: S307 - digits and +/- only
        value = int(rhs)
    assert str(value) == row["answer"]
