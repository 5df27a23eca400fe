"""Records that are validated before they are written. (The cell lease that keeps two runners apart is
tests/test_leases.py's.)"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from esbench.records import RELEASE, write_record


def test_a_malformed_record_is_never_written(tmp_path):
    good = {
        "schema": "esbench.record/1",
        "release": RELEASE,
        "cell": {},
        "metrics": {"t": {"problems": 1, "n": 2, "per_problem": [[2, 1]], "format_rate": 1.0, "pass@1": 0.5}},
        "samples_sha256": {},
        "held_out": [],
        "train": {},
        "budget_used": {"updates": 0, "rollouts": 0, "generated_tokens": 0},
        "timings": {"total_s": 1.0},
        "provenance": {},
    }
    write_record(tmp_path / "ok.json", good)
    assert json.loads((tmp_path / "ok.json").read_text())["metrics"]["t"]["pass@1"] == 0.5
    bad = {**good, "budget_used": {"updates": -1, "rollouts": 0, "generated_tokens": 0}}
    with pytest.raises(ValidationError):
        write_record(tmp_path / "bad.json", bad)
    assert not (tmp_path / "bad.json").exists()
