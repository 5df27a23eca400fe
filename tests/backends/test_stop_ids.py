"""One stop set for every generation path: the HF backend, the vLLM backend and GRPO's TRL rollouts all stop on the
tokenizer's EOS, config.json's EOS ids and the EOS ids the model folder's generation_config.json declares
(Qwen2.5-Instruct declares `<|endoftext|>` there), and nothing else in that file changes what they sample.

The model folder here is the tiny model with a newline declared as an extra EOS in generation_config.json (the tiny
model ends its first line within a few tokens, so the stop shows) and a `?` in config.json's EOS list, beside
sampling defaults that would make every sample greedy if they leaked (temperature 0.01, top-k 1).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from esbench.backends.hf import HFBackend
from esbench.models import load_model
from esbench.tasks import get_task

HOSTILE_SAMPLING = {"do_sample": True, "temperature": 0.01, "top_k": 1, "top_p": 0.1, "repetition_penalty": 1.5}
MAX_NEW = 40


def _load(directory: Path):
    loaded = load_model(str(directory))
    return loaded.model, loaded.tokenizer


def _token(tokenizer, text: str) -> int:
    (i,) = tokenizer(text, add_special_tokens=False)["input_ids"]
    return i


@pytest.fixture(scope="module")
def folders(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """`plain`: the tiny model with the extra EOS ids; `hostile`: the same plus the file's sampling defaults."""
    _, tok = _load(tiny_model_dir)
    newline, question = _token(tok, "\n"), _token(tok, "?")
    root = tmp_path_factory.mktemp("stop_ids")
    plain, hostile = root / "plain", root / "hostile"
    shutil.copytree(tiny_model_dir, plain)
    config = json.loads((plain / "config.json").read_text())
    config["eos_token_id"] = [config["eos_token_id"], question]
    (plain / "config.json").write_text(json.dumps(config))
    (plain / "generation_config.json").write_text(json.dumps({"eos_token_id": [newline]}))
    shutil.copytree(plain, hostile)
    (hostile / "generation_config.json").write_text(json.dumps({"eos_token_id": [newline], **HOSTILE_SAMPLING}))
    return {"reference": tiny_model_dir, "plain": plain, "hostile": hostile}


def _expected_set(folder: Path) -> list[int]:
    """The stop set read straight from the folder's files."""
    ids = {_load(folder)[1].eos_token_id}
    for name in ("config.json", "generation_config.json"):
        value = json.loads((folder / name).read_text()).get("eos_token_id")
        ids.update(value if isinstance(value, list) else [value])
    return sorted(ids)


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    task = get_task("tiny_arith")
    return [task.prompt(r) for r in task.rows("test", 8)]


def test_the_stop_set_joins_tokenizer_config_and_generation_config_and_is_recorded(folders):
    backend = HFBackend(*_load(folders["hostile"]), device="cpu", cpu_threads=1)
    tok = backend.tokenizer
    expected = _expected_set(folders["hostile"])
    assert {tok.eos_token_id, _token(tok, "?"), _token(tok, "\n")} == set(expected) and len(expected) == 3
    assert backend.stop_token_ids == expected
    assert backend.provenance()["stop_token_ids"] == expected
    assert backend.generation_config(0.0, 1.0, 8, 1).eos_token_id == expected


def test_hf_greedy_stops_at_the_declared_eos(folders, prompts):
    reference = HFBackend(*_load(folders["reference"]), device="cpu", cpu_threads=1)
    declared = HFBackend(*_load(folders["hostile"]), device="cpu", cpu_threads=1)
    before = [g[0] for g in reference.generate(prompts, max_new_tokens=MAX_NEW)]
    after = [g[0] for g in declared.generate(prompts, max_new_tokens=MAX_NEW)]
    for b, a in zip(before, after, strict=True):
        assert "\n" in b.text.rstrip("\n"), "premise: the tiny model writes a newline mid-response"
        assert a.text == b.text[: b.text.index("\n") + 1]  # the answer ends at the declared EOS, the EOS kept
        assert a.tokens < b.tokens


