"""The paper's claims (esbench/claims.py): verdicts on per-problem evidence built so the answer is known, the
bootstrap's determinism and seed level, and the claims in `esbench report`, the leaderboard and the demo's output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from run_helpers import minimal_release, small_suite

from esbench import claims, claims_compute, claims_stats
from esbench.cli import main
from esbench.metrics.bootstrap import hierarchical_bootstrap, paired_bootstrap
from esbench.metrics.passk import pass_at_k
from esbench.report_render import claims_md

N = 16  # samples per problem
KIND = {"base": "base", "es": "es", "grpo": "grpo", "es-grpo": "sequence"}


def record(method: str, correct: dict[str, list[int]], seed: int = 0, entropy=None, drift=None, model="m", n=N):
    """A record with `correct[task][i]` of n samples right on problem i; `entropy[task]` per-problem nats."""
    kind = KIND[method]
    config = {"stages": [{"kind": "es"}, {"kind": "grpo"}]} if kind == "sequence" else {}
    trained = method != "base"
    metrics = {}
    for t, cs in correct.items():
        m = {"problems": len(cs), "n": n, "per_problem": [[n, c] for c in cs], "format_rate": 1.0}
        m["pass@1"] = sum(cs) / (n * len(cs))
        if entropy is not None:
            m["entropy"] = float(np.mean(entropy[t]))
            if entropy.get("per_problem", True):
                m["entropy_per_problem"] = list(entropy[t])
        metrics[t] = m
    rec = {
        "cell": {
            "name": f"{model}/{'arith' if trained else '-'}/{method}/b{20 if trained else 0}/s{seed}",
            "labels": {"model": model, "dataset": "arith" if trained else "-", "method": method, "suite": "t"},
            "spec": {
                "method": {"kind": kind, "config": config},
                "seed": seed,
                "budget": 20 if trained else 0,
                "dataset": {"task": "arith"} if trained else None,
                "eval": {"k": [1, n]},
                "model": {"path": "builtin:tiny"},
            },
        },
        "metrics": metrics,
        "held_out": [t for t in correct if t != "arith"],
    }
    if drift is not None:
        rec["drift"] = {"relative_l2": drift, "weights": "saved:float32"}
    return rec


def by_id(records) -> dict[str, dict]:
    return {r["id"]: r for r in claims.evaluate(records)["results"]}


RNG = np.random.default_rng(0)
BASE = RNG.integers(2, 12, size=60).tolist()  # per-problem correct counts of base on the training task


def shifted(delta: int) -> list[int]:
    return [int(np.clip(c + delta + RNG.integers(-1, 2), 0, N)) for c in BASE]


def test_each_verdict_class_on_known_evidence():
    """GRPO well above ES: C1 supported; swapped: contradicted; the same up to noise: inconclusive; no GRPO cell,
    or a K beyond n: not measurable."""
    base, es, grpo = (
        record("base", {"arith": BASE}),
        record("es", {"arith": shifted(0)}),
        record("grpo", {"arith": shifted(4)}),
    )
    got = by_id([base, es, grpo])
    assert got["C1"]["verdict"] == claims_stats.SUPPORTED and got["C1"]["lo"] > 0
    assert got["C1"]["cells"] == {
        "base": ["m/-/base/b0/s0"],
        "GRPO": ["m/arith/grpo/b20/s0"],
        "ES": ["m/arith/es/b20/s0"],
    }
    swapped = by_id([base, record("es", {"arith": shifted(4)}), record("grpo", {"arith": shifted(0)})])
    assert swapped["C1"]["verdict"] == claims_stats.CONTRADICTED and swapped["C1"]["hi"] < 0
    flip = [c + (1 if i % 2 else -1) * (c < N) * (c > 0) for i, c in enumerate(BASE)]  # mean change ~0, both signs
    same = by_id([base, record("es", {"arith": BASE}), record("grpo", {"arith": flip})])
    assert same["C1"]["verdict"] == claims_stats.INCONCLUSIVE and same["C1"]["lo"] < 0 < same["C1"]["hi"]
    no_grpo = by_id([base, es])
    assert no_grpo["C1"]["verdict"] == claims_stats.NOT_MEASURABLE and "GRPO" in no_grpo["C1"]["parts"][0]["note"]
    assert got["C2@32"]["verdict"] == claims_stats.NOT_MEASURABLE  # n = 16 < 32
    assert got["C2@16"]["verdict"] != claims_stats.NOT_MEASURABLE
    assert claims.evaluate([base])["results"][0]["verdict"] == claims_stats.NOT_MEASURABLE  # no trained cell at all


def test_c1_is_the_paired_bootstrap_of_per_problem_pass1_and_is_deterministic():
    es, grpo = record("es", {"arith": shifted(0)}), record("grpo", {"arith": shifted(2)})
    first, again = by_id([es, grpo])["C1"], by_id([grpo, es])["C1"]
    assert first == again  # same records in another order: the same CI
    p = lambda r: [pass_at_k(n, c, 1) for n, c in r["metrics"]["arith"]["per_problem"]]  # noqa: E731
    ref = paired_bootstrap(p(es), p(grpo), iters=claims_stats.BOOTSTRAP_ITERS, seed=claims_stats.BOOTSTRAP_SEED)
    assert (first["value"], first["lo"], first["hi"]) == pytest.approx((ref["delta"], ref["lo"], ref["hi"]))
    assert first["value"] == pytest.approx(grpo["metrics"]["arith"]["pass@1"] - es["metrics"]["arith"]["pass@1"])
    assert first["n_problems"] == len(BASE) and first["n_seeds"] == 1


def test_non_inferiority_margins_of_c2_and_c5():
    """Per-problem Pass@16 is 1 with 4 of 16 right and 0 with none. ES failing one problem of 30 more than GRPO:
    its CI crosses C2's -1 pp margin (inconclusive); tied: CI [0, 0], above the margin (supported, although not
    above 0); ES→GRPO failing 6 of 30 more than ES: CI below C5's -2 pp margin (contradicted)."""
    right = [[N, 4]] * 30
    es, grpo, seq = (record(m, {"arith": [4] * 30}) for m in ("es", "grpo", "es-grpo"))
    es["metrics"]["arith"]["per_problem"] = [[N, 0]] + right[1:]
    got = by_id([es, grpo])["C2@16"]
    assert got["value"] == pytest.approx(-1 / 30) and got["lo"] < -claims_compute.C2_MARGIN < got["hi"]
    assert got["verdict"] == claims_stats.INCONCLUSIVE
    es["metrics"]["arith"]["per_problem"] = right
    tied = by_id([es, grpo])["C2@16"]
    assert tied["value"] == 0 and tied["verdict"] == claims_stats.SUPPORTED
    seq["metrics"]["arith"]["per_problem"] = [[N, 0]] * 6 + right[6:]
    c5 = by_id([es, grpo, seq])["C5"]
    pass16 = next(p for p in c5["parts"] if p["name"].startswith("Pass@16"))
    assert pass16["threshold"] == -claims_compute.C5_MARGIN and pass16["hi"] < -claims_compute.C5_MARGIN
    assert pass16["verdict"] == claims_stats.CONTRADICTED and c5["verdict"] == claims_stats.CONTRADICTED


