"""The embedded tiny model: offline build, stable tokenizer, deterministic recipe, and partial skill."""

from __future__ import annotations

import copy
import json

import pytest

from esbench.models import check_model_path, load_model, state_hash, tiny


def test_tokenizer_reloads_with_identical_ids(tmp_path):
    from transformers import AutoTokenizer

    tok = tiny.build_tokenizer(128)
    text = "Q 12+7-3=?\n12+7=19\n19-3=16\n#### 16"
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert tok(text)["input_ids"] == again(text)["input_ids"]
    assert len(tok(text)["input_ids"]) == len(text), "one token per character"
    assert again.padding_side == "left" and again.model_max_length == 128


def test_student_solutions_propagate_their_errors():
    assert tiny.solve("Q 12+7-3=?") == "12+7=19\n19-3=16\n#### 16"
    assert tiny.solve("Q 12+7-3=?", bad_step=0, offset=-2) == "12+7=17\n17-3=14\n#### 14"
    assert tiny.solve("Q 2-5+1=?") == "2-5=-3\n-3+1=-2\n#### -2"
    assert tiny.solve("Q 2-5+1=?", slip=lambda v: True) == "2-5=3\n3+1=4\n#### 4", "sign slip on negatives only"


def test_the_grouped_method_keeps_signs_and_propagates_its_slips():
    assert tiny.solve_grouped("Q 2-5+1=?") == "+2+1=3\n-5=-5\n3-5=-2\n#### -2"
    assert tiny.solve_grouped("Q 18+4-8-6=?", bad_line=1, offset=1) == "+18+4=22\n-8-6=-13\n22-13=9\n#### 9"
    assert tiny.solve_grouped("Q 0+7+1-0=?") == "+0+7+1+0=8\n#### 8", "`-0` joins the positives: one line"


def test_pretraining_mixes_both_methods_at_the_recipe_rates():
    import random

    from esbench.tasks import synthetic

    data, rng = tiny.RECIPE["data"], random.Random(0)
    rows = synthetic.make_split("arith", "train", 3000)
    texts = [tiny.training_text(r, rng, data) for r in rows]
    grouped = sum(t.startswith("+") for t in texts) / len(texts)
    assert abs(grouped - data["grouped_share"]) < 0.03
    negative = [t for r, t in zip(rows, texts, strict=True) if "=-" in tiny.solve(r["question"]) and t[0] != "+"]
    kept = sum("=-" in t for t in negative) / len(negative)
    assert kept < 2 * (1 - data["sign_slip_rate"]) + 0.02, "left to right loses the minus sign"


def test_build_is_deterministic_and_cached(tmp_path, monkeypatch):
    recipe = copy.deepcopy(tiny.RECIPE)
    recipe["train"]["steps"] = 4
    hashes = []
    for i in range(2):
        monkeypatch.setenv("ESBENCH_CACHE", str(tmp_path / f"cache{i}"))
        path = tiny.ensure_built(recipe)
        assert path.name == f"tiny-{tiny.recipe_hash(recipe)}"
        hashes.append(state_hash(load_model(str(path)).model))
        assert tiny.ensure_built(recipe) == path  # cached: no rebuild
    assert hashes[0] == hashes[1]
    recipe["train"]["seed"] = 1
    assert tiny.recipe_hash(recipe) != path.name.removeprefix("tiny-")


def test_model_references_resolve_or_fail_clearly(tmp_path):
    check_model_path("builtin:tiny")
    check_model_path("Qwen/Qwen2.5-1.5B-Instruct")  # a hub id is accepted offline; loading needs the hub
    for bad, msg in [("builtin:nope", "unknown builtin"), ("/no/such/dir", "unknown model"), ("bad id!", "unknown")]:
        with pytest.raises(ValueError, match=msg):
            check_model_path(bad)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="config.json"):
        check_model_path(str(tmp_path / "empty"))


def test_local_path_loads_through_the_same_code(tiny_model_dir):
    by_name = load_model("builtin:tiny")
    by_path = load_model(str(tiny_model_dir))
    assert state_hash(by_name.model) == state_hash(by_path.model)
    assert by_path.provenance["weights_sha256"] == by_name.provenance["weights_sha256"]
    assert 1_000_000 <= by_path.provenance["parameters"] <= 5_000_000


def test_tiny_model_has_partial_skill_and_learned_held_out_families(tiny_model_dir, tmp_path):
    """Pass@1 in 20-60 % and Pass@16 >= 1.5 x Pass@1 on arithmetic; reversal and maximum clearly learned."""
    from esbench.backends.hf import HFBackend
    from esbench.evaluation import evaluate
    from esbench.spec_schema import EvalSpec

    loaded = load_model("builtin:tiny")
    spec = {
        "tasks": ["tiny_arith", "tiny_reverse", "tiny_max"],
        "limit": 100,
        "n": 16,
        "k": [1, 16],
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 48,
        "greedy": False,
    }
    m = evaluate(HFBackend(loaded.model, loaded.tokenizer, device="cpu"), EvalSpec(**spec), 0, tmp_path)
    arith = m["tiny_arith"]
    assert 0.2 <= arith["pass@1"] <= 0.6, arith["pass@1"]
    assert arith["pass@16"] >= 1.5 * arith["pass@1"]
    for task in ("tiny_reverse", "tiny_max"):
        assert m[task]["pass@1"] >= 0.5, (task, m[task]["pass@1"])


def test_concurrent_builds_wait_for_the_first(tmp_path, monkeypatch):
    """Processes that find the cache empty at once build the model once; the others wait and reuse it."""
    import subprocess
    import sys

    recipe = copy.deepcopy(tiny.RECIPE)
    recipe["train"]["steps"] = 4
    monkeypatch.setenv("ESBENCH_CACHE", str(tmp_path))
    script = (
        "import json, sys, logging; from esbench.models import tiny; logging.basicConfig(level=logging.WARNING);"
        "print(tiny.ensure_built(json.loads(sys.argv[1])))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, json.dumps(recipe)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert len({out.strip() for out, _ in outs}) == 1
    assert sum("building the embedded tiny model" in err for _, err in outs) == 1, "exactly one process pre-trains"