def test_the_files_sampling_defaults_change_nothing_on_hf(folders, prompts):
    """Sampled at a fixed seed, the folder with hostile defaults gives the plain folder's samples, token for token."""
    model, tok = _load(folders["hostile"])
    assert model.generation_config.top_k == 1  # premise: transformers loaded the defaults that could leak
    kw = {"n": 8, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": MAX_NEW, "seed": 11}
    hostile = HFBackend(model, tok, device="cpu", cpu_threads=1).generate(prompts, **kw)
    plain = HFBackend(*_load(folders["plain"]), device="cpu", cpu_threads=1).generate(prompts, **kw)
    assert hostile == plain
    assert any(len({g.text for g in gs}) > 1 for gs in hostile), "top-k 1 or T=0.01 leaked: every sample is greedy"
    assert all("\n" not in g.text[:-1] for gs in hostile for g in gs), "a sample ran past the declared EOS"


@pytest.fixture(scope="module")
def engine(folders):
    """One vLLM engine, on the folder with the declared EOS and the hostile sampling defaults."""
    from esbench.backends.vllm import VLLMBackend

    vb = VLLMBackend(*_load(folders["hostile"]), device="cpu", cpu_threads=1)
    yield vb
    vb.close()


def test_vllm_stops_at_the_same_place_as_hf_and_on_the_same_set(engine, folders, prompts):
    hf = HFBackend(*_load(folders["hostile"]), device="cpu", cpu_threads=1)
    a = [g[0] for g in hf.generate(prompts, max_new_tokens=MAX_NEW)]
    b = [g[0] for g in engine.generate(prompts, max_new_tokens=MAX_NEW)]
    assert [g.text for g in b] == [g.text for g in a]
    assert [g.tokens for g in b] == [g.tokens for g in a]
    assert all(g.text.endswith("\n") and g.text.count("\n") == 1 for g in b)

    expected = _expected_set(folders["hostile"])
    assert engine.stop_token_ids == expected and engine.provenance()["stop_token_ids"] == expected
    # what the engine itself stops on: our stop_token_ids plus what vLLM adds per request (its tokenizer's EOS and
    # the saved folder's generation_config.json), through vLLM's own code
    params = engine.sampling_params(0.0, 1.0, MAX_NEW, 1, None, [])
    llm_engine = engine.llm.llm_engine
    params.update_from_generation_config(
        llm_engine.input_processor.generation_config_fields, llm_engine.renderer.get_eos_token_id()
    )
    assert sorted({*params.stop_token_ids, params.eos_token_id}) == expected


def test_the_files_sampling_defaults_change_nothing_on_vllm(engine, prompts):
    """The engine's own defaults are vLLM's neutral ones, and a T=1 sample is not the greedy answer repeated."""
    assert engine.llm.llm_engine.model_config.get_diff_sampling_param() == {}
    sampled = engine.generate(prompts, n=8, temperature=1.0, max_new_tokens=MAX_NEW, seed=11)
    assert any(len({g.text for g in gs}) > 1 for gs in sampled), "top-k 1 or T=0.01 leaked: every sample is greedy"
    assert all("\n" not in g.text[:-1] for gs in sampled for g in gs), "a sample ran past the declared EOS"


class _Built(Exception):
    """Raised from inside GRPOTrainer's construction: the test reads the trainer TRL built, and trains nothing."""


def test_grpo_rollouts_stop_on_the_backends_set(folders, tmp_path, monkeypatch):
    import trl

    from esbench.methods import TrainContext, registry
    from esbench.methods.grpo_trl import grpo_config

    seen: dict[str, list[int]] = {}

    class Recording(trl.GRPOTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen["mask"] = sorted(self.eos_token_ids)  # cuts each completion
            seen["generate"] = sorted(self.generation_config.eos_token_id)  # ends TRL's HF rollouts
            raise _Built

    class Reward:
        def with_values(self, correct, formatted):
            return self

        def __call__(self, response, gold):
            return 0.0

    monkeypatch.setattr(trl, "GRPOTrainer", Recording)
    backend = HFBackend(*_load(folders["hostile"]), device="cpu", cpu_threads=1)
    declared = backend.model.generation_config.eos_token_id
    cls = registry.get("grpo")
    cfg = cls.Config(
        prompts_per_rollout=4, num_generations=4, ppo_minibatch_prompts=4, micro_batch=16, max_completion_length=16
    )
    task = get_task("tiny_arith")
    ctx = TrainContext(seed=0, workdir=tmp_path, log_path=tmp_path / "train.jsonl", prompt=task.prompt, backend=backend)
    with pytest.raises(_Built):
        cls().train(task.rows("train", 8), Reward(), 1, cfg, ctx)
    expected = _expected_set(folders["hostile"])
    assert seen == {"mask": expected, "generate": expected}
    assert backend.model.generation_config.eos_token_id == declared  # the model's own declaration is put back

    # TRL's colocated vLLM rollouts (GPU): the set joins the SamplingParams TRL builds from `generation_kwargs`
    args = grpo_config(cfg, 1, str(tmp_path), 0, False, vllm_rollouts=True, stop_token_ids=expected)
    assert args.generation_kwargs == {"stop_token_ids": expected}
