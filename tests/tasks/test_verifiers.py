"""Answer extraction and checking: the same rule reads gold GSM8K answers and model outputs."""

from __future__ import annotations

import pytest

from esbench.tasks.verifiers import hash_answer, verify_exact, verify_hash


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("12+7=19\n19-3=16\n#### 16", "16"),
        ("#### -4", "-4"),
        ("#### \u22124", "-4"),  # unicode minus
        ("total #### 1,234", "1234"),
        ("#### 2.50", "2.5"),
        ("#### 3.0", "3"),
        ("#### -0", "0"),
        ("no answer here", None),
        ("#### ", None),
        ("#### 5\n#### 6", "5"),  # first answer counts
    ],
)
def test_hash_answer(text, answer):
    assert hash_answer(text) == answer


def test_verify_hash_separates_correct_formatted_and_unformatted():
    assert verify_hash("1+1=2\n#### 2", "2").correct
    wrong = verify_hash("#### 3", "2")
    assert not wrong.correct and wrong.formatted
    missing = verify_hash("2", "2")
    assert not missing.correct and not missing.formatted


def test_verify_exact_keeps_leading_zeros():
    assert verify_exact("#### 0123", "0123").correct
    assert not verify_exact("#### 123", "0123").correct


def test_paper_verifiers_do_not_import_verifiers():
    """`verifiers` imports `paper_verifiers` lazily; the shared pieces live in `verdict`, so there is no cycle."""
    import ast
    import inspect

    from esbench.tasks import paper_verifiers, verdict, verifiers

    tree = ast.parse(inspect.getsource(paper_verifiers))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "esbench.tasks.verifiers" not in imported and "esbench.tasks.verdict" in imported
    assert verifiers.Verdict is verdict.Verdict and verifiers.normalise_number is verdict.normalise_number
    assert paper_verifiers.Verdict is verdict.Verdict
