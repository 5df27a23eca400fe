"""`subtraction`: the subtraction diagnostic of arXiv 2608.27351 (Table 13, App. E.2–E.5). A measurement, not training.

Why it matters: ES estimates a gradient from F(θ+σε); subtracting a baseline (X₀ = F(θ), or the mirrored X₋ of
two-point ES) lowers the estimate's variance only when the two evaluations are strongly correlated. For rewards of
freshly sampled rollouts they are not (κ > 1: subtraction adds variance), which is the paper's explanation of why
one-point ES with z-scoring is not worse than two-point ES. Statistics: `esbench.metrics.subtraction`.

For each σ and each of `budget` full-parameter directions ε (seeded like ES members), on the base weights:
- reward, regenerated rollouts, common seeds: one generation seed per (prompt, seed index) serves X₊, X₀ and X₋;
- reward, regenerated rollouts, independent seeds: X₊, X₀, X₋ each sample with their own seed;
- fixed rollouts (frozen base-model samples, `fixed_samples` per prompt): mean token log-probability, a policy
  sequence loss −Â·mean log π(y), and the GRPO surrogate mean_t min(rₜÂ, clip(rₜ, 1±0.2)Â) with rₜ = π'(yₜ)/π(yₜ)
  and Â the group-normalised (population SD) reward of the frozen sample;
- fixed-batch cross-entropy: −mean log π(gold | prompt) over `ce_prompts` training problems. The paper used SST-2;
  esbench uses the training task's own gold answers, so the objective is a fixed-batch supervised loss as there.
Pooled over prompts, seeds (or samples) and directions, as App. E reports them. Perturbations use the fp32-master
editor, so the weights after the diagnostic are bit-identical to the base's (the record's drift is 0).

Not stated by the paper, chosen here: temperature 0.6 and the suite's generation limit (the easy evaluation
settings), direction seeds from ES's member seeds of a reserved step.
"""

from __future__ import annotations

import hashlib
import typing
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from esbench.es.weights import member_seed
from esbench.limits import MAX_COUNT, MAX_NEW_TOKENS
from esbench.methods import Method, TrainContext, TrainResult
from esbench.metrics.subtraction import subtraction_stats

Objective = Literal[
    "reward-common", "reward-independent", "cross-entropy", "fixed-logprob", "fixed-policy-loss", "fixed-grpo"
]
ALL_OBJECTIVES: list[Objective] = list(typing.get_args(Objective))
_DIRECTION_STEP = 1 << 40  # ES member seeds of this (never trained) step give the directions


class SubtractionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sigmas: list[float] = Field([1e-4, 3e-4, 1e-3], min_length=1, description="Perturbation scales (Table 13).")
    prompts: int = Field(
        16, gt=0, le=MAX_COUNT, description="Training prompts of the reward and fixed-rollout objectives."
    )
    seeds: int = Field(16, gt=0, le=MAX_COUNT, description="Generation seeds per prompt (regenerated-rollout reward).")
    fixed_samples: int = Field(
        8, gt=1, le=MAX_COUNT, description="Frozen base-model rollouts per prompt (fixed objectives)."
    )
    ce_prompts: int = Field(
        32, gt=0, le=MAX_COUNT, description="Fixed batch of the cross-entropy objective (x directions)."
    )
    temperature: float = Field(0.6, gt=0, le=100, description="Sampling temperature (not stated by the paper).")
    max_new_tokens: int = Field(
        2048, gt=0, le=MAX_NEW_TOKENS, description="Generation limit (not stated by the paper)."
    )
    clip: float = Field(0.2, gt=0, description="GRPO surrogate clip ε.")
    objectives: list[Objective] = Field(default_factory=lambda: list(ALL_OBJECTIVES), min_length=1)


def _mean(x) -> float:
    return float(np.mean(x)) if len(x) else float("nan")


