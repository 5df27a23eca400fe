"""ES weight edits: bit-exact restores in fp32-master mode, the measured bf16 artefact, independent noise."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from esbench.es.weights import TensorEditor, member_seed, noise
from esbench.methods.es import ESConfig, ask, centered_ranks, tell, zscore


def params(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "layer.weight": (torch.randn(64, 48, generator=g) * 0.05).to(dtype),
        "norm.weight": (1 + 0.01 * torch.randn(48, generator=g)).to(dtype),  # values near 1.0, like LayerNorm
        "bias": (torch.randn(48, generator=g) * 0.01).to(dtype),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp32_master_restore_is_bit_exact_after_many_cycles(dtype):
    p = params(dtype)
    original = {k: v.clone() for k, v in p.items()}
    ed = TensorEditor(p, "fp32-master")
    for i in range(200):
        ed.perturb(member_seed(0, 0, i), sigma=3e-3, sign=1.0 if i % 2 else -1.0)
        assert not torch.equal(p["layer.weight"], original["layer.weight"])
        ed.restore()
    for k in p:
        assert torch.equal(p[k], original[k]), k


def test_paper_bf16_restore_leaves_a_measurable_residual():
    """Public code's subtract-restore in bf16 does not return to the starting weights."""
    p = params(torch.bfloat16)
    original = {k: v.to(torch.float32) for k, v in p.items()}
    ed = TensorEditor(p, "paper-bf16")
    for i in range(30):
        ed.perturb(member_seed(0, 0, i), sigma=1e-3)
        ed.restore()
    diffs = torch.cat([(p[k].to(torch.float32) - original[k]).flatten() for k in p])
    rms = float(diffs.pow(2).mean().sqrt())
    changed = float((diffs != 0).float().mean())
    assert rms > 1e-6 and changed > 0.05, (rms, changed)
    # the residual concentrates on the large-magnitude (norm ~1.0) weights, where the bf16 step is coarsest
    norm_rms = float((p["norm.weight"].float() - original["norm.weight"]).pow(2).mean().sqrt())
    assert norm_rms > rms


def test_bf16_update_rounds_small_coordinates_away_but_master_keeps_them():
    exact, lossy = params(torch.bfloat16), params(torch.bfloat16)
    ed_exact, ed_lossy = TensorEditor(exact, "fp32-master"), TensorEditor(lossy, "paper-bf16")
    seeds = [member_seed(1, 0, i) for i in range(8)]
    coeffs = [1e-5 * (i - 3.5) for i in range(8)]
    ed_exact.update(seeds, coeffs)
    stats = ed_lossy.update(seeds, coeffs)
    assert stats["changed_fraction"] < 0.9, "tiny bf16 updates round to zero on many coordinates"
    master = ed_exact.master["norm.weight"]
    assert not torch.equal(master, params(torch.bfloat16)["norm.weight"].float()), "fp32 master keeps the update"


def test_paper_bf16_shadow_is_the_fp32_trajectory_of_the_same_updates():
    """The shadow lets drift be split into what the updates intended and what bf16 rounding added."""
    p = params(torch.bfloat16)
    start = {k: v.to(torch.float32) for k, v in p.items()}
    ed = TensorEditor(p, "paper-bf16")
    expected = {k: v.clone() for k, v in start.items()}
    for step in range(3):
        seeds = [member_seed(2, step, i) for i in range(6)]
        coeffs = [1e-4 * (i - 2.5) for i in range(6)]
        for s_, c in zip(seeds, coeffs, strict=True):
            ed.perturb(s_, 1e-3)
            ed.restore()
            for k in expected:
                expected[k] += c * noise(s_, k, expected[k].shape)
        ed.update(seeds, coeffs)
    ideal = ed.ideal_state()
    for k in p:
        assert torch.allclose(ideal[k], expected[k], atol=1e-6), k
        assert not torch.equal(p[k].to(torch.float32), ideal[k]), "bf16 weights differ from the exact trajectory"
    # a checkpoint round trip restores the shadow too
    other = TensorEditor(params(torch.bfloat16), "paper-bf16")
    other.load_master_state(ed.master_state())
    other.load_ideal_state(ideal)
    assert all(torch.equal(other.ideal_state()[k], ideal[k]) for k in p)
    # in fp32-master mode the ideal trajectory is the master itself
    exact = TensorEditor(params(torch.float32), "fp32-master")
    exact.update(seeds, coeffs)
    assert all(torch.equal(exact.ideal_state()[k], exact.master[k]) for k in p)


