"""The memory plan (`esbench.memory`, `esbench plan --gpus --gpu-memory`, the refusal in `esbench run`)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from esbench import memory, memory_check, memory_plan
from esbench.memory import GiB


def _cells(repo, suite: str):
    from esbench.spec import load_suite

    return load_suite(repo / "suites" / suite).cells()


# ---------------------------------------------------------------------------------------------------------------
# shapes


def test_tiny_shape_counts_what_the_built_model_holds(tiny_model_dir):
    from esbench.models import load_model

    model = load_model(str(tiny_model_dir)).model
    shape = memory.model_shape({"path": "builtin:tiny"})
    unique = {id(p): p.numel() for p in model.parameters()}  # tied embeddings once
    assert shape.params == sum(unique.values())
    assert shape.largest == max(unique.values())
    assert shape.kv_heads == model.config.num_key_value_heads and shape.layers == model.config.num_hidden_layers


@pytest.mark.parametrize(
    ("path", "billions"),
    [  # the published parameter counts (model cards): the table's fields must build models of these sizes
        ("Qwen/Qwen2.5-0.5B-Instruct", 0.494),
        ("Qwen/Qwen2.5-1.5B-Instruct", 1.54),
        ("Qwen/Qwen2.5-3B-Instruct", 3.09),
        ("Qwen/Qwen2.5-7B-Instruct", 7.62),
        ("meta-llama/Llama-3.2-3B-Instruct", 3.21),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 1.78),
    ],
)
def test_known_configs_build_the_published_sizes(path, billions):
    shape = memory.model_shape({"path": path, "revision": "0" * 40})  # a revision no cache has: the table
    assert shape.source.startswith("esbench.models.shapes")
    assert shape.params / 1e9 == pytest.approx(billions, rel=0.01)


def test_an_unknown_hub_model_has_no_prediction_rather_than_a_guess(repo):
    (cell,) = [c for c in _cells(repo, "tiny.yaml") if c.spec["method"]["kind"] == "base"]
    spec = json.loads(json.dumps(cell.spec))
    spec["model"]["path"] = "nobody/unknown-model"
    unknown = SimpleNamespace(id=cell.id, name=cell.name, spec=spec, typed=cell.typed)
    plan = memory_plan.plan_cell(unknown, 1, 80 * GiB)
    assert plan.fits is None and "nobody/unknown-model" in plan.reason


# ---------------------------------------------------------------------------------------------------------------
# the paper suites' plans


def test_paper_easy_fits_the_papers_node_and_names_what_does_not_fit_one_gpu(repo):
    cells = _cells(repo, "paper-easy.yaml")
    node = {c.name: memory_plan.plan_cell(c, 8, 80 * GiB) for c in cells}
    assert all(p.fits for p in node.values()), {n: p.reason for n, p in node.items() if not p.fits}
    assert node["qwen2.5-7b/gsm8k/es/b2ep/s42"].gpus == 8  # the 8 engines as real ones, one per GPU
    assert node["qwen2.5-7b/gsm8k/grpo/b2ep/s42"].gpus > 1  # GRPO sharded

    one = {c.name: memory_plan.plan_cell(c, 1, 80 * GiB) for c in cells}
    failing = {n for n, p in one.items() if not p.fits}
    assert {n.split("/")[0] for n in failing} == {"llama3.2-3b", "qwen2.5-7b"}
    assert all(p.fits for n, p in one.items() if n.startswith("qwen2.5-1.5b"))
    es = one["qwen2.5-7b/gsm8k/es/b2ep/s42"]  # its 7 simulated 7B replicas (99 GiB) wait in host memory
    assert es.fits and any("replicas in host memory" in n and "--es-workers 8" in n for n in es.notes)
    grpo = one["llama3.2-3b/gsm8k/grpo/b2ep/s42"]
    assert "train grpo" in grpo.reason and "--grpo-gpus 2" in grpo.fix
    assert all(not one[n].fits for n in failing) and all(one[n].reason for n in failing)


def test_the_resident_set_follows_the_settings_that_change_it(repo):
    """Each item responds to the setting that creates it: a wrong formula shows up as a wrong direction."""
    (cell,) = [c for c in _cells(repo, "paper-easy.yaml") if c.name == "qwen2.5-7b/gsm8k/es/b2ep/s42"]
    shape = memory.model_shape(cell.spec["model"])
    s = memory.sizing_for(cell, shape, 80 * GiB, None)
    cfg = cell.spec["method"]["config"]
    simulated = memory.es_phase(s, cfg, workers=1)
    real = memory.es_phase(s, cfg, workers=8)
    (replicas,) = [i for i in simulated.items if "replicas" in i.name]
    assert replicas.bytes == pytest.approx(7 * shape.params * 2) and replicas.host  # too big for 80 GB beside it
    assert simulated.total == pytest.approx(real.total) and real.gpus == 8 and simulated.gpus == 1
    big = memory.sizing_for(cell, shape, 1000 * GiB, None)  # a GPU they fit on: beside the weights
    assert memory.es_phase(big, cfg, 1).total - memory.es_phase(big, cfg, 8).total == pytest.approx(replicas.bytes)
    exact = memory.es_phase(s, {**cfg, "precision": "fp32-master", "engines": 1}, workers=1)
    assert "per-update snapshot" not in {i.name for i in exact.items}
    grpo = {"kl_coef": 0.001, "max_completion_length": 2048, "micro_batch": 2}
    one, eight = memory.grpo_phase(s, grpo, 1, False), memory.grpo_phase(s, grpo, 8, False)

    def sharded(p):
        return sum(
            i.bytes
            for i in p.items
            if "FSDP" in i.name or i.name in ("fp32 master", "gradients", "AdamW moments", "KL reference (fp32)")
        )

    assert sharded(one) == pytest.approx(20 * shape.params)  # 4 master + 4 grads + 8 Adam + 4 reference
    assert sharded(eight) == pytest.approx(20 * shape.params / 8 + 2 * 4 * memory._layer_params(shape))
    no_kl = memory.grpo_phase(s, {**grpo, "kl_coef": 0.0}, 1, False)
    assert one.total - no_kl.total == pytest.approx(4 * shape.params)


def test_a_vllm_engine_share_too_small_for_the_weights_is_named_with_its_setting(repo, monkeypatch):
    (cell,) = [c for c in _cells(repo, "paper-easy.yaml") if c.name == "qwen2.5-7b/-/base/b0/s42"]
    monkeypatch.setenv("ESBENCH_VLLM_MEMORY", "0.15")  # 12 GiB of 80: less than 7B's 14 GiB of bf16 weights
    plan = memory_plan.plan_cell(cell, 1, 80 * GiB)
    assert not plan.fits and "ESBENCH_VLLM_MEMORY=" in plan.reason


# ---------------------------------------------------------------------------------------------------------------
# the commands


def test_plan_command_prints_the_memory_columns_and_json(repo, capsys, tmp_path, monkeypatch):
    from esbench.cli import main

    monkeypatch.setenv("COLUMNS", "300")  # rich wraps to the terminal: the columns' contents must be whole
    suite = str(repo / "suites" / "paper-easy.yaml")
    assert main(["plan", suite, "--gpus", "1", "--gpu-memory", "80", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "GiB/GPU" in out and "NO" in out and "yes" in out
    assert main(["plan", suite, "--gpus", "8", "--gpu-memory", "80", "--json", "--out", str(tmp_path)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(r["memory"]["fits"] for r in rows)
    assert {"train es", "evaluate"} <= set(rows[1]["memory"]["phases"])
    assert not list(tmp_path.iterdir()), "plan writes nothing"


def test_plan_without_a_gpu_to_read_needs_both_numbers(repo, capsys, monkeypatch, tmp_path):
    import esbench.gpu
    from esbench.cli import main

    monkeypatch.setattr(esbench.gpu, "visible_memory", lambda: [])
    assert main(["plan", str(repo / "suites" / "paper-easy.yaml"), "--gpus", "8", "--out", str(tmp_path)]) == 2
    assert "--gpu-memory" in capsys.readouterr().err


def test_run_refuses_cells_predicted_not_to_fit_before_anything_loads(tmp_path, monkeypatch, capsys):
    """A CUDA GRPO cell of a 7B model on a (pretended) 80 GB GPU: refused, exit 2, nothing written, the fix named;
    with --grpo-gpus 8 on 8 such GPUs it passes; ESBENCH_MEMORY_CHECK=off lets it through to the next check."""
    import esbench.gpu
    from esbench.cli import main
    from esbench.cli_run import memory_refusals
    from esbench.spec import load_suite

    suite = tmp_path / "big.yaml"
    suite.write_text(
        """name: big
