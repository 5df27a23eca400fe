"""`esbench report` on a real (small) run of every analysis: tables, plots and JSON hold what the run measured."""

from __future__ import annotations

import json

import pytest

from esbench.cli import main

SUITE = """\
name: analyses
models: {tiny: {path: "builtin:tiny"}}
datasets: {arith: {task: tiny_arith, size: 16}}
methods:
  base: {}
  es: {method: es, population: 8, sigma: 0.01, alpha: 0.003, batch_size: 8, max_new_tokens: 40}
  es-bf16: {method: es, population: 8, sigma: 0.01, alpha: 0.003, batch_size: 8, max_new_tokens: 40,
            precision: paper-bf16}
  grpo: {method: grpo, prompts_per_rollout: 4, num_generations: 2, ppo_minibatch_prompts: 4, micro_batch: 8,
         learning_rate: 0.0001, max_completion_length: 40}
budgets: [2]
seeds: [0]
eval:
  tasks: [tiny_arith, tiny_reverse]
  held_out: [tiny_reverse]
  limit: 4
  n: 4
  k: [1, 4]
  temperature: 1.0
  max_new_tokens: 40
  probe: {prompts: 2, samples: 2, every: 1}
  diversity: {sigma: 0.003, members: 2, prompts: 2, samples: 2}
  sparsity: {taus: [0.0005, 0.002]}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("report")
    suite = root / "analyses.yaml"
    suite.write_text(SUITE)
    assert main(["run", str(suite), "--out", str(root / "runs")]) == 0
    return root / "runs" / "analyses"


def _records(run_dir):
    return {
        json.loads(p.read_text())["cell"]["labels"]["method"]: json.loads(p.read_text())
        for p in run_dir.glob("*/record.json")
    }


def test_records_carry_every_analysis(run_dir):
    recs = _records(run_dir)
    assert set(recs) == {"base", "es", "es-bf16", "grpo"}
    for name, rec in recs.items():
        for m in rec["metrics"].values():
            assert m["entropy"] > 0 and m["answer_entropy"] >= 0
        div = rec["diversity"]
        assert (div["members"], div["prompts"], div["samples"]) == (2, 2, 2) and 0 <= div["js_succ"] <= 1
        if name == "base":
            assert "drift" not in rec and "sparsity" not in rec
            continue
        rows = [json.loads(x) for x in (run_dir / rec["cell"]["id"] / "train.jsonl").read_text().splitlines()]
        assert any(r.get("reward_std", 1) > 0 for r in rows), "premise: members scored differently at some update"
        assert rec["drift"]["relative_l2"] > 0
        assert sum(g["share"] for g in rec["drift"]["groups"].values()) == pytest.approx(1.0)
        assert [s["tau"] for s in rec["sparsity"]] == [0.0005, 0.002]
        assert rec["sparsity"][0]["sparsity_pct"] <= rec["sparsity"][1]["sparsity_pct"]
        for row in rec["sparsity"]:  # Eq. 16: a share of the changed coordinates, not of all of them
            assert row["dropped_pct"] == pytest.approx(row["sparsity_pct"] * row["changed_pct"] / 100)
        probes = [json.loads(x) for x in (run_dir / rec["cell"]["id"] / "train.jsonl").read_text().splitlines()]
        assert [r["update"] for r in probes if "probe" in r] == [0, 1, 2]  # before training and after each update
    # exact arithmetic has no rounding residual; the public bf16 mode does
    assert recs["es"]["drift"]["rounding_share"] == pytest.approx(0.0, abs=1e-12)
    assert recs["es-bf16"]["drift"]["rounding_share"] > 0
    assert recs["es-bf16"]["drift"]["top_bf16_step_share"] > recs["es"]["drift"]["top_bf16_step_share"]
    assert recs["es"]["drift"]["relative_l2"] > recs["grpo"]["drift"]["relative_l2"]


def test_report_json_tables_and_plots(run_dir, capsys):
    assert main(["report", str(run_dir), "--json", "--bootstrap", "200"]) == 0
    data = json.loads(capsys.readouterr().out)
    recs = _records(run_dir)
    acc = {r["cell"]: r for r in data["accuracy"]["rows"]}
    assert acc["tiny/es"]["tasks"]["tiny_arith"]["pass@1"] == recs["es"]["metrics"]["tiny_arith"]["pass@1"]
    forgetting = {r["cell"]: r for r in data["forgetting"]["rows"]}
    assert set(forgetting) == {"tiny/es", "tiny/es-bf16", "tiny/grpo"}
    want = recs["grpo"]["metrics"]["tiny_reverse"]["pass@1"] - recs["base"]["metrics"]["tiny_reverse"]["pass@1"]
    got = forgetting["tiny/grpo"]["tasks"]["tiny_reverse"]["pass@1"]
    assert got["delta"] == pytest.approx(want) and got["lo"] <= got["delta"] <= got["hi"]
    ratios = {r["es_precision"]: r["ratio"] for r in data["drift"]["es_over_grpo"]}
    grpo = recs["grpo"]["drift"]["relative_l2"]
    assert ratios == {  # both: the paper measured bf16 ES; fp32-master says how much exact arithmetic keeps
        "fp32-master": pytest.approx(recs["es"]["drift"]["relative_l2"] / grpo),
        "paper-bf16": pytest.approx(recs["es-bf16"]["drift"]["relative_l2"] / grpo),
    }
    (pair,) = data["bf16"]
    assert (pair["fp32"], pair["bf16"]) == ("tiny/es", "tiny/es-bf16")
    assert {s["cell"] for s in data["sparsity"]} == {"tiny/es", "tiny/es-bf16", "tiny/grpo"}
    names = sorted(p.rsplit("/", 1)[1] for p in data["plots"])
    assert names == [
        "compute.png",
        "drift.png",
        "passk.png",
        "passk_profile.png",
        "probe.png",
        "sparsity.png",
        "training.png",
    ]
    ex = data["experiments"]
    n = recs["es"]["metrics"]["tiny_arith"]["n"]
    profile = ex["passk_profiles"]["tiny/es"]["tiny_arith"]
    assert len(profile) == n and profile[0] == pytest.approx(recs["es"]["metrics"]["tiny_arith"]["pass@1"])
    assert profile[-1] == pytest.approx(recs["es"]["metrics"]["tiny_arith"][f"pass@{n}"])  # every K up to n
    curve = ex["reward_curves"]["tiny/es"]
    assert curve["updates"] == [1, 2] and curve["ema"][0] == pytest.approx(curve["raw"][0])  # bias-corrected
    probe = ex["probe"]["tiny/es"]
    assert probe["updates"] == [0, 1, 2] and set(probe) >= {"entropy", "pass@1", "pass@2"}  # samples: 2
    for p in data["plots"]:
        blob = open(p, "rb").read()
        assert blob[:8] == b"\x89PNG\r\n\x1a\n" and len(blob) > 5000


def test_report_markdown_has_the_paper_sections(run_dir, capsys):
    assert main(["report", str(run_dir), "--bootstrap", "200"]) == 0
    md = (run_dir / "report" / "report.md").read_text()
    for heading in (
        "Pass@k per task",
        "Held-out change against base",
        "Parameter drift",
        "bf16 artefacts",
        "Functional sparsity",
        "Entropy and diversity",
        "Training reward (debiased EMA",
        "Held-out probe during training (paper Fig. 2)",
    ):
        assert f"## {heading}" in md
    assert "![passk](passk.png)" in md
    assert "ES paper-bf16: ES" in md and "ES fp32-master: ES" in md and "measured on bf16 ES" in md
    assert "Sparsity s_τ (Eq. 16)" in md and "of coordinates changed" in md
    assert capsys.readouterr().out.startswith("# esbench report")


def test_report_of_a_folder_without_records_exits_2(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no record.json" in capsys.readouterr().err


def _train_rows(run_dir, rec):
    return [json.loads(x) for x in (run_dir / rec["cell"]["id"] / "train.jsonl").read_text().splitlines()]


def test_compute_sections_follow_app_g2(run_dir, tiny_model_dir):
    """FLOPs = 2·P·tokens (ES) and 8·P·tokens (GRPO), P every parameter of the saved model, tokens from train.jsonl."""
    from safetensors import safe_open

    with safe_open(str(tiny_model_dir / "model.safetensors"), "pt") as f:
        P = sum(f.get_tensor(k).numel() for k in f.keys())  # tied weights are stored once
    recs = _records(run_dir)
    assert "compute" not in recs["base"]
    for name, per_token in (("es", 2), ("es-bf16", 2), ("grpo", 8)):
        rec = recs[name]
        comp = rec["compute"]
        ups = [r for r in _train_rows(run_dir, rec) if "reward_mean" in r]
        tokens = sum(r["tokens"] for r in ups)
        assert comp["parameters"] == P
        assert comp["tokens"]["total"] == tokens > 0
        assert comp["flops"] == per_token * P * tokens
        assert comp["tokens"]["generated"] == sum(r["tokens_generated"] for r in ups)
        assert comp["train_seconds"] == rec["timings"]["train_s"] > 0
        assert (comp["devices"], comp["device"], comp["device_seconds"]) == (1, "cpu", comp["train_seconds"])
        # the probe points (before training and after each update) with the FLOPs spent before each
        per_update = [per_token * P * r["tokens"] for r in sorted(ups, key=lambda r: r["update"])]
        assert comp["curve"] == [
            {"update": 0, "flops": 0},
            {"update": 1, "flops": per_update[0]},
            {"update": 2, "flops": sum(per_update)},
        ]
    # ES: generated tokens as budget_used counts them; every one of the 8 members read the batch's prompts
    for name in ("es", "es-bf16"):
        comp = recs[name]["compute"]
        assert comp["tokens"]["generated"] == recs[name]["budget_used"]["generated_tokens"]
        assert comp["tokens"]["prompt"] > 0 and comp["tokens"]["prompt"] % 8 == 0
    # GRPO: TRL's prompt + completion count; each of a rollout's prompts is read by its 2 generations
    comp = recs["grpo"]["compute"]
    assert abs(comp["tokens"]["generated"] - recs["grpo"]["budget_used"]["generated_tokens"]) <= 2
    assert comp["tokens"]["prompt"] > 0 and comp["tokens"]["prompt"] % 2 == 0


def test_report_compute_view(run_dir, capsys):
    import numpy as np

    from esbench.metrics.compute import format_flops

    assert main(["report", str(run_dir), "--json", "--bootstrap", "200"]) == 0
    view = json.loads(capsys.readouterr().out)["compute"]
    recs = _records(run_dir)
    rows = {r["cell"]: r for r in view["rows"]}
    assert set(rows) == {"tiny/es", "tiny/es-bf16", "tiny/grpo"}
    for name in ("es", "es-bf16", "grpo"):
        r, rec = rows[f"tiny/{name}"], recs[name]
        assert (r["flops"], r["device_seconds"]) == (rec["compute"]["flops"], rec["compute"]["device_seconds"])
        assert r["tasks"]["tiny_arith"] == {k: rec["metrics"]["tiny_arith"][k] for k in ("pass@1", "pass@4")}

    def curve(name):
        rec = recs[name]
        at = {p["update"]: p["flops"] for p in rec["compute"]["curve"]}
        probes = sorted((r for r in _train_rows(run_dir, rec) if "probe" in r), key=lambda r: r["update"])
        return [at[p["update"]] for p in probes], [p["probe"]["pass@k"]["1"] for p in probes]

    pairs = {(m["es"], m["grpo"]): m for m in view["matched"]}
    assert set(pairs) == {("tiny/es", "tiny/grpo"), ("tiny/es-bf16", "tiny/grpo")}
    for es in ("es", "es-bf16"):
        m = pairs[(f"tiny/{es}", "tiny/grpo")]
        assert m["status"] == "compared"
        (pass1,) = [x for x in m["metrics"] if x["metric"] == "pass@1"]
        fe, ye = curve(es)
        fg, yg = curve("grpo")
        cheaper = min(fe[-1], fg[-1])  # both curves start at 0 FLOPs: the cheaper total lies on both
        (p,) = [q for q in pass1["points"] if q["flops"] == cheaper]
        assert p["es"] == pytest.approx(np.interp(cheaper, fe, ye))
        assert p["grpo"] == pytest.approx(np.interp(cheaper, fg, yg))
        assert len(pass1["points"]) == 1  # the dearer total is beyond the cheaper run's curve
    assert main(["report", str(run_dir), "--bootstrap", "200"]) == 0
    md = (run_dir / "report" / "report.md").read_text()
    assert "## Compute (paper App. G.2: FLOPs_GRPO = 8·T·B·G·P·L, FLOPs_ES = 2·T·N·D·P·L)" in md
    assert "### ES vs GRPO at matched FLOPs (training probe)" in md
    section = md[md.index("## Compute (paper App. G.2") :]
    line = next(x for x in section.splitlines() if x.startswith("| tiny/grpo | "))
    assert f"| {format_flops(recs['grpo']['compute']['flops'])} |" in line
    assert "![compute](compute.png)" in md


def _drift_record(model_path, kind, drift, precision=None):
    from pathlib import Path

    from esbench.records import Record
    from esbench.report_cells import ReportCell

    config = {"precision": precision} if precision else {}
    cell = {
        "labels": {"model": model_path.rsplit("/", 1)[-1].lower()},
        "spec": {"model": {"path": model_path}, "method": {"kind": kind, "config": config}},
    }
    return ReportCell(Record.model_construct(cell=cell, drift=drift), Path())  # the drift table reads no folder


def _drift(rel, max_abs=2.0**-12, changed=0.25, **extra):
    groups = {"embeddings": {"params": 10, "share": 1.0, "relative_l2": rel, "top": 100}}
    base = {"relative_l2": rel, "max_abs_delta": max_abs, "changed_fraction": changed, "top_bf16_step_share": 1.0}
    return {**base, "groups": groups, **extra}


def test_drift_table_sets_saved_weights_and_masters_beside_table_4():
    """The ES/GRPO ratio comes from the saved-weights drift; the masters' ratio, the paper's Table 4 values and
    records from before saved-weights drift (no `weights`) are shown beside it."""
    from esbench.report import drift_table
    from esbench.report_render import _drift_md

    qwen, r1 = "Qwen/Qwen2.5-1.5B-Instruct", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
    grpo_master = _drift(5e-4, 2e-6, 1.0, weights="master:float32")
    records = [
        _drift_record(qwen, "grpo", _drift(4e-4, weights="saved:bfloat16", master=grpo_master)),
        _drift_record(qwen, "es", _drift(2e-2, 2**-6, 0.9, weights="saved:bfloat16"), precision="paper-bf16"),
        _drift_record(r1, "checkpoint", _drift(5e-4, 2**-10, weights="saved:bfloat16", against={"path": r1})),
        _drift_record(r1, "es", _drift(2e-2, 2**-6, 0.9), precision="paper-bf16"),  # an older record
    ]
    for i, r in enumerate(records):
        r.label = f"cell{i}"
    table = drift_table(records)
    ratios = {r["model"]: r for r in table["es_over_grpo"]}
    q = ratios["qwen2.5-1.5b-instruct"]
    assert q["ratio"] == pytest.approx(2e-2 / 4e-4) and q["ratio_master"] == pytest.approx(2e-2 / 5e-4)
    assert q["paper_ratio"] == 40.7 and q["grpo_method"] == "grpo"
    d = ratios["deepseek-r1-distill-qwen-1.5b"]
    assert d["grpo_method"] == "checkpoint" and d["ratio"] == pytest.approx(40.0) and d["paper_ratio"] == 42.7
    rows = {r["cell"]: r for r in table["rows"]}
    assert rows["cell0"]["master"]["relative_l2"] == 5e-4 and rows["cell1"]["master"] is None
    assert rows["cell0"]["paper"]["relative_l2"] == pytest.approx(0.0475e-2)
    assert rows["cell2"]["paper"] == {"relative_l2": pytest.approx(0.0548e-2), "max_abs_delta": 2**-10}
    assert rows["cell2"]["against"] == r1 and rows["cell3"]["weights"] is None

    md = "\n".join(_drift_md(table))
    assert "ES/GRPO = **50.0×**; fp32 masters 40.0× (paper: 40.7× for this model" in md
    assert "vs GRPO checkpoint 0.0500: ES/GRPO = **40.0×** (paper: 42.7× for this model" in md
    line = {ln.split(" | ")[0]: ln for ln in md.splitlines() if ln.startswith("| cell")}
    want = "| saved:bfloat16 | 0.0400 | 0.000244 (2^-12) | 25.0% | – | 0.0500, 2e-06, 100.0% | 0.0475 |"
    assert want in line["| cell0"]
    assert f"| saved:bfloat16 vs {r1} | 0.0500 | 0.000977 (2^-10) |" in line["| cell2"]
    assert "| 0.0548, 0.000977 (2^-10) |" in line["| cell2"]
    assert "| as trained | 2.0000 | 0.0156 (2^-6) |" in line["| cell3"]