def test_c3_entropy_parts_and_records_without_per_problem_entropy():
    tasks = {"arith": BASE, "held": BASE}
    h = RNG.uniform(0.2, 0.4, size=len(BASE))
    ent = lambda d: {"arith": h, "held": h + d}  # noqa: E731
    base = record("base", tasks, entropy=ent(0.0))
    es = record("es", tasks, entropy=ent(-0.001 + RNG.normal(0, 0.002, len(BASE))))
    grpo = record("grpo", tasks, entropy=ent(-0.1 + RNG.normal(0, 0.01, len(BASE))))
    c3 = by_id([base, es, grpo])["C3"]
    assert c3["verdict"] == claims_stats.SUPPORTED and c3["where"] == "held-out tasks"
    g, e = c3["parts"]
    assert g["hi"] < 0 and e["lo"] > e["threshold"] == pytest.approx(-claims_compute.C3_MARGIN * (h.mean()))
    collapsed_es = record("es", tasks, entropy=ent(-0.1 + RNG.normal(0, 0.01, len(BASE))))
    assert by_id([base, collapsed_es, grpo])["C3"]["verdict"] == claims_stats.CONTRADICTED
    old = [
        record(m, tasks, entropy={**ent(d), "per_problem": False}) for m, d in (("base", 0), ("es", 0), ("grpo", -0.1))
    ]
    c3_old = by_id(old)["C3"]
    assert c3_old["verdict"] == claims_stats.INCONCLUSIVE and c3_old["lo"] is None
    assert "no per-problem evidence" in c3_old["parts"][0]["note"]
    assert c3_old["parts"][0]["value"] == pytest.approx(-0.1)
    no_entropy = by_id([record(m, tasks) for m in ("base", "es", "grpo")])["C3"]
    assert no_entropy["verdict"] == claims_stats.NOT_MEASURABLE


