"""Evaluation-shaped sampling, measured side by side in one run, printed as JSON.

The backend's lm-eval adapter turns lm-eval's `repeats: n` (n identical requests per problem) into one request of
n samples, so each prompt is encoded once and its n samples decode in one batch (`num_return_sequences`). This
measures that against the same samples asked for one request per sample, on the same backend and model:

- `shared_prompts_s`: `generate(prompts, n=N)`;
- `one_request_per_sample_s`: `generate(prompts repeated N times, n=1)`, the shape lm-eval's HFLM runs;
- `speedup`: the ratio (> 1: sharing pays).

    python benchmarks/eval_sampling.py --model tiny --prompts 100 --n 16
    python benchmarks/eval_sampling.py --model llama-0.5b --device cuda --dtype bfloat16 --n 32   # GPU check
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CONFIGS, load, timed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny", choices=["tiny", *CONFIGS])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from esbench.backends.hf import HFBackend

    model, tok, prompts = load(args.model, args.device, args.dtype)
    prompts = prompts[: args.prompts]
    backend = HFBackend(model, tok, device="cuda" if args.device.startswith("cuda") else "cpu")
    gen = dict(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    backend.generate(prompts[:4], n=2, **gen)  # warm-up
    shared = timed(lambda: backend.generate(prompts, n=args.n, **gen), args.device)
    repeated = [p for p in prompts for _ in range(args.n)]
    single = timed(lambda: backend.generate(repeated, n=1, **gen), args.device)
    samples = args.prompts * args.n
    print(
        json.dumps(
            {
                "model": args.model,
                "device": args.device,
                "dtype": args.dtype,
                "prompts": args.prompts,
                "n": args.n,
                "shared_prompts_s": round(shared, 3),
                "one_request_per_sample_s": round(single, 3),
                "samples_per_s_shared": round(samples / shared, 1),
                "samples_per_s_single": round(samples / single, 1),
                "speedup": round(single / shared, 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
