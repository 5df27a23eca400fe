"""`es`: Evolution Strategies for LLM post-training, exact and seed-regenerated.

Paper: arXiv 2608.27351 ("Understanding Evolution Strategies for LLM Reasoning"), following Qiu et al.
(arXiv 2509.24372, "Evolution Strategies at Scale"); reference implementation: the authors' artifact
yunpengba7/understanding-es. Shape: evosax's ask/tell, where a population member is a seed, not a tensor.

One update, top to bottom:
1. draw the next `batch_size` prompts (epoch semantics: a seeded permutation per epoch);
2. ask: N member seeds (N/2 seeds with ± signs when antithetic);
3. for each member: perturb θ ← θ + σ·ε(seed) in place, roll out the prompts (greedy by default), score them with
   the task's verifier reward (1 correct, 0.1 formatted but wrong, 0 otherwise), restore θ;
4. tell: shape the rewards (z-score with ddof 0 and eps 1e-8; or centred ranks; optionally per prompt) and apply
   θ ← θ + α/N · Σ zᵢ εᵢ. Convention: 1/σ is folded into α, as in the paper, so α is the step on the noise.
5. optional weight decay, toward zero or anchored to θ₀; log; checkpoint every `checkpoint_every` updates.

Precision (see `esbench.es.weights`): `fp32-master` restores bit-exactly from an fp32 master and accumulates the
update in fp32; `paper-bf16` casts the model to bf16 and subtracts noise to restore, as the authors' artifact does
(update summed in fp32 and cast once; optionally its E engines with their own residuals, re-synced every K updates),
and logs the residual drift that leaves; `paper-bf16-per-member` adds each member's update in bf16 (es-at-scale's
accelerated code). No gradients and no optimizer state are kept.

Data order: `wrap` (full batches, the permutation running on across epochs) or `keep-tail`, the artifact's
schedule (a numpy shuffle per epoch, the last partial batch kept).
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from esbench.es import BF16_MODES, population
from esbench.es.weights import WeightEditor
from esbench.limits import MAX_COUNT, MAX_NEW_TOKENS, MAX_UPDATES
from esbench.methods import Method, TrainContext, TrainResult, es_ray
from esbench.records import atomic_write_json


class ESConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    population: int = Field(30, ge=2, le=MAX_COUNT, description="N members per update (Qiu et al.: 30).")
    sigma: float = Field(1e-3, gt=0, le=1, description="Perturbation scale σ.")
    alpha: float = Field(5e-4, gt=0, le=10, description="Step size α with 1/σ folded in: θ += α/N · Σ zᵢεᵢ.")
    batch_size: int = Field(32, gt=0, le=MAX_COUNT, description="Prompts per update, shared by the whole population.")
    antithetic: bool = Field(False, description="Mirrored pairs (+ε, −ε); population must be even.")
    centered_ranks: bool = Field(False, description="Centred-rank fitness shaping instead of z-scores.")
    normalization: Literal["zscore", "center", "none"] = Field(
        "zscore",
        description="Reward normalisation across members: z-score (ddof 0, eps 1e-8; the paper), mean-centred, or "
        "the raw rewards (Fig. 1(c)'s ablation).",
    )
    group_by_prompt: bool = Field(False, description="Shape rewards per prompt across members, then average.")
    weight_decay: float = Field(0.0, ge=0, lt=1, description="Per-update shrink factor of θ (or θ−θ₀).")
    decay_anchor: Literal["zero", "init"] = Field("zero", description="Decay toward 0 or toward θ₀.")
    temperature: float = Field(0.0, ge=0, le=100, description="Rollout temperature; 0 = greedy (paper, easy setting).")
    max_new_tokens: int = Field(64, gt=0, le=MAX_NEW_TOKENS, description="Rollout length limit.")
    common_sampling_seed: bool = Field(
        True,
        description="With temperature > 0: true (default, kept so existing cell ids stand), all members sample with "
        "one seed per update (common random numbers, which Table 13 shows changes the estimator's noise); false, each "
        "member samples with its own seed per update, as vLLM does by default and the paper's hard ES ran "
        "(suites/paper-hard.yaml). Greedy rollouts take no seed.",
    )
    reward_correct: float = Field(1.0, description="Reward for a correct answer.")
    reward_format: float = Field(0.1, description="Reward for an extracted but wrong answer.")
    precision: Literal["fp32-master", "paper-bf16", "paper-bf16-per-member"] = Field(
        "fp32-master", description="See module docstring."
    )
    noise: Literal["torch", "table"] = Field(
        "torch",
        description="Noise scheme (esbench.es.noise): torch, the artifact's seeded torch.randn per tensor (differs "
        "between GPU models); table, block-wise slices of a shared table made on CPU (Salimans et al. 2017): the same "
        "noise on every device, perturbing at about copy speed, 256 MiB per device.",
    )
    engines: int = Field(
        1,
        ge=1,
        le=1024,
        description="paper-bf16 only: simulated engines, each with its own restore residuals (artifact: 8).",
    )
    engine_sync_every: int = Field(
        0,
        ge=0,
        le=MAX_UPDATES,
        description="Re-sync engines from engine 0 every K completed updates (artifact: 117); 0: never.",
    )
    data_order: Literal["wrap", "keep-tail"] = Field(
        "wrap",
        description="wrap: every batch is full, the permutation runs on into the next epoch; keep-tail: the "
        "artifact's schedule, one numpy shuffle per epoch and the last partial batch kept.",
    )
    shuffle_seed: int | None = Field(
        None, description="Seed of the data order; default the cell's seed (artifact: 42)."
    )
    checkpoint_every: int = Field(
        10, gt=0, le=MAX_UPDATES, description="Save master weights, sampler and step every k updates."
    )

    @model_validator(mode="after")
    def _antithetic_pairs(self) -> ESConfig:
        if self.antithetic and self.population % 2:
            raise ValueError(f"population: antithetic pairs need an even population, got {self.population}")
        if self.centered_ranks and self.normalization != "zscore":
            raise ValueError("normalization: centred ranks are a normalisation of their own; leave it at zscore")
        if self.engines > 1 and self.precision != "paper-bf16":
            raise ValueError(f"engines: {self.engines} engines simulate paper-bf16's replicas, not {self.precision}")
        if self.engines > self.population:
            raise ValueError(f"engines: {self.engines} engines for {self.population} members leaves some idle")
        if self.engine_sync_every and self.engines == 1:
            raise ValueError("engine_sync_every: needs engines > 1")
        return self


# ---------------------------------------------------------------------------------------------------------------
# ask / tell


def ask(cfg: ESConfig, run_seed: int, step: int) -> list[tuple[int, float]]:
    """The population at `step` as (seed, sign) pairs; pure function of (run seed, step)."""
    return population.ask(cfg.population, cfg.antithetic, run_seed, step)


def rollout_spec(cfg: ESConfig) -> population.Rollout:
    return population.Rollout(
        population=cfg.population,
        antithetic=cfg.antithetic,
        sigma=cfg.sigma,
        temperature=cfg.temperature,
        max_new_tokens=cfg.max_new_tokens,
        common_sampling_seed=cfg.common_sampling_seed,
    )


def zscore(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std(ddof=0) + 1e-8)


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks scaled to [−0.5, 0.5] (Salimans et al. 2017), ties broken by position."""
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    return ranks / max(len(x) - 1, 1) - 0.5