def test_update_applies_alpha_over_n_sum_z_eps_in_fp32():
    p = params()
    start = {k: v.clone() for k, v in p.items()}
    ed = TensorEditor(p, "fp32-master")
    seeds, coeffs = [11, 22, 33], [0.1, -0.2, 0.05]
    stats = ed.update(seeds, coeffs)
    for k in p:
        expected = start[k] + sum(c * noise(s, k, p[k].shape) for s, c in zip(seeds, coeffs, strict=True))
        assert torch.allclose(p[k], expected, atol=1e-7)
    total = torch.cat([(p[k] - start[k]).flatten() for k in p])
    assert stats["update_norm"] == pytest.approx(float(total.norm()), rel=1e-5)
    assert stats["changed_fraction"] == 1.0


def test_weight_decay_anchored_to_init_pulls_back_toward_theta0():
    p = params()
    theta0 = {k: v.clone() for k, v in p.items()}
    ed = TensorEditor(p, "fp32-master")
    ed.update([5], [0.5])
    moved = sum(float((p[k] - theta0[k]).norm()) for k in p)
    ed.update([], [], decay=0.5, anchor=theta0)
    assert sum(float((p[k] - theta0[k]).norm()) for k in p) == pytest.approx(moved / 2, rel=1e-5)


def test_noise_is_independent_across_tensors_and_members_and_fp32():
    a = noise(7, "a", torch.Size([1000]))
    b = noise(7, "b", torch.Size([1000]))
    c = noise(8, "a", torch.Size([1000]))
    assert a.dtype == torch.float32
    assert torch.equal(a, noise(7, "a", torch.Size([1000]))), "regenerated from the seed"
    assert abs(float(torch.corrcoef(torch.stack([a, b]))[0, 1])) < 0.1
    assert abs(float(torch.corrcoef(torch.stack([a, c]))[0, 1])) < 0.1


def test_perturb_restore_misuse_is_an_error():
    ed = TensorEditor(params(), "fp32-master")
    with pytest.raises(RuntimeError):
        ed.restore()
    ed.perturb(1, 1e-3)
    with pytest.raises(RuntimeError):
        ed.perturb(2, 1e-3)
    with pytest.raises(RuntimeError):
        ed.update([1], [1.0])


# ---- the estimator -----------------------------------------------------------------------------------------------


def es_gradient(theta0: np.ndarray, f, n: int, sigma: float, antithetic: bool = False) -> np.ndarray:
    """Run one ask/tell step on a toy objective through the real editor and return the update direction."""
    cfg = ESConfig(population=n, sigma=sigma, alpha=1.0, antithetic=antithetic)
    p = {"theta": torch.tensor(theta0, dtype=torch.float32)}
    ed = TensorEditor(p, "fp32-master")
    members = ask(cfg, run_seed=3, step=0)
    rewards = []
    for seed, sign in members:
        ed.perturb(seed, sigma, sign)
        rewards.append([f(p["theta"].numpy().astype(np.float64))])
        ed.restore()
    seeds, coeffs = tell(cfg, members, np.array(rewards))
    before = p["theta"].clone()
    ed.update(seeds, coeffs)
    return (p["theta"] - before).numpy()


@pytest.mark.parametrize("antithetic", [False, True])
def test_update_aligns_with_true_gradient_for_large_population(antithetic):
    rng = np.random.default_rng(0)
    target = rng.normal(size=20)
    theta0 = rng.normal(size=20)

    def f(x):  # smooth objective with known gradient 2 (target - x)
        return -float(np.sum((x - target) ** 2))

    step = es_gradient(theta0, f, n=4000, sigma=1e-2, antithetic=antithetic)
    grad = 2 * (target - theta0)
    cos = float(step @ grad / (np.linalg.norm(step) * np.linalg.norm(grad)))
    assert cos > 0.9, cos


def test_update_is_invariant_to_affine_reward_rescaling():
    cfg = ESConfig(population=16, sigma=1e-2, alpha=1e-3)
    members = ask(cfg, 0, 0)
    r = np.random.default_rng(1).random((16, 4))
    _, c1 = tell(cfg, members, r)
    _, c2 = tell(cfg, members, 7.5 * r - 3.0)
    assert np.allclose(c1, c2, atol=1e-9)


