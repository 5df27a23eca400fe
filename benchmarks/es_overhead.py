"""ES overhead, measured side by side in one run, printed as JSON.

- `update_over_generation`: wall time of one full ES update (N × [perturb, roll out the batch, restore], then
  the fp32 update) divided by the wall time of the same N roll-outs with no perturbation. Target on CPU with the
  tiny model: <= 1.15.
- `perturb_restore_ms_per_mparam`: one perturb + restore cycle, per million parameters.
- `perturb_restore_gbps` against `copy_gbps`: bytes the cycle must touch per second, next to a plain
  tensor-to-tensor copy of the same size measured in the same process.
- peak memory of ES against inference only, each in a fresh subprocess (CPU: peak RSS; CUDA:
  torch.cuda.max_memory_allocated).

    python benchmarks/es_overhead.py --model tiny
    python benchmarks/es_overhead.py --model llama-100m --population 4 --batch 4
    python benchmarks/es_overhead.py --model llama-0.5b --device cuda --dtype bfloat16   # GPU check
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CONFIGS, PeakRSS, load, timed  # noqa: E402


def phase_memory(args, phase: str) -> dict:
    """Peak memory of `phase` (inference | es) alone, in this fresh process."""
    from esbench.backends.hf import HFBackend

    model, tok, prompts = load(args.model, args.device, args.dtype)
    backend = HFBackend(model, tok, device=args.device, batch_size=args.batch)
    prompts = prompts[: args.batch]
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    gen = dict(temperature=0.0, max_new_tokens=args.max_new_tokens)
    backend.generate(prompts, **gen)  # warm-up: allocator pools and caches exist before measuring
    with PeakRSS() as rss:
        _phase(args, phase, backend, prompts, gen)
    if args.device.startswith("cuda"):
        return {"peak_bytes": torch.cuda.max_memory_allocated()}
    return {"peak_bytes": rss.peak, "added_bytes": rss.peak - rss.base}


def _phase(args, phase, backend, prompts, gen) -> None:
    from esbench.es.weights import member_seed
    from esbench.methods.es import ESConfig, ask, tell

    if phase == "inference":
        for _ in range(args.population):
            backend.generate(prompts, **gen)
    else:
        cfg = ESConfig(population=args.population, sigma=1e-3, alpha=5e-4)
        editor = backend.weight_editor("fp32-master")
        members = ask(cfg, 0, 0)
        import numpy as np

        rewards = np.zeros((len(members), 1))
        for i, (seed, sign) in enumerate(members):
            editor.perturb(seed, cfg.sigma, sign)
            backend.generate(prompts, **gen)
            editor.restore()
            rewards[i] = member_seed(0, 0, i) % 7
        editor.update(*tell(cfg, members, rewards))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny", choices=["tiny", *CONFIGS])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--population", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--phase", choices=["inference", "es"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.phase:
        print(json.dumps(phase_memory(args, args.phase)))
        return

    import numpy as np

    from esbench.backends.hf import HFBackend
    from esbench.methods.es import ESConfig, ask, tell

    model, tok, prompts = load(args.model, args.device, args.dtype)
    prompts = prompts[: args.batch]
    backend = HFBackend(model, tok, device=args.device, batch_size=args.batch)
    editor = backend.weight_editor("fp32-master")
    cfg = ESConfig(population=args.population, sigma=1e-3, alpha=5e-4)
    gen = dict(temperature=0.0, max_new_tokens=args.max_new_tokens)
    n_params = editor.numel()

    def plain():
        for _ in range(args.population):
            backend.generate(prompts, **gen)

    def es_update(step=[0]):  # noqa: B006 - a counter across calls
        members = ask(cfg, 0, step[0])
        rewards = np.zeros((len(members), 1))
        for i, (seed, sign) in enumerate(members):
            editor.perturb(seed, cfg.sigma, sign)
            backend.generate(prompts, **gen)
            editor.restore()
            rewards[i] = i % 3
        editor.update(*tell(cfg, members, rewards))
        step[0] += 1

    def cycle():
        editor.perturb(12345, 1e-3)
        editor.restore()

    plain()  # warm-up
    ratios, t_plain, t_es = [], [], []
    for _ in range(args.repeats):  # interleaved, so drifts in machine load hit both sides alike
        a, b = timed(plain, args.device), timed(es_update, args.device)
        t_plain.append(a)
        t_es.append(b)
        ratios.append(b / a)
    t_cycle = min(timed(cycle, args.device) for _ in range(args.repeats))
    p = next(iter(editor.params.values()))
    big = torch.empty(n_params, dtype=p.dtype, device=p.device)
    other = torch.empty_like(big)
    t_copy = min(timed(lambda: other.copy_(big), args.device) for _ in range(args.repeats))
    elem = p.element_size()
    # a cycle writes the compute weights twice and reads the fp32 master twice (noise is generated, not read)
    cycle_bytes = n_params * (2 * elem + 2 * 4)
    mem = {}
    for phase in ("inference", "es"):
        out = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], "--phase", phase], capture_output=True, text=True, check=True
        )
        mem[phase] = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        json.dumps(
            {
                "model": args.model,
                "device": args.device,
                "dtype": args.dtype,
                "parameters": n_params,
                "population": args.population,
                "prompts_per_update": len(prompts),
                "max_new_tokens": args.max_new_tokens,
                "update_over_generation": round(float(np.median(ratios)), 4),
                "update_over_generation_all": [round(r, 4) for r in ratios],
                "generation_s": round(float(np.median(t_plain)), 4),
                "es_update_s": round(float(np.median(t_es)), 4),
                "perturb_restore_ms_per_mparam": round(1e3 * t_cycle / (n_params / 1e6), 4),
                "perturb_restore_gbps": round(cycle_bytes / t_cycle / 1e9, 3),
                "copy_gbps": round(2 * n_params * elem / t_copy / 1e9, 3),
                "weights_bytes": n_params * elem,
                "peak_bytes_inference": mem["inference"]["peak_bytes"],
                "peak_bytes_es": mem["es"]["peak_bytes"],
                "peak_es_over_inference": round(mem["es"]["peak_bytes"] / mem["inference"]["peak_bytes"], 4),
                # CPU only: what each phase adds on top of the loaded, warmed-up model
                "added_bytes_inference": mem["inference"].get("added_bytes"),
                "added_bytes_es": mem["es"].get("added_bytes"),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
