"""The HF backend's decoding is explicit and complete: nothing in a model folder's generation_config.json changes
what it samples, through `generate` or through the lm-eval adapter."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from esbench.backends.hf import HFBackend, cut_at_stop
from esbench.models import load_model

# Everything a model folder can say that changes decoding (Qwen2.5 ships top_k, top_p, temperature and a repetition
# penalty; other models ship the rest).
HOSTILE_GENERATION_CONFIG = {
    "do_sample": True,
    "temperature": 0.3,
    "top_k": 3,
    "top_p": 0.5,
    "repetition_penalty": 1.8,
    "no_repeat_ngram_size": 2,
    "min_new_tokens": 12,
    "min_length": 45,
    "typical_p": 0.7,
    "max_new_tokens": 5,
}


@pytest.fixture(scope="module")
def twin_folders(tiny_model_dir, tmp_path_factory):
    """The tiny model's weights twice: with a neutral generation config and with a hostile one."""
    root = tmp_path_factory.mktemp("twins")
    neutral, hostile = root / "neutral", root / "hostile"
    shutil.copytree(tiny_model_dir, neutral)
    (neutral / "generation_config.json").unlink(missing_ok=True)
    shutil.copytree(neutral, hostile)
    (hostile / "generation_config.json").write_text(json.dumps(HOSTILE_GENERATION_CONFIG))
    return neutral, hostile


def _backends(twin_folders):
    return [HFBackend(*_load(d), device="cpu") for d in twin_folders]


def _load(directory):
    loaded = load_model(str(directory))
    return loaded.model, loaded.tokenizer


def _prompts():
    from esbench.tasks import get_task

    task = get_task("tiny_arith")
    return [task.prompt(r) for r in task.rows("test", 8)]


def test_premise_transformers_reads_the_hostile_config(twin_folders):
    """Without the backend, plain `generate` on the two folders differs: the test below can fail."""
    (m0, tok), (m1, _) = _load(twin_folders[0]), _load(twin_folders[1])
    assert m1.generation_config.top_k == 3 and m1.generation_config.no_repeat_ngram_size == 2
    enc = tok(_prompts()[:2], return_tensors="pt", padding=True, add_special_tokens=False)
    outs = []
    for m in (m0, m1):
        torch.manual_seed(0)
        outs.append(m.generate(**enc, max_new_tokens=30, do_sample=True, pad_token_id=tok.pad_token_id))
    assert not torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("temperature", [1.0, 0.0], ids=["sampled", "greedy"])
def test_generation_config_json_changes_nothing(twin_folders, temperature):
    neutral, hostile = _backends(twin_folders)
    kw = dict(n=4, temperature=temperature, top_p=1.0, max_new_tokens=40, seed=7)
    a, b = neutral.generate(_prompts(), **kw), hostile.generate(_prompts(), **kw)
    assert [[g.text for g in gs] for gs in a] == [[g.text for g in gs] for gs in b]
    assert [[g.tokens for g in gs] for gs in a] == [[g.tokens for g in gs] for gs in b]
    assert any(g.tokens > 5 for gs in a for g in gs), "max_new_tokens from the folder must not apply either"
    # the folder's own settings are untouched (a saved model keeps them)
    assert hostile.model.generation_config.top_k == 3


def test_evaluation_samples_are_byte_identical_across_generation_configs(twin_folders, tmp_path):
    from esbench.evaluation import evaluate
    from esbench.spec_schema import EvalSpec

    ev = EvalSpec(tasks=["tiny_arith"], limit=6, n=4, k=[1, 4], temperature=1.0, max_new_tokens=40, entropy=False)
    for i, backend in enumerate(_backends(twin_folders)):
        torch.manual_seed(0)
        evaluate(backend, ev, 0, tmp_path / str(i))
    for name in ("tiny_arith.jsonl", "tiny_arith.greedy.jsonl"):
        assert (tmp_path / "0" / "samples" / name).read_bytes() == (tmp_path / "1" / "samples" / name).read_bytes()


def test_samples_are_seeded_and_n_per_prompt(twin_folders):
    backend = _backends(twin_folders)[0]
    one = backend.generate(_prompts()[:3], n=5, temperature=1.0, max_new_tokens=30, seed=3)
    two = backend.generate(_prompts()[:3], n=5, temperature=1.0, max_new_tokens=30, seed=3)
    other = backend.generate(_prompts()[:3], n=5, temperature=1.0, max_new_tokens=30, seed=4)
    assert [len(g) for g in one] == [5, 5, 5]
    assert one == two and one != other


def test_stop_strings_cut_the_text():
    assert cut_at_stop("12+3=15\n\n#### 15", ["\n\n"]) == "12+3=15"
    assert cut_at_stop("abc", ["x", ""]) == "abc"
    assert cut_at_stop("a.b;c", [";", "."]) == "a"


def test_lm_eval_adapter_asks_once_per_prompt_for_all_repeats(twin_folders):
    """`repeats: n` arrives as n identical requests; the backend sees one prompt with n samples."""
    from lm_eval.api.instance import Instance

    backend = _backends(twin_folders)[0]
    calls = []
    real = backend.generate

    def spy(prompts, **kw):
        calls.append((list(prompts), kw["n"]))
        return real(prompts, **kw)

    backend.generate = spy
    lm = backend.lm_eval_model()
    kw = {"until": ["\n\n"], "do_sample": True, "temperature": 1.0, "max_gen_toks": 20}
    prompts = _prompts()[:3]
    reqs = [
        Instance("generate_until", {}, (p, dict(kw)), idx=0, repeats=4, metadata=("t", i, 4))
        for i, p in enumerate(prompts)
        for _ in range(4)
    ]
    out = lm.generate_until(reqs)
    assert calls == [(prompts, 4)]
    assert len(out) == 12 and all("\n\n" not in x for x in out)


def test_teacher_forced_logprobs_and_entropy_equal_a_direct_forward(tiny_model_dir):
    """token_logprobs / token_entropy against one unpadded forward per sequence: batching and padding change nothing."""
    loaded = load_model(str(tiny_model_dir))
    backend = HFBackend(loaded.model, loaded.tokenizer, device="cpu", cpu_threads=1)
    tok = backend.tokenizer
    prompts, responses = ["12+7=", "3*4+1="], [" 19 #### 19", " 13"]
    got = backend.token_logprobs(prompts, responses, batch_size=2)
    ent = backend.token_entropy(prompts, responses, batch_size=1)
    total_ent, count = 0.0, 0
    for p, r, lp in zip(prompts, responses, got, strict=True):
        p_ids = tok(p, add_special_tokens=False)["input_ids"]
        r_ids = tok(r, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = loaded.model(input_ids=torch.tensor([p_ids + r_ids])).logits.float()[0]
        logp = torch.log_softmax(logits, -1)[len(p_ids) - 1 : len(p_ids) - 1 + len(r_ids)]
        want = logp.gather(-1, torch.tensor(r_ids)[:, None])[:, 0]
        assert len(lp) == len(r_ids) > 0
        assert torch.allclose(torch.tensor(lp), want, atol=1e-5)
        total_ent += float(-(logp.exp() * logp).sum())
        count += len(r_ids)
    assert ent["tokens"] == count and ent["entropy"] == pytest.approx(total_ent / count, rel=1e-5)
    assert backend.token_logprobs(["1+1="], [""]) == [[]]
