"""ES overhead, measured side by side in one run, printed as JSON, for each noise scheme (`--noise torch table`).

Per scheme (`esbench.es.noise`: `torch`, the artifact's seeded randn; `table`, block-wise slices of a shared table):
- `update_over_generation`: wall time of one full ES update (N × [perturb, roll out the batch, restore], then
  the fp32 update) divided by the wall time of the same N roll-outs with no perturbation, each repeat interleaved
  with the plain roll-outs. Target on CPU: <= 1.15.
- `perturb_restore_ms_per_mparam`: one perturb + restore cycle, per million parameters.
- `perturb_restore_gbps` against `copy_gbps`: weight bytes the cycle must move per second (master read twice,
  weights written twice; the table scheme also reads 4 bytes per parameter of table), next to a plain
  tensor-to-tensor copy of the same size timed in the same loop; `perturb_restore_over_copy` is their ratio
  (target for `table` on CPU: >= 0.25).
- `tell_s`: the update alone (Σ cᵢεᵢ accumulated in fp32, weights refreshed, update statistics).
- peak memory of ES against inference only, each in a fresh subprocess (CPU: peak RSS; CUDA:
  torch.cuda.max_memory_allocated); the table scheme's includes its 256 MiB table.

    python benchmarks/es_overhead.py --model tiny
    python benchmarks/es_overhead.py --model llama-100m --population 4 --batch 16 --max-new-tokens 32 --threads 2
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
    """Peak memory of `phase` (inference | es:<scheme>) alone, in this fresh process."""
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
        editor = backend.weight_editor("fp32-master", phase.removeprefix("es:"))
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
    ap.add_argument("--noise", nargs="+", default=["torch", "table"], choices=["torch", "table"])
    ap.add_argument("--phase", help=argparse.SUPPRESS)
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
    editors = {scheme: backend.weight_editor("fp32-master", scheme) for scheme in args.noise}
    cfg = ESConfig(population=args.population, sigma=1e-3, alpha=5e-4)
    gen = dict(temperature=0.0, max_new_tokens=args.max_new_tokens)
    n_params = next(iter(editors.values())).numel()

    def plain():
        for _ in range(args.population):
            backend.generate(prompts, **gen)

    steps = dict.fromkeys(editors, 0)
    tell_s: dict[str, list[float]] = {k: [] for k in editors}

    def es_update(scheme):
        editor = editors[scheme]
        members = ask(cfg, 0, steps[scheme])
        rewards = np.zeros((len(members), 1))
        for i, (seed, sign) in enumerate(members):
            editor.perturb(seed, cfg.sigma, sign)
            backend.generate(prompts, **gen)
            editor.restore()
            rewards[i] = i % 3
        tell_s[scheme].append(timed(lambda: editor.update(*tell(cfg, members, rewards)), args.device))
        steps[scheme] += 1

    def cycle(scheme):
        editors[scheme].perturb(12345, 1e-3)
        editors[scheme].restore()

    p = next(iter(backend.parameters().values()))
    big = torch.empty(n_params, dtype=p.dtype, device=p.device)
    other = torch.empty_like(big)
    plain()  # warm-up, and each scheme's first cycle (the table scheme makes its table here)
    for scheme in editors:
        cycle(scheme)
    t_plain, t_es = [], {k: [] for k in editors}
    for _ in range(args.repeats):  # interleaved, so drifts in machine load hit every side alike
        t_plain.append(timed(plain, args.device))
        for scheme in editors:
            t_es[scheme].append(timed(lambda s=scheme: es_update(s), args.device))
    t_copy, t_cycle = [], {k: [] for k in editors}
    for _ in range(max(args.repeats, 5)):
        t_copy.append(timed(lambda: other.copy_(big), args.device))
        for scheme in editors:
            t_cycle[scheme].append(timed(lambda s=scheme: cycle(s), args.device))
    elem = p.element_size()
    copy_gbps = 2 * n_params * elem / float(np.median(t_copy)) / 1e9
    # a cycle writes the compute weights twice and reads the fp32 master twice (and, for `table`, the table once)
    cycle_bytes = n_params * (2 * elem + 2 * 4)
    per_scheme = {}
    for scheme in editors:
        ratios = [e / g for e, g in zip(t_es[scheme], t_plain, strict=True)]
        cyc = float(np.median(t_cycle[scheme]))
        gbps = cycle_bytes / cyc / 1e9
        per_scheme[scheme] = {
            "update_over_generation": round(float(np.median(ratios)), 4),
            "update_over_generation_all": [round(r, 4) for r in ratios],
            "es_update_s": round(float(np.median(t_es[scheme])), 4),
            "tell_s": round(float(np.median(tell_s[scheme])), 4),
            "perturb_restore_ms_per_mparam": round(1e3 * cyc / (n_params / 1e6), 4),
            "perturb_restore_gbps": round(gbps, 3),
            "perturb_restore_over_copy": round(gbps / copy_gbps, 4),
            "perturb_restore_s_all": [round(t, 4) for t in t_cycle[scheme]],
        }
    mem = {}
    for phase in ("inference", *(f"es:{k}" for k in editors)):
        out = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], "--phase", phase], capture_output=True, text=True, check=True
        )
        mem[phase] = json.loads(out.stdout.strip().splitlines()[-1])
    for scheme in editors:
        es_mem = mem[f"es:{scheme}"]
        per_scheme[scheme].update(
            {
                "peak_bytes_es": es_mem["peak_bytes"],
                "peak_es_over_inference": round(es_mem["peak_bytes"] / mem["inference"]["peak_bytes"], 4),
                "added_bytes_es": es_mem.get("added_bytes"),  # CPU only: on top of the loaded, warmed-up model
            }
        )
    result = {
        "model": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "threads": args.threads,
        "parameters": n_params,
        "population": args.population,
        "prompts_per_update": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
        "generation_s": round(float(np.median(t_plain)), 4),
        "copy_gbps": round(copy_gbps, 3),
        "weights_bytes": n_params * elem,
        "peak_bytes_inference": mem["inference"]["peak_bytes"],
        "added_bytes_inference": mem["inference"].get("added_bytes"),
        "noise": per_scheme,
    }
    if {"torch", "table"} <= set(editors):
        result["table_over_torch"] = {
            "perturb_restore_speedup": round(
                per_scheme["table"]["perturb_restore_gbps"] / per_scheme["torch"]["perturb_restore_gbps"], 3
            ),
            "es_update_time": round(per_scheme["table"]["es_update_s"] / per_scheme["torch"]["es_update_s"], 4),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