models:
  qwen7b: {path: Qwen/Qwen2.5-7B-Instruct, revision: a09a35458c702b33eeacc393d103063234e8bc28, dtype: bfloat16}
datasets:
  arith: {task: tiny_arith, size: 64}
methods:
  grpo: {method: grpo, kl_coef: 0.001, max_completion_length: 512}
budgets: [2]
seeds: [0]
backend: {kind: hf, device: cuda}
eval: {tasks: [tiny_arith], n: 4, max_new_tokens: 512}
"""
    )
    cells = load_suite(suite).cells()
    message = memory_refusals(cells, [80 * GiB], workers=1)
    assert message and "qwen7b/arith/grpo" in message and "--grpo-gpus" in message
    assert memory_refusals(cells, [80 * GiB] * 8, workers=1, grpo_gpus=8) is None  # sharded over 8: fits
    assert memory_refusals(cells, [], workers=1) is None  # no GPU: nothing to check here

    monkeypatch.setattr(esbench.gpu, "visible_memory", lambda: [80 * GiB])
    monkeypatch.setattr("esbench.cli_run._missing_artefacts", lambda cells: None)  # the hub model is not needed
    out = tmp_path / "runs"
    assert main(["run", str(suite), "--out", str(out)]) == 2
    assert "predicted not to fit" in capsys.readouterr().err
    assert not out.exists() or not any(out.rglob("*")), "a refused run writes nothing"
    monkeypatch.setenv("ESBENCH_MEMORY_CHECK", "off")
    assert memory_refusals(cells, [80 * GiB], workers=1) is None


# ---------------------------------------------------------------------------------------------------------------
# predicted against measured, on the CPU (the same resident set: one memory holds weights and host copies)


@pytest.mark.parametrize(("kind", "settings"), list(memory_check.CHECK_RUNS.items()))
def test_predicted_peak_is_within_15_percent_of_the_measured_one_on_the_tiny_model(
    tiny_model_dir, tmp_path, kind, settings
):
    from esbench.models import load_model

    loaded = load_model(str(tiny_model_dir))
    got = memory_check.measured_against_plan(loaded.model, loaded.tokenizer, kind, settings, tmp_path)
    assert got["predicted_bytes"] == pytest.approx(got["measured_bytes"], rel=0.15), got


def test_the_published_plans_are_the_codes(repo):
    """docs/memory-plan.md's tables are what `esbench plan --markdown` prints today (regenerate them when the
    resident set or a paper suite changes)."""
    from esbench.spec import load_suite

    doc = (repo / "docs" / "memory-plan.md").read_text()
    published = doc.split("<!-- plan:begin -->\n", 1)[1].split("<!-- plan:end -->", 1)[0]
    expected = ""
    for name in ("paper-easy", "paper-hard", "paper-population", "paper-ablations", "paper-subtraction"):
        cells = load_suite(repo / "suites" / f"{name}.yaml").cells()
        for gpus, gib in ((8, 80), (1, 141)):
            plans = [memory_plan.plan_cell(c, gpus, gib * GiB) for c in cells]
            expected += memory_plan.plan_markdown(name, plans, gpus, gib * GiB) + "\n"
    assert published == expected
