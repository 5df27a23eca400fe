"""paper-bf16 against an independent re-implementation of the authors' artifact's arithmetic, bit for bit.

The reference below is written from the artifact's `worker.py` and `train.py` (yunpengba7/understanding-es), not from
esbench: per-tensor noise from seed XOR blake2b-8(name), `randn` in fp32, `mul_(σ)`, cast to the parameter dtype and
added; restore adds the noise times −σ the same way; rewards z-scored with ddof 0 and eps 1e-8; the update summed
in fp32 with `add_(noise, alpha=lr/N · z)` per tensor, cast once and added on every engine; engines hold ⌈N/E⌉
contiguous members and are re-synced from engine 0 every K completed steps. esbench's recipe pieces (TensorEditor,
EnginesPopulation, tell) run the same steps on the tiny model's weights, and the bf16 weights must match exactly.
"""

from __future__ import annotations

import hashlib
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from esbench.es.population import EnginesPopulation, LocalPopulation, Rollout
from esbench.es.weights import TensorEditor
from esbench.methods.es import ESConfig, ask, tell

# ---------------------------------------------------------------------------------------------------------------
# the reference


def _ref_noise(seed: int, name: str, p: torch.Tensor) -> torch.Tensor:
    tid = int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "little", signed=False)
    g = torch.Generator(device=p.device)
    g.manual_seed((int(seed) ^ tid) & 0xFFFFFFFFFFFFFFFF)
    return torch.randn(p.shape, generator=g, dtype=torch.float32, device=p.device)


@torch.no_grad()
def _ref_apply_noise(params: dict, seed: int, sigma: float) -> None:
    for name, p in params.items():
        delta = _ref_noise(seed, name, p)
        delta.mul_(float(sigma))
        p.add_(delta.to(dtype=p.dtype))


@torch.no_grad()
def _ref_update(params: dict, seeds: list[int], weights: list[float], lr: float) -> None:
    scale = float(lr) / len(seeds)
    for name, p in params.items():
        total = torch.zeros(p.shape, dtype=torch.float32, device=p.device)
        for seed, w in zip(seeds, weights, strict=True):
            total.add_(_ref_noise(seed, name, p), alpha=float(scale * w))
        p.add_(total.to(dtype=p.dtype))


def reference_run(start: dict, fitness, seeds_per_step, sigma, lr, engines, sync_every) -> dict:
    """The artifact's loop over E engines (each a dict of bf16 tensors), returning engine 0's weights."""
    engs = [{k: v.clone() for k, v in start.items()} for _ in range(engines)]
    for step, seeds in enumerate(seeds_per_step):
        size = math.ceil(len(seeds) / engines)
        rewards = np.zeros(len(seeds))
        for e in range(engines):
            for i in range(e * size, min(e * size + size, len(seeds))):
                _ref_apply_noise(engs[e], seeds[i], sigma)
                rewards[i] = fitness(engs[e])
                _ref_apply_noise(engs[e], seeds[i], -sigma)
        z = (rewards - float(np.mean(rewards))) / (float(np.std(rewards, ddof=0)) + 1e-8)
        for eng in engs:
            _ref_update(eng, [int(s) for s in seeds], z.tolist(), lr)
        if engines > 1 and sync_every > 0 and (step + 1) % sync_every == 0:
            for eng in engs[1:]:
                for k in eng:
                    eng[k].copy_(engs[0][k])
    return engs[0]


# ---------------------------------------------------------------------------------------------------------------
# esbench, driven through the recipe's own pieces


class FitnessBackend:
    """A backend whose 'generation' is the fitness of the weights it currently holds (one prompt)."""

    def __init__(self, params, fitness):
        self.params, self.fitness = params, fitness

    def generate(self, prompts, temperature, max_new_tokens, seed):
        return [[SimpleNamespace(text=repr(self.fitness(self.params)), tokens=1)] for _ in prompts]


def esbench_run(start: dict, fitness, cfg: ESConfig, steps: int, first: int = 0, ckpt=None) -> dict:
    """Steps `first`..`steps`−1 of the recipe; with `ckpt`, resume from it first (when `first` > 0) and save to it."""
    from esbench.methods.es import EpochSampler, load_checkpoint, save_checkpoint

    params = {k: v.clone() for k, v in start.items()}
    editor = TensorEditor(params, cfg.precision)
    state = load_checkpoint(ckpt, editor) if first else None
    backend = FitnessBackend(params, fitness)
    spec = Rollout(cfg.population, cfg.antithetic, cfg.sigma, 0.0, 1, True)
    if cfg.engines > 1:
        pop = EnginesPopulation(backend, editor, spec, 7, cfg.engines, cfg.engine_sync_every)
    else:
        pop = LocalPopulation(backend, editor, spec, 7)
    if state is not None:
        assert state["step"] == first
        pop.load_state(state["engines"])
    for step in range(first, steps):
        members = ask(cfg, 7, step)
        rewards = np.array([[float(g[0][0])] for g in pop.roll_out(step, ["p"])])
        seeds, coeffs = tell(cfg, members, rewards)
        editor.update(seeds, coeffs)
        pop.update(seeds, coeffs, 0.0, step)
    if ckpt is not None:
        save_checkpoint(ckpt, editor, steps, EpochSampler(1, 0), {}, pop.state())
    return params


