"""App. G.2's FLOP formulas on hand-computed cells, the record's compute section, matched-FLOPs interpolation on
synthetic curves and the leaderboard's compute column. Runs of real tiny cells are checked in tests/test_report.py,
on that module's run."""

from __future__ import annotations

from pathlib import Path

import pytest

from esbench.metrics import compute as C
from esbench.report_compute import NO_CURVE, NO_OVERLAP, match


def test_formulas_on_a_hand_computed_cell():
    # ES: T = 2 updates, N = 4 members, D = 8 prompts each, L = 30 tokens per rollout, P = 1000 parameters
    assert C.es_flops_paper(T=2, N=4, D=8, P=1000, L=30) == 2 * 2 * 4 * 8 * 1000 * 30 == 3_840_000
    assert C.es_flops(1000, tokens=2 * 4 * 8 * 30) == 3_840_000  # T·N·D·L = 1920 tokens
    # GRPO: T = 3 updates, B = 4 prompts, G = 2 generations, L = 25 tokens, P = 1000
    assert C.grpo_flops_paper(T=3, B=4, G=2, P=1000, L=25) == 8 * 3 * 4 * 2 * 1000 * 25 == 4_800_000
    assert C.grpo_flops(1000, tokens=3 * 4 * 2 * 25) == 4_800_000  # T·B·G·L = 600 tokens
    assert C.sequence_flops(1000, [("es", 1920), ("grpo", 600)]) == 3_840_000 + 4_800_000
    assert C.method_flops("random-search", 1000, 600) is None
    assert C.sequence_flops(1000, [("es", 1920), ("subtraction", 10)]) is None


def _es_rows():
    probe = {"entropy": 1.0, "success": 0.5, "pass@k": {"1": 0.5}}
    return [
        {"update": 0, "probe": probe},
        {"update": 0, "reward_mean": 0.1, "tokens": 700, "tokens_generated": 500},
        {"update": 1, "probe": probe},
        {"update": 1, "reward_mean": 0.2, "tokens": 900, "tokens_generated": 600},
        {"update": 2, "probe": probe},
    ]


def test_cell_compute_of_an_es_cell():
    got = C.cell_compute("es", _es_rows(), parameters=1000, train_seconds=4.0, devices=2, device="cuda")
    assert got["flops"] == 2 * 1000 * (700 + 900) == 3_200_000
    assert got["tokens"] == {"total": 1600, "generated": 1100, "prompt": 500}
    assert got["parameters"] == 1000 and got["formula"].startswith("FLOPs_ES = 2·T·N·D·P·L")
    assert (got["train_seconds"], got["devices"], got["device_seconds"]) == (4.0, 2, 8.0)
    # FLOPs spent before each probe: none before update 0, update 0's after it, both at the end
    assert got["curve"] == [
        {"update": 0, "flops": 0},
        {"update": 1, "flops": 1_400_000},
        {"update": 2, "flops": 3_200_000},
    ]
    assert "stages" not in got


def test_cell_compute_of_a_sequence_sums_its_stages():
    rows = [
        {"update": 0, "reward_mean": 0.1, "tokens": 100, "tokens_generated": 60, "stage": 0, "stage_method": "es"},
        {"update": 1, "reward_mean": 0.1, "tokens": 50, "tokens_generated": 30, "stage": 1, "stage_method": "grpo"},
        {"update": 2, "probe": {}, "stage": 1, "stage_method": "grpo"},
    ]
    got = C.cell_compute("sequence", rows, parameters=10, train_seconds=1.0, devices=1, device="cpu")
    assert got["flops"] == 2 * 10 * 100 + 8 * 10 * 50 == 6000
    assert [(s["method"], s["tokens"], s["flops"]) for s in got["stages"]] == [("es", 100, 2000), ("grpo", 50, 4000)]
    assert got["formula"] == "es: 2·P·tokens + grpo: 8·P·tokens (App. G.2, per stage)"
    assert got["curve"] == [{"update": 2, "flops": 6000}]


def test_no_flops_without_tokens_or_formula():
    old = [{k: v for k, v in r.items() if not k.startswith("tokens")} for r in _es_rows()]  # a log before this
    got = C.cell_compute("es", old, parameters=1000, train_seconds=1.0, devices=1, device="cpu")
    assert got["flops"] is None and got["curve"] == [] and got["tokens"]["total"] is None
    plug = C.cell_compute("random-search", _es_rows(), parameters=1000, train_seconds=1.0, devices=1, device="cpu")
    assert plug["flops"] is None and plug["formula"] == "none: App. G.2 has no formula for 'random-search'"


def test_the_record_schema_takes_compute_as_optional():
    from pydantic import ValidationError

    from esbench.records import Record

    rec = {
        "schema": "esbench.record/1",
        "release": "v1.4",
        "cell": {},
        "metrics": {},
        "samples_sha256": {},
        "held_out": [],
        "train": {},
        "budget_used": {"updates": 0, "rollouts": 0, "generated_tokens": 0},
        "timings": {"total_s": 1.0},
        "provenance": {},
    }
    Record.model_validate(rec)  # a record without compute (every record before it) stays valid
    section = C.cell_compute("es", _es_rows(), parameters=1000, train_seconds=4.0, devices=1, device="cpu")
    assert Record.model_validate({**rec, "compute": section}).compute.flops == 3_200_000
    with pytest.raises(ValidationError):
        Record.model_validate({**rec, "compute": {**section, "flops": -1}})