def test_c4_drift_ratio_one_seed_and_seed_level_ci():
    one = by_id([record("es", {"arith": BASE}, drift=0.02), record("grpo", {"arith": BASE}, drift=0.0005)])["C4"]
    assert one["value"] == pytest.approx(40.0) and one["lo"] is None and one["verdict"] == claims_stats.SUPPORTED
    assert "no CI, one seed" in claims.statistic_text(one)
    recs = []
    for s, (a, b) in enumerate(((0.02, 0.001), (0.03, 0.001), (0.025, 0.001))):
        recs += [record("es", {"arith": BASE}, seed=s, drift=a), record("grpo", {"arith": BASE}, seed=s, drift=b)]
    three = by_id(recs)["C4"]
    assert three["n_seeds"] == 3 and three["value"] == pytest.approx(25.0)
    assert 20 <= three["lo"] <= three["hi"] <= 30 and three["verdict"] == claims_stats.SUPPORTED
    low = by_id([record("es", {"arith": BASE}, drift=0.002), record("grpo", {"arith": BASE}, drift=0.001)])["C4"]
    assert low["verdict"] == claims_stats.CONTRADICTED


def test_hierarchical_seeds_resample_seeds_then_problems():
    """Three seeds whose GRPO gains differ (+2, +6, +10 of 16): the seed-level CI is far wider than a CI that
    pooled every seed's problems as if independent, and the point is the mean over seeds."""
    recs = []
    for s, gain in enumerate((2, 6, 10)):
        recs += [
            record("es", {"arith": BASE}, seed=s),
            record("grpo", {"arith": [min(N, c + gain) for c in BASE]}, seed=s),
        ]
    c1 = by_id(recs)["C1"]
    assert c1["n_seeds"] == 3 and "seeds, then problems" in c1["parts"][0]["ci"]
    diffs = [[pass_at_k(N, min(N, c + g), 1) - pass_at_k(N, c, 1) for c in BASE] for g in (2, 6, 10)]
    pooled = paired_bootstrap([0.0] * (3 * len(BASE)), sum(diffs, []))
    assert c1["value"] == pytest.approx(pooled["delta"])
    assert c1["hi"] - c1["lo"] > 3 * (pooled["hi"] - pooled["lo"])
    one = hierarchical_bootstrap([[diffs[0]]])
    assert one == paired_bootstrap([0.0] * len(BASE), diffs[0])  # one seed, one task: exactly the paired bootstrap


def test_c6_is_the_held_out_mean_at_pass_k_with_equal_task_weights():
    held_a, held_b = [3] * 20, [3] * 40
    es = record("es", {"arith": BASE, "a": [0] * 20, "b": held_b})  # ES loses task a entirely at Pass@16
    grpo = record("grpo", {"arith": BASE, "a": held_a, "b": held_b})
    c6 = by_id([es, grpo])["C6@16"]
    assert c6["value"] == pytest.approx(-0.5)  # (-1 on a + 0 on b) / 2 tasks, whatever their sizes
    assert c6["verdict"] == claims_stats.CONTRADICTED and c6["n_problems"] == 60


