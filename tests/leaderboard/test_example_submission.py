"""The committed worked-example submission verifies against the committed release, and the committed rendering
is what `esbench leaderboard build` makes of it. A verifier or task edited without a new release fails here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lb_helpers import esbench

from esbench.leaderboard.verify import verify

ROOT = Path(__file__).resolve().parents[2] / "leaderboard"
SUBMISSIONS = (
    sorted(p for p in (ROOT / "submissions").iterdir() if p.is_dir()) if (ROOT / "submissions").is_dir() else []
)


def test_there_is_a_worked_example_submission():
    assert "tiny-random-search" in [p.name for p in SUBMISSIONS]


@pytest.mark.parametrize("sub", SUBMISSIONS, ids=lambda p: p.name)
def test_committed_submission_is_accepted(sub):
    report = verify(sub, ROOT)
    assert report.ok, report.reasons
    methods = {c.record["cell"]["labels"]["method"]: c.grid for c in report.cells}
    assert methods.get("random-search") == "plug-in" and methods.get("base") == "release"


def test_committed_rendering_is_current(tmp_path):
    lb = tmp_path / "leaderboard"
    shutil.copytree(ROOT / "releases", lb / "releases")
    shutil.copytree(ROOT / "submissions", lb / "submissions")
    proc = esbench("leaderboard", "build", "--root", str(lb))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (lb / "README.md").read_text() == (ROOT / "README.md").read_text(), "run `esbench leaderboard build`"
    assert (lb / "site" / "index.html").read_text() == (ROOT / "site" / "index.html").read_text()