NORMALISE = {"zscore": zscore, "center": lambda x: x - x.mean(), "none": lambda x: x}


def shape(cfg: ESConfig, rewards: np.ndarray) -> np.ndarray:
    """Fitness per member from the [members, prompts] reward matrix."""
    f = centered_ranks if cfg.centered_ranks else NORMALISE[cfg.normalization]
    if cfg.group_by_prompt:
        return np.stack([f(rewards[:, j]) for j in range(rewards.shape[1])], axis=1).mean(axis=1)
    return f(rewards.mean(axis=1))


def tell(cfg: ESConfig, members: list[tuple[int, float]], rewards: np.ndarray) -> tuple[list[int], list[float]]:
    """Per-seed update coefficients α/N · Σ (sign · z) so that θ += Σ cᵢ εᵢ(seedᵢ)."""
    z = shape(cfg, rewards)
    coeffs: dict[int, float] = {}
    for (seed, sign), zi in zip(members, z, strict=True):
        coeffs[seed] = coeffs.get(seed, 0.0) + cfg.alpha / cfg.population * sign * float(zi)
    return list(coeffs), list(coeffs.values())


# ---------------------------------------------------------------------------------------------------------------
# data order


class EpochSampler:
    """Batches over a fixed train set in a fresh seeded permutation each epoch; state is (epoch, position)."""

    def __init__(self, size: int, seed: int, epoch: int = 0, pos: int = 0):
        self.size, self.seed, self.epoch, self.pos = size, seed, epoch, pos

    def _order(self) -> list[int]:
        order = list(range(self.size))
        random.Random(f"esbench-sampler:{self.seed}:{self.epoch}").shuffle(order)
        return order

    def next_batch(self, batch_size: int) -> list[int]:
        out: list[int] = []
        while len(out) < batch_size:
            order = self._order()
            take = order[self.pos : self.pos + batch_size - len(out)]
            out += take
            self.pos += len(take)
            if self.pos >= self.size:
                self.epoch, self.pos = self.epoch + 1, 0
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}