def test_claims_markdown_and_paper_values():
    recs = [record("base", {"arith": BASE}), record("es", {"arith": shifted(0)}), record("grpo", {"arith": shifted(4)})]
    data = claims.evaluate(recs)
    md = "\n".join(claims_md(data))
    assert "## Paper claims" in md
    row = next(x for x in md.splitlines() if x.startswith("| C1:"))
    c1 = by_id(recs)["C1"]
    assert f"{c1['value'] * 100:+.1f} pp [{c1['lo'] * 100:+.1f}, {c1['hi'] * 100:+.1f}]" in row
    assert "**supported**" in row
    ref = json.loads((Path(__file__).parents[1] / "leaderboard" / "reference" / "paper_tables.json").read_text())
    paper = claims.paper_values(ref["values"])
    v = {
        (x["model"], x["method"]): x["value"]
        for x in ref["values"]
        if x["table"] == 2 and x["column"] == "GSM8K" and x["metric"] == "pass@1"
    }
    qwen = next(e for e in paper["C1"] if e["model"] == "Qwen2.5-1.5B-Instruct")
    assert qwen["value"] == pytest.approx(v["Qwen2.5-1.5B-Instruct", "GRPO"] - v["Qwen2.5-1.5B-Instruct", "ES"])
    assert {e["value"] for e in paper["C4"]} == {
        x["value"] for x in ref["values"] if x["metric"] == "drift_ratio_es_grpo"
    }
    assert paper["C3"] == [] and "Fig. 2" in claims.paper_text([], "C3")


def test_leaderboard_claims_table_escapes_submission_strings():
    from esbench.leaderboard.board import Board, submission_claims
    from esbench.leaderboard.render import claims_sections
    from esbench.leaderboard.render_html import claims_html
    from esbench.leaderboard.verify_report import CellResult, Report

    model = "evil|<b>m</b>"
    recs = [
        record(m, {"arith": BASE if m == "base" else shifted(4 * (m == "grpo"))}, model=model)
        for m in ("base", "es", "grpo")
    ]
    report = Report(Path("sub"), "v", cells=[CellResult(r["cell"]["name"], r) for r in recs])
    report.submission = {"name": "x|<script>"}
    ref = json.loads((Path(__file__).parents[1] / "leaderboard" / "reference" / "paper_tables.json").read_text())
    board = Board({}, [], [report], [], ref["values"], {}, submission_claims([report]))
    md = "\n".join(claims_sections(board))
    assert "## Paper claims: submission `x|<script>`" in md  # a heading, as the results sections name it
    c1 = next(x for x in md.splitlines() if "C1:" in x)
    assert c1.startswith("| evil\\|&lt;b&gt;m&lt;/b&gt;/arith/b20 | C1:") and "**supported**" in c1  # no raw tags
    assert "verified (samples)" in c1 and "Qwen2.5-1.5B-Instruct +4.9 (Table 2 GSM8K)" in c1
    assert "reported (record)" in next(x for x in md.splitlines() if "C4:" in x)
    page = claims_html(board)
    assert "<script>" not in page and "x|&lt;script&gt;" in page and "evil|&lt;b&gt;m&lt;/b&gt;" in page
    assert "<span class='badge reproduced'>supported</span>" in page


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, tiny_model_dir):
    """The shared small suite (base and a 4-member ES, 2 updates, 6 problems x 4 samples), run once."""
    root = tmp_path_factory.mktemp("claims")
    suite = root / "claims.yaml"
    suite.write_text(small_suite("claims"))
    return root, suite


