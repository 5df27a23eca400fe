"""ES update time on 1 worker (the cell's process) against W Ray actors, side by side in one run, printed as JSON.

One update = every member perturbed, rolled out on the batch greedily, restored; then the fp32 update applied by the
driver and every replica, with the replicas' checksums compared (`esbench.es.population`). `speedup` is the time on
1 worker over the time on W (> 1: the actors pay off). Actor start-up (each loads a replica) is reported apart.

`paper_bf16_engines` does the same for the artifact's topology (`--engines E`, default W): paper-bf16 with E engines
simulated in one process (`EnginesPopulation`: engine k swapped in for its shard) against E real engines
(`RayEnginesPopulation`: engine 0 in this process, E-1 actors, every shard at once), re-synced every update.

    python benchmarks/es_scaling.py                       # tiny model, CPU, W = 2 (one thread per worker)
    python benchmarks/es_scaling.py --model llama-100m --population 8 --batch 8
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CONFIGS, load  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny", choices=["tiny", *CONFIGS])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--population", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--updates", type=int, default=2)
    ap.add_argument("--engines", type=int, default=None, help="paper-bf16 engines (default: --workers)")
    args = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    torch.set_num_threads(1)
    from esbench.backends.hf import HFBackend
    from esbench.es.population import LocalPopulation, Rollout
    from esbench.methods.es_ray import RayPopulation

    model, tok, prompts = load(args.model, "cpu", "float32")
    backend = HFBackend(model, tok, device="cpu", cpu_threads=1)
    editor = backend.weight_editor()
    spec = Rollout(args.population, False, 3e-3, 0.0, args.max_new_tokens, True)
    prompts = prompts[: args.batch]
    seeds, coeffs = [1, 2], [1e-4, -1e-4]

    local = LocalPopulation(backend, editor, spec, 0)

    def local_update(step: int) -> None:
        local.roll_out(step, prompts)
        editor.update(seeds, coeffs)

    t = time.perf_counter()
    for step in range(args.updates):
        local_update(step)
    one = (time.perf_counter() - t) / args.updates

    with tempfile.TemporaryDirectory() as work:
        t = time.perf_counter()
        pop = RayPopulation(backend, editor, spec, 0, args.workers, Path(work))
        startup = time.perf_counter() - t
        try:
            pop.roll_out(0, prompts[:2])  # warm-up: first calls import and load lazily
            t = time.perf_counter()
            for step in range(args.updates):
                pop.roll_out(step, prompts)
                editor.update(seeds, coeffs)
                pop.update(seeds, coeffs, 0.0, step)
            many = (time.perf_counter() - t) / args.updates
        finally:
            pop.close()
    engines = engines_row(args, args.engines or args.workers)
    print(
        json.dumps(
            {
                "model": args.model,
                "cpus": os.cpu_count(),
                "population": args.population,
                "batch": args.batch,
                "workers": args.workers,
                "update_s_1_worker": round(one, 3),
                f"update_s_{args.workers}_workers": round(many, 3),
                "actor_startup_s": round(startup, 2),
                "speedup": round(one / many, 3),
                "paper_bf16_engines": engines,
            },
            indent=2,
        )
    )


def engines_row(args, engines: int) -> dict:
    """paper-bf16 with `engines` engines: one process against engine 0 here and engines-1 actors."""
    from esbench.backends.hf import HFBackend
    from esbench.es.population import EnginesPopulation, Rollout
    from esbench.methods.es_ray import RayEnginesPopulation

    spec = Rollout(args.population, False, 3e-3, 0.0, args.max_new_tokens, True)
    seeds, coeffs = [1, 2], [1e-4, -1e-4]
    times = {}
    for mode in ("simulated", "actors"):
        model, tok, prompts = load(args.model, "cpu", "float32")
        backend = HFBackend(model, tok, device="cpu", cpu_threads=1)
        backend.cast(torch.bfloat16)
        editor = backend.weight_editor("paper-bf16")
        prompts = prompts[: args.batch]
        with tempfile.TemporaryDirectory() as work:
            t = time.perf_counter()
            if mode == "simulated":
                pop = EnginesPopulation(backend, editor, spec, 0, engines, sync_every=1)
            else:
                pop = RayEnginesPopulation(backend, editor, spec, 0, engines, 1, engines, Path(work))
            startup = time.perf_counter() - t
            try:
                pop.roll_out(0, prompts[:2])
                t = time.perf_counter()
                for step in range(args.updates):
                    pop.roll_out(step, prompts)
                    editor.update(seeds, coeffs)
                    pop.update(seeds, coeffs, 0.0, step)
                times[mode] = ((time.perf_counter() - t) / args.updates, startup)
            finally:
                pop.close()
    return {
        "engines": engines,
        "update_s_simulated": round(times["simulated"][0], 3),
        "update_s_actors": round(times["actors"][0], 3),
        "actor_startup_s": round(times["actors"][1], 2),
        "speedup": round(times["simulated"][0] / times["actors"][0], 3),
    }


if __name__ == "__main__":
    main()