def test_device_count(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert C.device_count("cuda") == 2
    assert C.device_count("cuda", es_workers=4) == 4  # Ray ES replicas, one device each
    assert C.device_count("cpu", es_workers=4) == 1


def test_format_flops():
    assert C.format_flops(1.234e15) == "1.2e15"
    assert C.format_flops(9.96e14) == "1.0e15"
    assert C.format_flops(3_200_000) == "3.2e6"
    assert (C.format_flops(None), C.format_flops(0)) == ("—", "0")


def test_interpolate():
    pts = [(0, 0.1), (100, 0.3), (200, 0.5)]
    assert C.interpolate(pts, 50) == pytest.approx(0.2)
    assert C.interpolate(pts, 200) == 0.5 and C.interpolate(pts, 0) == 0.1
    assert C.interpolate(pts, 201) is None and C.interpolate(pts, -1) is None
    # an update that spent no counted FLOPs: the later point holds from its x on
    flat = [(0, 0.0), (10, 0.2), (10, 0.4), (20, 0.6)]
    assert C.interpolate(flat, 10) == 0.4 and C.interpolate(flat, 15) == pytest.approx(0.5)


def test_matched_flops_on_synthetic_curves():
    es = {"flops": [0, 100, 200], "pass@1": [0.1, 0.3, 0.5]}
    grpo = {"flops": [0, 400, 800], "pass@1": [0.1, 0.2, 0.6]}
    got = match(es, grpo, "pass@1")
    # ES spent 200: GRPO's curve spans it (0.1 + 0.1 · 200/400); GRPO's 800 is beyond ES's curve
    assert got["status"] == "compared"
    (p,) = got["points"]
    assert (p["flops"], p["budget_of"], p["es"]) == (200, "es", 0.5)
    assert p["grpo"] == pytest.approx(0.15) and p["delta"] == pytest.approx(0.35)
    # the other way round: GRPO cheaper
    got = match({"flops": [0, 900], "pass@1": [0.1, 0.4]}, grpo, "pass@1")
    assert [(q["flops"], q["budget_of"]) for q in got["points"]] == [(800, "grpo")]
    assert got["points"][0]["es"] == pytest.approx(0.1 + 0.3 * 800 / 900) and got["points"][0]["grpo"] == 0.6
    # curves with no common span
    apart = match({"flops": [100, 200], "pass@1": [0.1, 0.2]}, {"flops": [300, 400], "pass@1": [0.3, 0.4]}, "pass@1")
    assert (apart["status"], apart["points"]) == (NO_OVERLAP, [])
    assert match(es, {"flops": [0, 1]}, "pass@1")["status"] == NO_CURVE


def _board(flops: list[float | None]):
    from esbench.leaderboard.board import NO_REF, Board, Entry

    entries = []
    for i, f in enumerate(flops):
        e = Entry(
            submission="sub",
            suite="tiny",
            model="tiny",
            model_path="builtin:tiny",
            dataset="arith",
            method=f"m{i}",
            kind=f"m{i}",
            budget=2,
            seeds=[0],
            grid="release",
            cells=[f"c{i}"],
            paper_model=None,
            paper_method=None,
            flops=f,
        )
        row = {"mean": 50.0, "se": 1.0, "se_source": "bootstrap", "per_seed": [50.0], "status": NO_REF}
        e.tasks["tiny_arith"] = {"held_out": False, "paper_task": None, "metrics": {"pass@1": row}, "curve": {}}
        entries.append(e)
    rule = {"warn_factor": 2, "delta_pp": {"pass@1": 1}, "delta_pp_default": 2, "se_ref_pp_default": 0}
    release = {"id": "vT", "date": "2026-01-01", "record_schema": "esbench.record/1", "rule": rule, "dir": Path()}
    return Board(release, entries, [], [], [], {})


def test_leaderboard_shows_flops_beside_each_row():
    from esbench.leaderboard.render import suite_sections
    from esbench.leaderboard.render_html import page

    board = _board([1.234e15, None])
    md = "\n".join(suite_sections(board))
    assert "| status | FLOPs |" in md
    rows = [line for line in md.splitlines() if line.startswith("| tiny | m")]
    assert rows[0].endswith("| no paper reference | 1.2e15 |") and rows[1].endswith("| no paper reference | — |")
    html = page(board, {})
    assert "<th>FLOPs</th>" in html
    assert f'data-value="{1.234e15}"' in html and ">1.2e15</td>" in html and ">—</td>" in html


def test_leaderboard_entry_takes_the_records_flops(tmp_path):
    """`_entries` averages the seeds' compute.flops; a seed without it leaves the entry without FLOPs."""
    from esbench.leaderboard.board import _entries
    from esbench.leaderboard.verify_report import CellResult, Report

    (tmp_path / "MANIFEST.json").write_text("{}")

    def cell(seed: int, flops: int | None):
        spec = {
            "model": {"path": "builtin:tiny"},
            "method": {"kind": "es", "config": {}},
            "budget": 2,
            "seed": seed,
            "eval": {"tasks": ["tiny_arith"], "k": [1], "held_out": []},
        }
        record = {
            "cell": {"spec": spec, "labels": {"suite": "tiny", "model": "tiny", "method": "es"}, "name": "x"},
            "release": "vT",
            "provenance": {},
            **({} if flops is None else {"compute": {"flops": flops}}),
        }
        return CellResult(f"c{seed}", record, {"tiny_arith": {"pass@1": 0.5}}, {"tiny_arith": {"pass@1": [0.5]}})

    release = {"paper_map": {"models": {}, "methods": {}, "tasks": {}, "tables": []}, "rule": {}}
    report = Report(tmp_path, "vT", cells=[cell(0, 100), cell(1, 300)])
    (entry,) = _entries(report, release, [], {}, set())
    assert entry.flops == 200
    report = Report(tmp_path, "vT", cells=[cell(0, 100), cell(1, None)])
    assert _entries(report, release, [], {}, set())[0].flops is None