class KeepTailSampler(EpochSampler):
    """The artifact's schedule (`build_training_schedule`): one `default_rng(seed)` shuffles `arange(n)` afresh each
    epoch, batches are consecutive slices, and an epoch's last partial batch is kept (7473 rows, batch 64: 117 updates
    per epoch, the last of 49 prompts). State is (epoch, position), like `EpochSampler`'s."""

    def _order(self) -> list[int]:
        rng = np.random.default_rng(self.seed)
        for _ in range(self.epoch + 1):  # the same generator shuffles every epoch in turn
            order = np.arange(self.size)
            rng.shuffle(order)
        return [int(i) for i in order]

    def next_batch(self, batch_size: int) -> list[int]:
        out = self._order()[self.pos : self.pos + batch_size]
        self.pos += len(out)
        if self.pos >= self.size:
            self.epoch, self.pos = self.epoch + 1, 0
        return out


def make_sampler(cfg: ESConfig, size: int, run_seed: int, state: dict | None = None) -> EpochSampler:
    cls = KeepTailSampler if cfg.data_order == "keep-tail" else EpochSampler
    return cls(size, run_seed if cfg.shuffle_seed is None else cfg.shuffle_seed, **(state or {}))


# ---------------------------------------------------------------------------------------------------------------
# checkpoints


def save_checkpoint(
    path: Path, editor: WeightEditor, step: int, sampler: EpochSampler, counters: dict, engines: dict | None = None
) -> None:
    """Master weights + sampler + step (+ simulated engines' weights), written to a temp folder and renamed: a kill
    never leaves half of one."""
    from safetensors.torch import save_file

    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(editor.master_state(), str(tmp / "master.safetensors"))
    if editor.precision in BF16_MODES:
        save_file(editor.ideal_state(), str(tmp / "shadow.safetensors"))
    if engines:
        save_file({k: v.contiguous() for k, v in engines.items()}, str(tmp / "engines.safetensors"))
    atomic_write_json(tmp / "state.json", {"step": step, "sampler": sampler.state(), "counters": counters})
    old = path.with_name(path.name + ".old")
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(path: Path, editor: WeightEditor) -> dict | None:
    """Load the weights into `editor`; return the state, with the simulated engines' weights under "engines"."""
    from safetensors.torch import load_file

    for candidate in (path, path.with_name(path.name + ".old")):  # .old survives a kill between the renames
        if (candidate / "state.json").exists():
            editor.load_master_state(load_file(str(candidate / "master.safetensors")))
            if editor.precision in BF16_MODES:
                editor.load_ideal_state(load_file(str(candidate / "shadow.safetensors")))
            state = json.loads((candidate / "state.json").read_text())
            if (candidate / "engines.safetensors").exists():
                state["engines"] = load_file(str(candidate / "engines.safetensors"))
            return state
    return None


# ---------------------------------------------------------------------------------------------------------------
# the recipe