class Subtraction(Method):
    """Budget = directions ε (the paper: 4). Nothing is trained; the statistics go to the record's `train` section."""

    Config = SubtractionConfig
    spends_updates = False  # the budget counts directions; the record's budget_used.updates is 0

    @classmethod
    def prompts_per_update(cls, config: SubtractionConfig) -> int:
        return config.prompts

    def train(self, train_data, reward, budget, config: SubtractionConfig, ctx: TrainContext):
        cfg, backend = config, ctx.backend
        rows = train_data[: cfg.prompts]
        prompts, golds = [ctx.prompt(r) for r in rows], [r["answer"] for r in rows]
        ce_rows = train_data[: cfg.ce_prompts]
        ce_prompts, ce_golds = [ctx.prompt(r) for r in ce_rows], [r["answer"] for r in ce_rows]
        want = set(cfg.objectives)
        directions = [member_seed(ctx.seed, _DIRECTION_STEP, d) for d in range(budget)]

        def gen_seed(tag: int, *ix) -> int:
            """A generation seed per (objective tag, index tuple): stable across processes (no `hash()`)."""
            key = int.from_bytes(hashlib.blake2b(repr(ix).encode(), digest_size=4).digest(), "little")
            return member_seed(ctx.seed, _DIRECTION_STEP + 1 + tag, key)

        def rewards(seed: int) -> list[float]:
            gens = backend.generate(prompts, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=seed)
            return [reward(g[0].text, gold) for g, gold in zip(gens, golds, strict=True)]

        # frozen base-model rollouts and their group-normalised advantages (population SD, Eq. 3)
        fixed = backend.generate(
            prompts, n=cfg.fixed_samples, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
            seed=gen_seed(0, "fixed"),
        )  # fmt: skip
        f_prompts = [p for p, g in zip(prompts, fixed, strict=True) for _ in g]
        f_texts = [s.text for g in fixed for s in g]
        advantages: list[float] = []
        for g, gold in zip(fixed, golds, strict=True):
            r = np.array([reward(s.text, gold) for s in g])
            advantages += list((r - r.mean()) / (r.std(ddof=0) + 1e-8))
        adv = np.array(advantages)

        def fixed_objectives(base_lp) -> dict[str, list[float]]:
            lp = backend.token_logprobs(f_prompts, f_texts)
            out = {
                "fixed-logprob": [_mean(x) for x in lp],
                "fixed-policy-loss": [-a * _mean(x) for a, x in zip(adv, lp, strict=True)],
            }
            grpo = []
            for a, x, x0 in zip(adv, lp, base_lp if base_lp is not None else lp, strict=True):
                ratio = np.exp(np.asarray(x) - np.asarray(x0))
                grpo.append(_mean(np.minimum(ratio * a, np.clip(ratio, 1 - cfg.clip, 1 + cfg.clip) * a)))
            out["fixed-grpo"] = grpo
            return out

        def ce() -> list[float]:
            return [-_mean(x) for x in backend.token_logprobs(ce_prompts, ce_golds)]

        # X₀ at θ: common-seed rewards once per seed index; fixed objectives and CE once (deterministic)
        base_lp = backend.token_logprobs(f_prompts, f_texts) if want & {"fixed-grpo"} else None
        x0_common = [rewards(gen_seed(1, k)) for k in range(cfg.seeds)] if "reward-common" in want else []
        x0_fixed = fixed_objectives(base_lp) if want & {"fixed-logprob", "fixed-policy-loss", "fixed-grpo"} else {}
        x0_ce = ce() if "cross-entropy" in want else []

        editor = backend.weight_editor("fp32-master")
        results = []
        for sigma in cfg.sigmas:
            obs: dict[str, dict[str, list[float]]] = {o: {"+": [], "0": [], "-": []} for o in cfg.objectives}
            for d, eps in enumerate(directions):
                for sign, key in ((1.0, "+"), (-1.0, "-")):
                    editor.perturb(eps, sigma, sign)
                    try:
                        for k in range(cfg.seeds):
                            if "reward-common" in want:
                                obs["reward-common"][key] += rewards(gen_seed(1, k))
                            if "reward-independent" in want:
                                obs["reward-independent"][key] += rewards(gen_seed(2, sigma, d, k, key))
                        for o, vals in (fixed_objectives(base_lp) if x0_fixed else {}).items():
                            if o in want:
                                obs[o][key] += vals
                        if "cross-entropy" in want:
                            obs["cross-entropy"][key] += ce()
                    finally:
                        editor.restore()
                for k in range(cfg.seeds):
                    if "reward-common" in want:
                        obs["reward-common"]["0"] += x0_common[k]
                    if "reward-independent" in want:
                        obs["reward-independent"]["0"] += rewards(gen_seed(2, sigma, d, k, "0"))
                for o in ("fixed-logprob", "fixed-policy-loss", "fixed-grpo"):
                    if o in want:
                        obs[o]["0"] += x0_fixed[o]
                if "cross-entropy" in want:
                    obs["cross-entropy"]["0"] += x0_ce
            for o in cfg.objectives:
                x = obs[o]
                try:
                    stats = subtraction_stats(x["+"], x["0"], x["-"])
                except ValueError as e:  # e.g. every perturbed rollout scored alike: κ is undefined, say so
                    stats = {"undefined": str(e), "observations": len(x["+"])}
                row = {"sigma": sigma, "objective": o, **stats}
                results.append(row)
                ctx.log({"update": len(results) - 1, **row, "x_plus": x["+"], "x_zero": x["0"], "x_minus": x["-"]})
        return TrainResult(updates=0, summary={"subtraction": results, "directions": budget})
