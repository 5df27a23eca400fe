"""Both vLLM engines get the cell's longest sequence as their context, not the model's whole one (issue 25)."""

from __future__ import annotations

from types import SimpleNamespace

from esbench.backends import SEQUENCE_MARGIN, engine_context
from esbench.methods.grpo_trl import GRPOSettings, grpo_config


def test_engine_context_is_the_longest_sequence_below_the_models_own():
    llama = SimpleNamespace(max_position_embeddings=131_072)  # Llama-3.2: vLLM would size KV for 131k tokens
    assert engine_context(700, 2048, llama) == 700 + 2048 + SEQUENCE_MARGIN
    assert engine_context(100_000, 40_000, llama) is None  # reaches the model's context: vLLM's default is right
    assert engine_context(10, 20, SimpleNamespace()) == 10 + 20 + SEQUENCE_MARGIN


def test_trls_colocated_engine_gets_the_context(tmp_path):
    args = grpo_config(GRPOSettings(), 10, str(tmp_path), 0, False, vllm_rollouts=True, max_model_length=2300)
    assert args.vllm_max_model_length == 2300
    hf = grpo_config(GRPOSettings(), 10, str(tmp_path), 0, True, max_model_length=2300)
    assert hf.vllm_max_model_length is None  # no colocated engine on the HF path


def test_grpo_measures_its_longest_prompt_as_trl_tokenises_it(tmp_path, monkeypatch, tiny_model_dir):
    """GRPO hands TRL the longest training prompt (special tokens added, as TRL tokenises) plus its completion
    budget; the HF path ignores it, so one HF update shows the value without an engine."""
    import esbench.methods.grpo as grpo
    from esbench.backends.hf import HFBackend
    from esbench.methods import TrainContext, registry
    from esbench.models import load_model
    from esbench.rewards import Reward
    from esbench.tasks import get_task

    seen = {}
    real = grpo.grpo_config

    def spy(*a, **kw):
        seen["max_model_length"] = kw.get("max_model_length")
        return real(*a, **kw)

    monkeypatch.setattr(grpo, "grpo_config", spy)
    cls = registry.get("grpo")
    cfg = cls.Config(
        prompts_per_rollout=4, num_generations=4, ppo_minibatch_prompts=4, micro_batch=16, max_completion_length=24
    )
    task = get_task("tiny_arith")
    loaded = load_model(str(tiny_model_dir))
    backend = HFBackend(loaded.model, loaded.tokenizer, device="cpu")
    ctx = TrainContext(seed=0, workdir=tmp_path, log_path=tmp_path / "train.jsonl", prompt=task.prompt, backend=backend)
    rows = task.rows("train", 8)
    cls().train(rows, Reward(task), 1, cfg, ctx)
    tok = loaded.tokenizer
    longest = max(len(tok(grpo.trl_prompt(task.prompt(r), tok))["input_ids"]) for r in rows)
    assert seen["max_model_length"] == engine_context(longest, 24, loaded.model.config)
    assert seen["max_model_length"] < loaded.model.config.max_position_embeddings


def test_the_runner_sizes_esbenchs_engine_from_the_cells_prompts_and_budgets(tiny_model_dir, tmp_path):
    from run_helpers import small_suite

    from esbench.memory import generation_budget
    from esbench.models import load_model
    from esbench.runner import longest_sequence
    from esbench.spec import load_suite
    from esbench.tasks import get_task

    suite = tmp_path / "s.yaml"
    suite.write_text(small_suite("ctx"))
    cells = {c.labels["method"]: c for c in load_suite(suite).cells()}
    loaded = load_model(str(tiny_model_dir))
    tok = loaded.tokenizer
    es = cells["es"]
    spec = es.typed
    budget = generation_budget(spec, es.spec["method"])
    assert budget == max(spec.eval.max_new_tokens, es.spec["method"]["config"].get("max_new_tokens", 0))

    def longest(name, split, size):
        t = get_task(name)
        return max(len(tok(t.prompt(r, tokenizer=tok))["input_ids"]) for r in t.rows(split, size))

    prompts = [longest(t, "test", spec.eval.limit) for t in [*spec.eval.tasks, *spec.eval.held_out]]
    prompts.append(longest(spec.dataset.task, "train", spec.dataset.size))
    want = engine_context(max(prompts), budget, loaded.model.config)
    assert want is not None and longest_sequence(spec, es.spec["method"], tok, loaded.model.config) == want


def test_vllms_engine_starts_with_the_context_and_records_it(tiny_model_dir):
    from esbench.backends.vllm import VLLMBackend
    from esbench.models import load_model

    loaded = load_model(str(tiny_model_dir))
    vb = VLLMBackend(loaded.model, loaded.tokenizer, device="cpu", cpu_threads=1, max_model_len=96)
    try:
        assert vb.llm.llm_engine.model_config.max_model_len == 96
        assert vb.provenance()["engine"]["max_model_len"] == 96
        out = vb.generate(["1+2="], n=1, temperature=0.0, top_p=1.0, max_new_tokens=8, seed=0)
        assert len(out) == 1
    finally:
        vb.close()
