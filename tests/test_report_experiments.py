"""Report sections of the paper's other experiments: Table 6's layout on constructed records, and the tiny
subtraction twin end to end (run, then report) for Table 13's layout."""

from __future__ import annotations

import json

import pytest

from esbench.cli import main
from esbench.metrics.curves import debiased_ema
from esbench.records import CellDir, Record
from esbench.report_cells import ReportCell
from esbench.report_experiments import population_table, reward_curves
from esbench.report_render import _experiments_md


def _record(tmp_path, population: int, rewards: list[float], model="Qwen/Qwen2.5-0.5B-Instruct") -> ReportCell:
    d = tmp_path / f"n{population}"
    d.mkdir()
    (d / "train.jsonl").write_text(
        "".join(json.dumps({"update": i, "reward_mean": r}) + "\n" for i, r in enumerate(rewards))
    )
    spec = {"model": {"path": model}, "method": {"kind": "es", "config": {"population": population, "sigma": 0.0015}},
            "seed": 42, "budget": len(rewards)}  # fmt: skip
    record = Record.model_construct(cell={"spec": spec, "labels": {"model": "m"}}, metrics={})
    return ReportCell(record, d, CellDir(d).train_rows(), train_logged=True)


def test_table_6_layout_reads_updates_100_200_300_marks_matches_and_sets_the_paper_beside(tmp_path):
    n = 300
    ref = [0.52] * n
    recs = [_record(tmp_path, 8, [0.45] * n), _record(tmp_path, 16, [0.515] * n), _record(tmp_path, 64, ref)]
    for r in recs:
        r.label = f"m/es-n{r.spec['method']['config']['population']}"
    curves = reward_curves(recs)
    assert curves["m/es-n8"]["ema"] == pytest.approx(debiased_ema([0.45] * n))
    (table,) = population_table(recs, curves)
    assert table["points"] == [100, 200, 300] and table["reference_population"] == 64
    cols = {c["population"]: c for c in table["cols"]}
    assert cols[8]["values"][100] == pytest.approx(0.45) and not cols[8]["matches"][100]
    assert cols[16]["matches"][300]  # 0.515 is within 0.01 of 0.52
    assert cols[8]["paper"][100] == 0.4782 and cols[64]["paper"][300] == 0.5287  # Table 6, Qwen2.5-0.5B
    md = "\n".join(_experiments_md({"population": [table], "reward_curves": {}, "subtraction": [], "probe": {}}))
    assert "| 100 | 0.4500 (0.4782) | 0.5150 ≈ (0.5021) | 0.5200 (0.5085) |" in md


def test_cells_that_differ_in_more_than_n_are_not_a_sweep(tmp_path):
    a, b = _record(tmp_path, 8, [0.5] * 30), _record(tmp_path, 16, [0.5] * 30)
    b.spec["method"]["config"]["sigma"] = 0.003
    a.label, b.label = "a", "b"
    assert population_table([a, b], reward_curves([a, b])) == []


def test_tiny_subtraction_twin_renders_table_13(repo, tmp_path, tiny_model_dir):
    suite = repo / "suites" / "tiny-subtraction.yaml"
    text = (
        suite.read_text()
        .replace("sigmas: [0.001, 0.003, 0.01]", "sigmas: [0.001]")
        .replace("budgets: [4]", "budgets: [2]")
    )
    small = tmp_path / "tiny-subtraction.yaml"
    small.write_text(text)
    assert main(["run", str(small), "--out", str(tmp_path / "runs")]) == 0
    assert main(["report", str(tmp_path / "runs" / "tiny-subtraction"), "--bootstrap", "100"]) == 0
    md = (tmp_path / "runs" / "tiny-subtraction" / "report" / "report.md").read_text()
    assert "## Subtraction diagnostic: tiny/subtraction (paper Table 13 layout)" in md
    row = next(x for x in md.splitlines() if x.startswith("| 0.001 | fixed-logprob |"))
    assert "(0.9939)" in row and "(0.0125)" in row  # the paper's values beside ours
    rec = json.loads(next((tmp_path / "runs" / "tiny-subtraction").glob("*/record.json")).read_text())
    assert rec["drift"]["relative_l2"] == 0.0  # a measurement: the weights are the base's


def test_a_measurement_cells_log_is_consistent_with_its_budget(tmp_path):
    """verify's train-log check: a `subtraction` cell spends no updates whatever its budget (it counts directions),
    while a trained cell's integer budget is its update count."""
    from esbench.leaderboard.verify_cell import _check_train_log
    from esbench.leaderboard.verify_report import Report

    d = tmp_path / "cell"
    d.mkdir()
    (d / "train.jsonl").write_text(json.dumps({"update": 0, "sigma": 0.001, "objective": "reward-common"}) + "\n")
    spec = {"method": {"kind": "subtraction", "config": {}}, "budget": 4, "dataset": {"task": "tiny_arith"}}
    record = {"cell": {"spec": spec}, "budget_used": {"updates": 0}, "train": {"updates_logged": 0}}
    ok = Report(d, "v1.4")
    _check_train_log("c", d, record, 64, ok)
    assert not ok.reasons
    spec["method"] = {"kind": "es", "config": {}}
    bad = Report(d, "v1.4")
    _check_train_log("c", d, record, 64, bad)
    assert any("the cell's budget 4 is 4" in p for p in bad.reasons)
