"""`random-search`: a gradient-free hill-climbing baseline, packaged outside esbench as a method plug-in.

Each update draws `candidates` seeded Gaussian perturbations θ + σ·ε, rolls out the same batch of prompts with
each (and with the current θ), and moves to the best candidate only if it beats the current weights' mean
verifier reward. It is the simplest method that uses the same budget unit (updates) and rewards as ES, so it tells
whether ES's population-weighted step buys anything over "keep the best of N tries".

It uses only esbench's typed plug-in surface (`esbench.api`): the cell's backend generates and edits weights
through its seed-regenerated `WeightEditor`, so restores are exact (fp32 master) and a perturbation is stored as a
seed, never as a tensor.
"""

from __future__ import annotations

import random

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from esbench.api import Method, Reward, TrainContext, TrainResult, member_seed


class RandomSearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    candidates: int = Field(8, ge=1, description="Perturbations tried per update.")
    sigma: float = Field(3e-3, gt=0, description="Perturbation scale σ; an accepted step moves θ by σ·ε.")
    batch_size: int = Field(32, gt=0, description="Prompts per update, shared by all candidates.")
    max_new_tokens: int = Field(64, gt=0, description="Greedy rollout length limit.")


class RandomSearch(Method):
    Config = RandomSearchConfig

    @classmethod
    def prompts_per_update(cls, config: RandomSearchConfig) -> int:
        return config.batch_size

    def train(self, train_data, reward: Reward, budget: int, config: RandomSearchConfig, ctx: TrainContext):
        cfg = config
        backend = ctx.backend
        editor = backend.weight_editor("fp32-master")
        rng = random.Random(f"random-search:{ctx.seed}")
        rollouts = tokens = 0

        def score(batch) -> float:
            nonlocal rollouts, tokens
            gens = backend.generate([ctx.prompt(r) for r in batch], max_new_tokens=cfg.max_new_tokens)
            rollouts += len(batch)
            tokens += sum(g[0].tokens for g in gens)
            return float(np.mean([reward(g[0].text, r["answer"]) for g, r in zip(gens, batch, strict=True)]))

        ctx.maybe_probe(0)  # esbench's training probe (held-out entropy and success), when the suite asks for one
        accepted = 0
        for step in range(budget):
            batch = rng.sample(train_data, min(cfg.batch_size, len(train_data)))
            current = score(batch)
            results = []
            for i in range(cfg.candidates):
                seed = member_seed(ctx.seed, step, i)
                editor.perturb(seed, cfg.sigma)
                results.append((score(batch), seed))
                editor.restore()
            best, best_seed = max(results)
            moved = best > current
            if moved:  # θ ← θ + σ·ε(best): the same noise the candidate was evaluated with, accumulated in fp32
                editor.update([best_seed], [cfg.sigma])
                accepted += 1
            ctx.log(
                {
                    "update": step,
                    "reward_mean": float(np.mean([r for r, _ in results])),
                    "reward_current": current,
                    "reward_best": best,
                    "accepted": moved,
                }
            )
            ctx.maybe_probe(step + 1, final=step + 1 == budget)
        return TrainResult(
            updates=budget,
            rollouts=rollouts,
            generated_tokens=tokens,
            summary={"accepted_updates": accepted},
        )
