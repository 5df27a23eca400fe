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
    assert names == ["drift.png", "passk.png", "passk_profile.png", "probe.png", "sparsity.png", "training.png"]
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