def test_fitness_shaping_options():
    x = np.array([0.0, 1.0, 1.0, 3.0])
    z = zscore(x)
    assert z.mean() == pytest.approx(0) and z.std(ddof=0) == pytest.approx(1, rel=1e-6)
    assert np.allclose(zscore(np.ones(4)), 0), "equal rewards give no update (eps avoids 0/0)"
    assert list(centered_ranks(np.array([3.0, 1.0, 2.0]))) == [0.5, -0.5, 0.0]
    grouped = ESConfig(population=2, group_by_prompt=True)
    # prompt 0 favours member 0, prompt 1 favours member 1 equally: per-prompt shaping cancels out
    assert np.allclose(tell(grouped, ask(grouped, 0, 0), np.array([[1.0, 0.0], [0.0, 1.0]]))[1], 0)


def test_antithetic_pairs_share_a_seed_with_opposite_signs():
    cfg = ESConfig(population=6, antithetic=True)
    members = ask(cfg, 0, 0)
    assert [s for s, _ in members[::2]] == [s for s, _ in members[1::2]]
    assert [sign for _, sign in members] == [1.0, -1.0] * 3
    assert len({s for s, _ in members}) == 3


def test_normalisation_options_of_fig_1c():
    """zscore (the paper), centred, or raw rewards: the update's coefficients are α/N times the shaped reward."""
    rewards = np.array([[0.2], [1.0], [0.1], [0.5]])
    base = dict(population=4, alpha=0.4)
    members = ask(ESConfig(**base), 0, 0)
    coeffs = {n: tell(ESConfig(**base, normalization=n), members, rewards)[1] for n in ("zscore", "center", "none")}
    x = rewards[:, 0]
    assert np.allclose(coeffs["none"], 0.1 * x)
    assert np.allclose(coeffs["center"], 0.1 * (x - x.mean()))
    assert np.allclose(coeffs["zscore"], 0.1 * (x - x.mean()) / x.std(ddof=0), rtol=1e-6)
    with pytest.raises(ValueError, match="centred ranks"):
        ESConfig(**base, centered_ranks=True, normalization="none")


def test_two_point_with_n_over_2_directions_spends_one_points_evaluations():
    """Fig. 1(c)'s matched comparison: one-point with N directions and two-point with N/2 directions evaluated at
    ±σε both roll out N perturbed models per update (antithetic: `population` counts evaluations)."""
    one, two = ESConfig(population=8), ESConfig(population=8, antithetic=True)
    m1, m2 = ask(one, 3, 0), ask(two, 3, 0)
    assert len(m1) == len(m2) == 8  # evaluations per update
    assert len({s for s, _ in m1}) == 8 and len({s for s, _ in m2}) == 4  # directions
    # two-point's update: each direction weighted by (z₊ − z₋), the difference estimator
    rewards = np.arange(8.0)[:, None]
    seeds, coeffs = tell(two, m2, rewards)
    z = zscore(rewards[:, 0])
    assert np.allclose(coeffs, two.alpha / 8 * (z[0::2] - z[1::2]))


def test_paper_bf16_keeps_its_fp32_shadow_on_the_host():
    """The shadow is read only for drift and checkpoints: on a GPU it would take 4 bytes per parameter beside the
    engine. The per-member variant adds every member's noise to it and keeps it beside the weights."""
    import torch

    from esbench.es.weights import shadow_device

    gpu = torch.device("cuda", 0)
    assert shadow_device("paper-bf16", gpu) == torch.device("cpu")
    assert shadow_device("paper-bf16-per-member", gpu) == gpu
    assert shadow_device("paper-bf16-per-member", torch.device("cpu")) == torch.device("cpu")


def test_simulated_engine_replicas_go_to_the_host_when_the_gpu_cannot_hold_them(monkeypatch):
    """paper-bf16 `engines: 8` of a 7B model in one process: 7 bf16 replicas (99 GiB) stay beside the weights only
    when the GPU's free memory holds them with a margin (read where the editor lives: the vLLM worker)."""
    import torch

    from esbench.es import weights

    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (40 << 30, 80 << 30))
    assert weights.replica_device(gpu, 30 << 30) == gpu
    assert weights.replica_device(gpu, 39 << 30) == torch.device("cpu")  # within REPLICA_MARGIN of full
    assert weights.replica_device(torch.device("cpu"), 1 << 40) == torch.device("cpu")