def test_demo_prints_verdicts_and_report_json_carries_claims(small_run, capsys):
    root, suite = small_run
    assert main(["run", str(suite), "--out", str(root / "runs")]) == 0
    out = capsys.readouterr().out
    assert "paper claims (arXiv 2608.27351)" in out
    lines = out[out.index("paper claims") :].splitlines()
    for cid in ("C1", "C2@16", "C3", "C4", "C5", "C6@16"):
        line = next(x for x in lines if f" {cid} " in x)
        assert "not measurable" in line  # no GRPO cell in this suite: each claim says so
    records = [json.loads(p.read_text()) for p in (root / "runs" / "claims").glob("*/record.json")]
    for r in records:  # per-problem entropy now recorded, one value per problem, token-weighted per problem
        for m in r["metrics"].values():
            assert len(m["entropy_per_problem"]) == m["problems"]
            assert all(v is None or v >= 0 for v in m["entropy_per_problem"])
    assert main(["report", str(root / "runs" / "claims"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ids = [r["id"] for r in data["claims"]["results"]]
    assert ids == [c.id for c in claims.CLAIMS]
    for r in data["claims"]["results"]:
        assert {"statistic", "value", "lo", "hi", "verdict", "n_problems", "n_seeds", "cells"} <= set(r)
    assert main(["report", str(root / "runs" / "claims")]) == 0
    assert "## Paper claims (arXiv 2608.27351)" in capsys.readouterr().out


def test_entropy_per_problem_is_token_weighted_within_each_problem():
    from esbench.evaluation import entropy_per_problem

    rows = [{"resps": ["a", "b"]}, {"resps": ["", ""]}, {"resps": ["c"]}]
    per_response = [[3.0, 3], [1.0, 1], [0.0, 0], [0.0, 0], [0.5, 2]]  # [entropy sum, tokens] per response
    assert entropy_per_problem(rows, per_response) == [1.0, None, 0.25]
    with pytest.raises(ValueError):
        entropy_per_problem(rows, per_response[:-1])


def test_a_group_without_trained_grpo_takes_the_checkpoint_and_prefers_the_canonical_es():
    """The hard setting's GRPO is a released checkpoint (budget 0, no dataset); of two ES cells, `es` is used."""
    ckpt = record("grpo", {"arith": shifted(4)})
    ckpt["cell"]["spec"]["method"] = {"kind": "checkpoint", "config": {}}
    ckpt["cell"]["spec"]["budget"], ckpt["cell"]["name"] = 0, "m/-/grpo/b0/s0"
    es, bf16 = record("es", {"arith": shifted(0)}), record("es", {"arith": shifted(8)})
    bf16["cell"]["labels"]["method"], bf16["cell"]["name"] = "es-bf16", "m/arith/es-bf16/b20/s0"
    c1 = by_id([bf16, ckpt, es])["C1"]
    assert c1["cells"] == {"GRPO": ["m/-/grpo/b0/s0"], "ES": ["m/arith/es/b20/s0"]}
    assert c1["unused"] == ["m/arith/es-bf16/b20/s0"] and c1["verdict"] == claims_stats.SUPPORTED


def test_a_new_release_states_the_claims_in_its_paper_map(tmp_path):
    """Issue 24: the release's paper map states each claim as a statistic with a direction and a test, with the
    margins and the bootstrap, so a later change to esbench/claims.py cannot silently restate an old release."""
    d = minimal_release(tmp_path, "v9.9")
    stated = json.loads((d / "release.json").read_text())["paper_map"]["claims"]
    assert [c["id"] for c in stated["claims"]] == ["C1", "C2@16", "C2@32", "C3", "C4", "C5", "C6@16", "C6@32"]
    c2 = next(c for c in stated["claims"] if c["id"] == "C2@16")
    assert c2["test"] == "≥ −1 pp" and "Pass@16(ES) − Pass@16(GRPO)" in c2["statistic"]
    assert (
        stated["margins"]["C2"] == claims_compute.C2_MARGIN
        and stated["bootstrap"]["iters"] == claims_stats.BOOTSTRAP_ITERS
    )
