"""Teacher-forced scoring (`HFBackend.token_logprobs` / `token_entropy`) in bounded memory: chunked by a token budget,
the LM head on response positions only, a few at a time. Values equal one unpadded full forward per sequence (the
old semantics), and the peak stays fixed while 48 responses of ~900 tokens over a 32k vocabulary are scored.

Models are random-init Llama / Qwen2 / Gemma2 configs and a tokenizer that reads space-separated ids: nothing is
downloaded, and any vocabulary size is cheap.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from esbench.backends.hf import HFBackend


class IdTokenizer:
    """'5 17 3' → [5, 17, 3]: exact control over lengths and ids at any vocabulary size."""

    pad_token_id = 0

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [int(x) for x in text.split()]}


def random_model(arch: str = "llama", vocab: int = 512, dtype=torch.float32, tied: bool = True, seed: int = 0):
    """A tiny random causal LM with sharp next-token distributions (large init), so a misaligned row shows."""
    import transformers

    common = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=tied,
        initializer_range=0.3,
        pad_token_id=0,
    )
    if arch == "gemma2":  # not a plain head: soft-capped logits, so it takes the model's own forward
        common |= dict(head_dim=8, final_logit_softcapping=2.0, attn_logit_softcapping=None, sliding_window=4096)
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM),
    }[arch]
    torch.manual_seed(seed)
    return model_cls(config_cls(**common)).to(dtype).eval()


def pairs(n: int, vocab: int, prompt_len=(3, 12), response_len=(0, 20), seed: int = 1):
    g = torch.Generator().manual_seed(seed)

    def text(lo, hi):
        k = int(torch.randint(lo, hi + 1, (1,), generator=g))
        return " ".join(str(int(i)) for i in torch.randint(1, vocab, (k,), generator=g))

    return [text(*prompt_len) for _ in range(n)], [text(*response_len) for _ in range(n)]


def full_forward_reference(model, prompts, responses):
    """The old semantics, one unpadded sequence at a time: full logits, fp32 log-softmax, rows p-1 … p+r-2."""
    tok = IdTokenizer()
    logprobs, entropies = [], []
    for p, r in zip(prompts, responses, strict=True):
        p_ids, r_ids = tok(p)["input_ids"], tok(r)["input_ids"]
        if not r_ids:
            logprobs.append(torch.zeros(0))
            entropies.append(torch.zeros(0))
            continue
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p_ids + r_ids])).logits.float()[0]
        logp = torch.log_softmax(logits, -1)[len(p_ids) - 1 : len(p_ids) - 1 + len(r_ids)]
        logprobs.append(logp.gather(-1, torch.tensor(r_ids)[:, None])[:, 0])
        entropies.append(-(logp.exp() * logp).sum(-1))
    return logprobs, entropies


def assert_scores_equal(backend, prompts, responses, want_lp, want_ent, tol, **kw):
    got = backend.token_logprobs(prompts, responses, **kw)
    assert [len(g) for g in got] == [len(w) for w in want_lp]
    assert torch.allclose(torch.tensor(sum(got, [])), torch.cat(want_lp), **tol)
    ent = backend.token_entropy(prompts, responses, **kw)
    count = sum(len(w) for w in want_ent)
    assert ent["tokens"] == count
    assert math.isclose(ent["entropy"], float(torch.cat(want_ent).double().sum()) / count, rel_tol=tol["rtol"])


@pytest.mark.parametrize(("arch", "tied"), [("llama", True), ("llama", False), ("qwen2", False), ("gemma2", True)])
def test_chunked_scoring_equals_a_full_forward_per_sequence(arch, tied):
    """fp32, tight tolerance. Small budgets force many body chunks (mixed lengths, right padding), LM-head calls of
    3 positions that split responses across calls, and the default budgets put everything in one chunk."""
    torch.set_num_threads(1)
    model = random_model(arch, tied=tied)
    backend = HFBackend(model, IdTokenizer(), device="cpu")
    prompts, responses = pairs(12, 512)
    responses[4] = ""  # an empty response scores nothing
    want_lp, want_ent = full_forward_reference(model, prompts, responses)
    tol = dict(rtol=1e-5, atol=1e-5)
    for kw in ({}, {"batch_size": 1}, {"token_budget": 40, "logit_budget": 3 * 512}):
        assert_scores_equal(backend, prompts, responses, want_lp, want_ent, tol, **kw)
    if arch == "gemma2":  # its soft-cap matters: the head alone on the hidden states gives other values
        ids = torch.tensor([IdTokenizer()(prompts[0] + " " + responses[0])["input_ids"]])
        with torch.no_grad():
            uncapped = model.lm_head(model.model(input_ids=ids).last_hidden_state)
            assert not torch.allclose(uncapped, model(input_ids=ids).logits, atol=1e-2)


def test_bf16_model_scoring_equals_one_at_a_time():
    """A bf16 model: chunked and packed scoring equals one sequence at a time, and the full forward, to bf16's
    own precision (the body runs in bf16; the log-softmax is fp32 either way)."""
    torch.set_num_threads(1)
    model = random_model("qwen2", dtype=torch.bfloat16)
    backend = HFBackend(model, IdTokenizer(), device="cpu")
    prompts, responses = pairs(10, 512, seed=2)
    one = backend.token_logprobs(prompts, responses, batch_size=1)
    want_lp, want_ent = full_forward_reference(model, prompts, responses)
    assert torch.allclose(torch.tensor(sum(one, [])), torch.cat(want_lp), rtol=1e-5, atol=1e-5)  # same shapes
    tol = dict(rtol=2e-2, atol=2e-2)
    for kw in ({}, {"token_budget": 40, "logit_budget": 3 * 512}):
        assert_scores_equal(backend, prompts, responses, [torch.tensor(x) for x in one], want_ent, tol, **kw)


def test_a_response_with_an_empty_prompt_is_refused():
    backend = HFBackend(random_model(), IdTokenizer(), device="cpu")
    with pytest.raises(ValueError, match="empty prompt"):
        backend.token_logprobs(["", "1 2"], ["3 4", "5"])
    assert backend.token_logprobs(["", "1 2"], ["", "5"])[0] == []


# -------------------------------------------------------------------------------------------------------------
# peak memory: 48 responses of ~900 tokens over a 32k vocabulary

VOCAB, RESPONSES = 32000, 48
BUDGET_MIB = 400  # new code: ~130; one full-batch fp32 logits tensor alone is 48 × ~900 × 32000 × 4 B ≈ 5.3 GiB


def _measure(spec: dict) -> dict:
    """In a fresh process: the resident-set high-water mark scoring adds over the RSS before it, with the address
    space capped a few GiB above, so code that builds full-batch logits fails fast instead of swamping a shared
    machine. Then the same responses one at a time.

    The mark is this process's own (`VmHWM`, reset through /proc/self/clear_refs after the warm-up), not
    `ru_maxrss`: Linux carries the parent's high-water into an exec'd child, so a child of a test process that had
    started a vLLM engine read ~1.4 GiB before scoring anything."""
    import resource

    torch.set_num_threads(1)
    model = random_model(vocab=VOCAB)
    backend = HFBackend(model, IdTokenizer(), device="cpu")
    prompts, responses = pairs(RESPONSES, VOCAB, prompt_len=(40, 60), response_len=(820, 880), seed=3)
    backend.token_logprobs(prompts[:1], ["1 2 3"])  # warm up kernels and allocator outside the measurement

    def status(key: str) -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(key))  # KiB

    cap = (status("VmSize:") + spec["cap_mib"] * 1024) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset this process's peak RSS (VmHWM) to its current RSS
    rss = status("VmRSS:")
    got = backend.token_logprobs(prompts, responses)
    peak_mib = (status("VmHWM:") - rss) / 1024
    one = backend.token_logprobs(prompts, responses, batch_size=1)
    diff = max(abs(a - b) for g, o in zip(got, one, strict=True) for a, b in zip(g, o, strict=True))
    return {
        "peak_mib": peak_mib,
        "max_abs_diff": diff,
        "tokens": sum(len(g) for g in got),
        "lengths_match": [len(g) for g in got] == [len(o) for o in one],
    }


def test_scoring_48_long_responses_over_a_32k_vocabulary_stays_in_a_fixed_memory_budget():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, __file__, json.dumps({"cap_mib": 3072})], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["lengths_match"] and out["tokens"] >= RESPONSES * 820
    assert out["peak_mib"] < BUDGET_MIB, out
    assert out["max_abs_diff"] < 1e-5, out


if __name__ == "__main__":
    print(json.dumps(_measure(json.loads(sys.argv[1]))))
