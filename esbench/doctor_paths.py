"""`esbench doctor`'s GPU paths, on the embedded tiny model: HF generation, a vLLM engine start, perturb and restore
inside the worker, one paper-bf16 ES update, one GRPO step through TRL, the `table` noise CPU against the device,
and scoring in bounded memory.

Separate from the environment probes (`esbench.doctor_env`): each of these runs the code a cell runs (backends,
method recipes, noise schemes) and shares what it builds through `State.objects`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from esbench.doctor_checks import Failed, State
from esbench.records import read_jsonl

# Scoring check: a random model with a 32k vocabulary (the LM head is what scoring memory is about), responses of
# SCORING_TOKENS characters (the tiny tokenizer has one token per character), and two batch sizes. Even the small
# batch's logits (1k positions x 32k) exceed a chunk, so chunked scoring peaks alike for both, and unchunked scoring
# peaks twice as high for the large one.
SCORING_VOCAB = 32_768
SCORING_TOKENS = 256
SCORING_BATCHES = (4, 8)
SCORING_GROWTH = 1.5  # the large batch may peak at most this much above the small one ...
SCORING_SLACK_MIB = 24.0  # ... plus allocator and page noise


def _load_tiny(s: State):
    from esbench.models import load_model

    loaded = load_model(s.objects["tiny"])
    return loaded.model, loaded.tokenizer


def _prompts(tokenizer, n: int = 8) -> list[str]:
    from esbench.tasks import get_task

    task = get_task("tiny_arith")
    return [task.prompt(r, tokenizer) for r in task.rows("test", n)]


def check_tiny_model(s: State) -> str:
    from esbench.models import tiny

    s.objects["tiny"] = str(tiny.ensure_built())
    return f"builtin:tiny at {s.objects['tiny']}"


def check_hf_generate(s: State) -> str:
    from esbench.backends.hf import HFBackend

    hf = HFBackend(*_load_tiny(s), device=s.device)
    s.objects["hf"] = hf
    prompts = _prompts(hf.tokenizer)
    start = time.perf_counter()
    out = hf.generate(prompts, n=4, temperature=1.0, max_new_tokens=32, seed=0)
    took = time.perf_counter() - start
    tokens = sum(g.tokens for gens in out for g in gens)
    if tokens == 0:
        raise Failed("generation returned no tokens")
    return f"{len(prompts)} prompts x 4 samples, {tokens} tokens in {took:.1f} s on {hf.provenance()['device_name']}"


def check_vllm_engine(s: State) -> str:
    from esbench.backends.vllm import VLLMBackend

    start = time.perf_counter()
    vb = VLLMBackend(*_load_tiny(s), device=s.device)
    s.closers.append(vb.close)
    s.objects["vllm"] = vb
    took = time.perf_counter() - start
    out = vb.generate(_prompts(vb.tokenizer), max_new_tokens=32)
    if not any(g[0].tokens for g in out):
        raise Failed("the engine started but generated no tokens")
    return f"started in {took:.1f} s ({vb.setup['tensors']} tensors mapped under HF names), greedy generation ok"


def check_perturb_restore(s: State) -> str:
    vb = s.objects["vllm"]
    prompts = _prompts(vb.tokenizer)

    def texts() -> list[str]:
        return [g[0].text for g in vb.generate(prompts, max_new_tokens=32)]

    before, checksum = texts(), vb.checksum()
    editor = vb.weight_editor("fp32-master", "torch")
    editor.perturb(12345, 0.05)
    perturbed = texts()
    editor.restore()
    after, restored = texts(), vb.checksum()
    changed = sum(a != b for a, b in zip(before, perturbed, strict=True))
    if not changed:
        raise Failed(
            "a perturbation inside the worker did not change any greedy answer: generation reads a stale copy",
            "the engine does not compute from the weights the editor writes (esbench/backends/vllm_worker.py; "
            "on CUDA look for CUDA-graph or repacked weights)",
        )
    if restored != checksum or after != before:
        raise Failed(
            f"restore did not give back the weights (checksum {checksum} -> {restored}, answers equal: "
            f"{after == before})",
            "the restore path of esbench.es.weights.TensorEditor on this device",
        )
    return f"perturb changed {changed}/{len(prompts)} greedy answers; restore gave back checksum {checksum}"


def _train(s: State, backend, method: str, config: dict, budget: int = 1):
    from esbench.methods import TrainContext, registry
    from esbench.rewards import Reward
    from esbench.tasks import get_task

    cls = registry.get(method)
    cfg = cls.Config.model_validate(config)
    task = get_task("tiny_arith")
    work = Path(tempfile.mkdtemp(prefix=f"{method}-", dir=s.workdir))
    ctx = TrainContext(seed=0, workdir=work, log_path=work / "train.jsonl", prompt=task.prompt, backend=backend)
    result = cls().train(task.rows("train", 16), Reward(task), budget, cfg, ctx)
    rows = read_jsonl(ctx.log_path)
    if len([r for r in rows if "reward_mean" in r]) != budget:
        raise Failed(f"{budget} update(s) asked, train.jsonl has {len(rows)} rows")
    return result, rows


def check_es_paper_bf16(s: State) -> str:
    backend = s.objects.get("vllm") or s.objects["hf"]
    before = backend.checksum()
    config = {
        "population": 2,
        "sigma": 0.01,
        "alpha": 0.005,
        "batch_size": 4,
        "max_new_tokens": 16,
        "precision": "paper-bf16",
    }
    _, rows = _train(s, backend, "es", config)
    r = rows[-1]
    if backend.checksum() == before:
        raise Failed("the update left the weights unchanged", "esbench/methods/es.py (cast, editor, update)")
    return (
        f"1 update on {backend.kind} in bf16 and back to fp32: reward {r['reward_mean']:.2f}, restore residual rms "
        f"{r.get('restore_residual_rms', 0):.2e}, {r.get('changed_fraction', float('nan')):.2%} of weights changed"
    )


def check_grpo(s: State) -> str:
    from esbench.backends.hf import HFBackend

    if s.device == "cuda" and "vllm" in s.objects:
        backend = s.objects["vllm"]  # TRL's colocated vLLM rolls out
    else:
        backend = HFBackend(*_load_tiny(s), device=s.device)
    config = {
        "prompts_per_rollout": 2,
        "num_generations": 2,
        "ppo_minibatch_prompts": 2,
        "micro_batch": 4,
        "learning_rate": 1e-4,
        "max_completion_length": 16,
    }
    result, rows = _train(s, backend, "grpo", config)
    engine = result.summary.get("rollout_engine")
    where = "TRL colocated vLLM" if engine == "vllm" else "HF generation"
    cpu_note = "" if s.device == "cuda" else " (CPU: colocated vLLM needs a GPU)"
    return f"1 GRPO step through TRL, rollouts by {where}{cpu_note}: reward {rows[-1]['reward_mean']:.2f}"


def check_table_noise(s: State) -> str:
    import torch

    from esbench.es.noise import TableNoise, get_scheme
    from esbench.es.weights import TensorEditor, member_seed

    scheme = get_scheme("table")
    shape = torch.Size([3, 700_001])  # three blocks of the table, one partial
    gen = torch.Generator().manual_seed(0)
    params = {"w": torch.randn(shape, generator=gen), "b": torch.randn(4097, generator=gen)}
    if s.device == "cuda":
        if not torch.equal(scheme.noise(5, "x", shape), scheme.noise(5, "x", shape, "cuda").cpu()):
            raise Failed("the table's noise differs between CPU and CUDA", "esbench/es/noise.py (table copy)")
        cpu = {k: v.clone() for k, v in params.items()}
        dev = {k: v.cuda() for k, v in params.items()}
        editors = [TensorEditor(cpu, noise="table"), TensorEditor(dev, noise="table")]
        for ed in editors:
            ed.perturb(member_seed(0, 0, 0), 1e-3, -1.0)
        same_perturb = all(torch.equal(cpu[k], dev[k].cpu()) for k in cpu)
        for ed in editors:
            ed.restore()
            ed.update([1, 2, 3], [1e-3, -5e-4, 2e-4])
        same_update = all(torch.equal(cpu[k], dev[k].cpu()) for k in cpu)
        if not (same_perturb and same_update):
            raise Failed(
                f"CPU and CUDA disagree: perturbed weights equal {same_perturb}, updated weights equal {same_update}",
                "esbench/es/noise.py: the table scheme's two-rounding arithmetic (an FMA on this device?)",
            )
        return "noise, perturbed and updated weights equal on CPU and CUDA bit for bit"
    # no GPU: what can be checked here is that the result depends on nothing but (seed, name, index)
    other = TableNoise(chunk=4099)
    outs = []
    for sch in (scheme, other):
        out = torch.empty(shape)
        sch.add_scaled(out, params["w"], 7, "w", 1e-3)
        outs.append(out)
    reference = params["w"] + scheme.noise(7, "w", shape).mul_(1e-3)
    if not (torch.equal(outs[0], outs[1]) and torch.equal(outs[0], reference)):
        raise Failed("the table scheme's CPU paths disagree with each other", "esbench/es/noise.py")
    return "no GPU: CPU only, two chunkings and the materialised noise agree bit for bit (CPU vs GPU needs a GPU)"


@contextlib.contextmanager
def peak_growth(device: str) -> Iterator[dict[str, float]]:
    """The peak memory a block adds, in MiB: CUDA allocations on a GPU, resident memory (RSS) on the CPU."""
    out: dict[str, float] = {}
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        yield out
        torch.cuda.synchronize()
        out["mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        return
    base = _rss()
    peak = [base]
    stop = threading.Event()

    def sample() -> None:  # RSS every millisecond: the block's large temporaries live for many milliseconds
        while not stop.is_set():
            peak[0] = max(peak[0], _rss())
            stop.wait(0.001)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        yield out
    finally:
        stop.set()
        t.join()
        out["mib"] = (max(peak[0], _rss()) - base) / 2**20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def check_scoring_memory(s: State) -> str:
    import random

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from esbench.backends.hf import HFBackend
    from esbench.models.tiny import build_tokenizer

    tok = build_tokenizer(SCORING_TOKENS + 64)  # the tiny model's: one token per character
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=SCORING_VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=SCORING_TOKENS + 64,
        pad_token_id=tok.pad_token_id,
    )
    backend = HFBackend(LlamaForCausalLM(config), tok, device=s.device)
    rng = random.Random(0)
    peaks = []
    for n in SCORING_BATCHES:
        prompts = ["Q 1+2=?\n"] * n
        responses = ["".join(rng.choice("0123456789+-=") for _ in range(SCORING_TOKENS)) for _ in range(n)]
        with peak_growth(s.device) as grew:
            scored = backend.token_entropy(prompts, responses)
        peaks.append(grew["mib"])
        if scored["tokens"] != n * SCORING_TOKENS:
            raise Failed(f"scored {scored['tokens']} tokens of {n * SCORING_TOKENS}")
    small, large = SCORING_BATCHES
    detail = (
        f"token_entropy over a {SCORING_VOCAB}-token vocabulary, {SCORING_TOKENS}-token responses: peak "
        f"+{peaks[0]:.0f} MiB for {small}, +{peaks[1]:.0f} MiB for {large}"
    )
    if peaks[1] > SCORING_GROWTH * peaks[0] + SCORING_SLACK_MIB:
        raise Failed(
            detail + ": the peak grows with the batch",
            "chunk teacher-forced scoring by a token budget (esbench/backends/hf.py)",
        )
    return detail + " (bounded)"
