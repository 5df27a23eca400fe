"""Peak memory and time per update of ES, GRPO and inference alone, on the same model, printed as JSON.

Each phase runs in a fresh subprocess through the real recipes (`es`, `grpo` via TRL) for a few updates, after
the model is loaded and a warm-up generation has run. On CPU the figure is the peak resident set size the phase
adds on top of that (sampled every millisecond); on CUDA it is `torch.cuda.max_memory_allocated`. Ratios against
inference are measured in the same run.

    python benchmarks/memory.py --model tiny
    python benchmarks/memory.py --model llama-0.5b --device cuda --dtype bfloat16   # GPU check
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CONFIGS, PeakRSS, load  # noqa: E402

PHASES = ("inference-es", "inference-grpo", "es", "grpo")


def phase(args) -> dict:
    from esbench.backends.hf import HFBackend
    from esbench.methods import TrainContext
    from esbench.methods.es import ES, ESConfig
    from esbench.methods.grpo import GRPO, GRPOSettings
    from esbench.rewards import Reward
    from esbench.tasks import get_task

    model, tok, prompts = load(args.model, args.device, args.dtype)
    task = get_task("tiny_arith")
    rows = task.rows("train", 64)
    backend = HFBackend(model, tok, device=args.device, batch_size=args.batch * args.generations)
    gen = dict(max_new_tokens=args.max_new_tokens)
    backend.generate(prompts[: args.batch], **gen)  # warm-up
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    work = Path(tempfile.mkdtemp())
    ctx = TrainContext(seed=0, workdir=work, log_path=work / "train.jsonl", prompt=task.prompt, backend=backend)
    start = time.perf_counter()
    with PeakRSS() as rss:
        if args.phase == "inference-es":  # ES's roll-outs without ES: one greedy batch per member
            for _ in range(args.updates * args.generations):
                backend.generate(prompts[: args.batch], temperature=0.0, **gen)
        elif args.phase == "inference-grpo":  # GRPO's roll-outs without GRPO: G samples per prompt at once
            for _ in range(args.updates):
                backend.generate(prompts[: args.batch], n=args.generations, temperature=1.0, **gen)
        elif args.phase == "es":
            cfg = ESConfig(
                population=args.generations,
                batch_size=args.batch,
                max_new_tokens=args.max_new_tokens,
                checkpoint_every=10**6,
            )
            ES().train(rows, Reward(task), args.updates, cfg, ctx)
        else:
            cfg = GRPOSettings(
                prompts_per_rollout=args.batch,
                num_generations=args.generations,
                ppo_minibatch_prompts=args.batch,
                micro_batch=args.micro_batch,
                max_completion_length=args.max_new_tokens,
                checkpoint_every=10**6,
            )
            GRPO().train(rows, Reward(task), args.updates, cfg, ctx)
    seconds = (time.perf_counter() - start) / args.updates
    peak = torch.cuda.max_memory_allocated() if cuda else rss.peak - rss.base
    return {"peak_bytes": peak, "seconds_per_update": seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny", choices=["tiny", *CONFIGS])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--batch", type=int, default=16, help="prompts per update")
    ap.add_argument("--generations", type=int, default=8, help="ES population = GRPO responses per prompt")
    ap.add_argument("--micro-batch", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.phase:
        print(json.dumps(phase(args)))
        return
    out = {
        "model": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "measure": "cuda max_memory_allocated" if args.device.startswith("cuda") else "peak RSS added by phase",
    }
    for name in PHASES:
        proc = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], "--phase", name], capture_output=True, text=True, check=True
        )
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        out[f"{name}_peak_bytes"] = res["peak_bytes"]
        out[f"{name}_seconds_per_update"] = round(res["seconds_per_update"], 4)
    for name in ("es", "grpo"):  # each method against inference of its own roll-outs
        ref = out[f"inference-{name}_peak_bytes"]
        out[f"{name}_peak_over_inference"] = round(out[f"{name}_peak_bytes"] / max(ref, 1), 3)
        out[f"{name}_time_over_inference"] = round(
            out[f"{name}_seconds_per_update"] / out[f"inference-{name}_seconds_per_update"], 3
        )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