class ES(Method):
    Config = ESConfig

    @classmethod
    def prompts_per_update(cls, config: ESConfig) -> int:
        return config.batch_size

    @classmethod
    def updates_for(cls, budget: int | str, train_size: int, config: ESConfig) -> int:
        """keep-tail epochs have ⌈n/b⌉ updates each (the artifact's two GSM8K epochs: 2 × 117 = 234)."""
        if isinstance(budget, str) and config.data_order == "keep-tail":
            return max(1, math.ceil(float(budget.removesuffix("ep")) * math.ceil(train_size / config.batch_size)))
        return super().updates_for(budget, train_size, config)

    def train(self, train_data, reward, budget, config: ESConfig, ctx: TrainContext):
        cfg = config
        reward = reward.with_values(cfg.reward_correct, cfg.reward_format)
        backend = ctx.backend
        bf16 = cfg.precision in BF16_MODES
        entry_dtype = backend.dtype  # restored after training: a later stage (GRPO) sees the cell's dtype
        if bf16:
            backend.cast(torch.bfloat16)
        editor = backend.weight_editor(cfg.precision, cfg.noise)
        anchor = editor.master_state(on_device=True) if cfg.weight_decay and cfg.decay_anchor == "init" else None
        ckpt = ctx.workdir / "es"
        start, counters = 0, {"rollouts": 0, "generated_tokens": 0}
        state = load_checkpoint(ckpt, editor)
        sampler = make_sampler(cfg, len(train_data), ctx.seed, state["sampler"] if state else None)
        if state is not None:
            start, counters = state["step"], state["counters"]
        ctx.rewind(start)  # drop log lines written after the checkpoint we resume from
        # who rolls out the members (built from the resumed weights): this process, as one engine or as the
        # artifact's E simulated engines; or W Ray actors holding replicas (esbench.es.population)
        spec = rollout_spec(cfg)
        pop: population.Population
        if ctx.workers > 1 and cfg.engines > 1:  # the artifact's engines as real ones: engine 0 here, 1..E-1 actors
            pop = es_ray.RayEnginesPopulation(
                backend, editor, spec, ctx.seed, cfg.engines, cfg.engine_sync_every, ctx.workers, ctx.workdir, anchor
            )
        elif ctx.workers > 1:
            pop = es_ray.RayPopulation(backend, editor, spec, ctx.seed, ctx.workers, ctx.workdir, anchor)
        elif cfg.engines > 1:
            pop = population.EnginesPopulation(backend, editor, spec, ctx.seed, cfg.engines, cfg.engine_sync_every)
        else:
            pop = population.LocalPopulation(backend, editor, spec, ctx.seed)
        if state is not None and "engines" in state:
            pop.load_state(state["engines"])
        try:
            for step in range(start, budget):
                ctx.maybe_probe(step)
                batch = [train_data[i] for i in sampler.next_batch(cfg.batch_size)]
                prompts = [ctx.prompt(row) for row in batch]
                members = ask(cfg, ctx.seed, step)
                before = editor.master_state(on_device=True) if bf16 else None
                rewards = np.zeros((len(members), len(batch)))
                generated = 0
                for i, gens in enumerate(pop.roll_out(step, prompts)):
                    rewards[i] = [reward(text, row["answer"]) for (text, _), row in zip(gens, batch, strict=True)]
                    counters["rollouts"] += len(batch)
                    generated += sum(tokens for _, tokens in gens)
                counters["generated_tokens"] += generated
                # compute (esbench.metrics.compute): every member's prompt tokens, as the backends encode them
                prompt_tokens = sum(map(len, backend.tokenizer(prompts, add_special_tokens=False)["input_ids"]))
                row = {
                    "update": step,
                    "reward_mean": float(rewards.mean()),
                    "reward_std": float(rewards.mean(axis=1).std(ddof=0)),
                    "reward_max_member": float(rewards.mean(axis=1).max()),
                    "tokens": len(members) * prompt_tokens + generated,
                    "tokens_generated": generated,
                }
                if before is not None:  # what the bf16 subtract-restores left behind, before this update
                    row["restore_residual_rms"] = editor.rms_diff(before)
                seeds, coeffs = tell(cfg, members, rewards)
                row.update(editor.update(seeds, coeffs, cfg.weight_decay, anchor))
                pop.update(seeds, coeffs, cfg.weight_decay, step)  # replicas apply it too (Ray: checked), or re-sync
                ctx.log(row)
                if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == budget:
                    save_checkpoint(ckpt, editor, step + 1, sampler, counters, pop.state())
        finally:
            pop.close()
        ctx.maybe_probe(budget, final=True)
        # the editor lives with the engine: on vLLM a cast restarts it and the editor (with the fp32 shadow and the
        # simulated engines) is gone, so take what the record needs first, on the CPU (off the GPU for the restart)
        ideal = editor.ideal_state()  # CPU copies
        editor.close()  # its fp32 master or shadow and simulated engines must not sit beside the evaluation
        if backend.dtype != entry_dtype:
            backend.cast(entry_dtype)  # exact widening of the bf16 weights (fp32 cells); none for bf16 cells
        summary = {"precision": cfg.precision + (f", {cfg.engines} engines" if cfg.engines > 1 else "")}
        return TrainResult(updates=budget, ideal=ideal, summary=summary, **counters)