@pytest.fixture(scope="module")
def tiny_bf16():
    from esbench.models import load_model

    model = load_model("builtin:tiny").model
    seen, out = set(), {}
    for name, p in model.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out[name] = p.detach().to(torch.bfloat16).clone()
    return out


def _fitness_for(params: dict):
    """A smooth fitness of the weights with member-to-member spread: a fixed random projection, in float64."""
    g = torch.Generator().manual_seed(123)
    w = {k: torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in params.items()}
    return lambda ps: float(sum((ps[k].to(torch.float64) * w[k]).sum() for k in ps))


@pytest.mark.parametrize(("engines", "sync_every"), [(1, 0), (2, 2), (3, 0)])
def test_paper_bf16_matches_the_artifacts_arithmetic_bit_for_bit(tiny_bf16, engines, sync_every):
    cfg = ESConfig(
        population=6, sigma=1e-3, alpha=5e-4, batch_size=1, precision="paper-bf16", engines=engines,
        engine_sync_every=sync_every,
    )  # fmt: skip
    steps = 4
    fitness = _fitness_for(tiny_bf16)
    seeds_per_step = [[s for s, _ in ask(cfg, 7, t)] for t in range(steps)]
    ref = reference_run(tiny_bf16, fitness, seeds_per_step, cfg.sigma, cfg.alpha, engines, sync_every)
    got = esbench_run(tiny_bf16, fitness, cfg, steps)
    moved = sum(int((ref[k] != tiny_bf16[k]).sum()) for k in ref)
    assert moved > 1000, "premise: the updates moved the bf16 weights"
    for k in ref:
        assert torch.equal(got[k], ref[k]), k


def test_engines_change_the_trajectory_and_per_member_is_a_different_scheme(tiny_bf16):
    """The topology matters (that is why it is simulated), and the per-member variant is not the artifact's."""
    fitness = _fitness_for(tiny_bf16)
    base = dict(population=6, sigma=1e-3, alpha=5e-4, batch_size=1)
    one = esbench_run(tiny_bf16, fitness, ESConfig(**base, precision="paper-bf16"), 3)
    three = esbench_run(tiny_bf16, fitness, ESConfig(**base, precision="paper-bf16", engines=3), 3)
    per_member = esbench_run(tiny_bf16, fitness, ESConfig(**base, precision="paper-bf16-per-member"), 3)
    assert any(not torch.equal(one[k], three[k]) for k in one)
    assert any(not torch.equal(one[k], per_member[k]) for k in one)


def test_engine_options_are_validated():
    with pytest.raises(ValueError, match="engines"):
        ESConfig(population=4, engines=2)  # fp32-master has no residuals to simulate
    with pytest.raises(ValueError, match="idle"):
        ESConfig(population=4, engines=5, precision="paper-bf16")
    with pytest.raises(ValueError, match="engine_sync_every"):
        ESConfig(population=4, precision="paper-bf16", engine_sync_every=3)


def _artifact_schedule(n: int, batch: int, epochs: int, seed: int) -> list[list[int]]:
    """The artifact's `build_training_schedule`, re-written from its description."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(epochs):
        idx = np.arange(n)
        rng.shuffle(idx)
        out += [[int(i) for i in idx[s : s + batch]] for s in range(0, n, batch)]
    return out


def test_keep_tail_order_is_the_artifacts_schedule_and_resumes_mid_epoch():
    from esbench.methods.es import ES, KeepTailSampler, make_sampler

    cfg = ESConfig(population=4, batch_size=64, data_order="keep-tail", shuffle_seed=42)
    expected = _artifact_schedule(7473, 64, 2, 42)
    assert len(expected) == 234 == ES.updates_for("2ep", 7473, cfg)
    sampler = make_sampler(cfg, 7473, run_seed=0)
    got = [sampler.next_batch(64) for _ in range(100)]
    resumed = KeepTailSampler(7473, 42, **sampler.state())  # a checkpoint's (epoch, position)
    got += [resumed.next_batch(64) for _ in range(134)]
    assert got == expected
    assert len(got[116]) == 7473 - 116 * 64 == 49  # the kept tail
    assert got[117] != got[0] and sorted(sum(got[117:], [])) == list(range(7473))
    wrap = make_sampler(ESConfig(population=4, batch_size=64), 7473, run_seed=42)
    assert len([wrap.next_batch(64) for _ in range(117)][-1]) == 64  # the default wraps into the next epoch


def test_a_resumed_engines_run_continues_every_engines_residuals(tiny_bf16, tmp_path):
    """The checkpoint holds engines 1..E−1 too: stop after 2 updates, resume in a fresh editor, same weights."""
    cfg = ESConfig(population=6, sigma=1e-3, alpha=5e-4, batch_size=1, precision="paper-bf16", engines=3)
    fitness = _fitness_for(tiny_bf16)
    straight = esbench_run(tiny_bf16, fitness, cfg, 4)
    esbench_run(tiny_bf16, fitness, cfg, 2, ckpt=tmp_path / "es")
    assert (tmp_path / "es" / "engines.safetensors").exists()
    resumed = esbench_run(tiny_bf16, fitness, cfg, 4, first=2, ckpt=tmp_path / "es")
    for k in straight:
        assert torch.equal(resumed[k], straight[k]), k
