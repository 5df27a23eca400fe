"""The paper's reference numbers: complete, sourced, and consistent with the paper's own printed Averages."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

REF = Path(__file__).resolve().parents[2] / "leaderboard" / "reference"
PAPER = json.loads((REF / "paper_tables.json").read_text())
VALUES = PAPER["values"]


def test_every_table_2_to_12_is_there_with_its_source():
    assert sorted({v["table"] for v in VALUES}) == list(range(2, 13))
    for v in VALUES:
        src = v["source"]
        assert src["table"] == f"Table {v['table']}" and src["row"] and src["column"], v
        assert isinstance(v["value"], float)


def test_grid_sizes_match_the_paper_layout():
    count = defaultdict(int)
    for v in VALUES:
        count[v["table"]] += 1
    # Table 2: 3 models x 5 methods x (6 tasks + Average) x 3 metrics; Table 7: the same with 2 Maj metrics.
    assert count[2] == 3 * 5 * 7 * 3 and count[7] == 3 * 5 * 7 * 2
    assert count[3] == count[5] == 5 * 5 * 3 and count[8] == count[9] == 5 * 5 * 2
    assert count[10] == 3 * 2 * 5


def _average_rows():
    rows = defaultdict(dict)
    for v in VALUES:
        if v["table"] in (2, 3, 5, 7, 8, 9):
            rows[(v["table"], v["model"], v["method"], v["metric"])][v["column"]] = v["value"]
    return rows


def test_printed_averages_recompute_from_their_cells():
    """|mean(cells) - printed Average| <= 0.05 for every row, except rows documented as rounding discrepancies."""
    documented = {(d["table"], d["model"], d["method"], d["metric"]) for d in PAPER["average_discrepancies"]}
    over = {}
    rows = _average_rows()
    assert len(rows) == 125
    for key, cols in rows.items():
        avg = cols.pop("Average")
        gap = abs(sum(cols.values()) / len(cols) - avg)
        if gap > 0.05 + 1e-9:
            over[key] = gap
    assert set(over) == documented
    # A documented row is still consistent with rounding (cells and Average each rounded to 0.1): gap < 0.1.
    assert all(gap < 0.1 for gap in over.values()), over


def test_table_10_is_the_held_out_mean_change_of_tables_2_and_7():
    cell = {(v["model"], v["method"], v["metric"], v["column"]): v["value"] for v in VALUES if v["table"] in (2, 7)}
    held = ["CSQA", "HotpotQA", "Countdown", "GPQA", "MBPP"]
    for v in (v for v in VALUES if v["table"] == 10):
        metric = v["metric"].removeprefix("delta_")
        mean = sum(cell[(v["model"], v["method"], metric, c)] - cell[(v["model"], "Base", metric, c)] for c in held) / 5
        assert mean == pytest.approx(v["value"], abs=0.1), v  # ten rounded cells and a rounded mean


def test_tables_11_12_deltas_and_table_4_ratios():
    full = {(v["table"], v["model"]): v["value"] for v in VALUES if v.get("tau") == "full"}
    for v in VALUES:
        if v["table"] in (11, 12) and v["metric"] == "delta_pass@1":
            p1 = next(
                x["value"]
                for x in VALUES
                if x["table"] == v["table"]
                and x["model"] == v["model"]
                and x.get("tau") == v["tau"]
                and x["metric"] == "pass@1"
            )
            assert p1 - full[(v["table"], v["model"])] == pytest.approx(v["value"], abs=0.0015), v
    t4 = defaultdict(dict)
    for v in VALUES:
        if v["table"] == 4 and v["column"] in ("GRPO", "Full ES"):
            t4[v["model"]][(v["column"], v["metric"])] = v["value"]
    for model, d in t4.items():
        ratio = d[("Full ES", "l2_drift_rel")] / d[("GRPO", "l2_drift_rel")]
        assert ratio == pytest.approx(d[("Full ES", "drift_ratio_es_grpo")], abs=0.06), model


def test_expected_results_agree_with_table_2():
    exp = json.loads((REF / "expected_results.json").read_text())
    t2 = {
        (v["method"], v["metric"]): v["value"]
        for v in VALUES
        if v["table"] == 2 and v["column"] == "GSM8K" and v["model"] == exp["model"]
    }
    for run, method in (("Base", "Base"), ("ES step 234", "ES")):
        f = exp["runs"][run]
        assert 100 * f["mean@32"] == pytest.approx(t2[(method, "pass@1")], abs=0.05)
        assert 100 * f["pass@16"] == pytest.approx(t2[(method, "pass@16")], abs=0.05)
        assert 100 * f["pass@32"] == pytest.approx(t2[(method, "pass@32")], abs=0.05)
    assert exp["problems"] == 1319 and exp["runs"]["Base"]["greedy_correct"] == 988


@pytest.mark.parametrize("rel", sorted((REF.parent / "releases").iterdir()), ids=lambda p: p.name)
def test_release_freezes_the_same_reference_numbers(rel):
    for f in ("paper_tables.json", "expected_results.json"):
        assert (rel / "reference" / f).read_bytes() == (REF / f).read_bytes()
