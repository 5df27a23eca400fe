"""Drift, parameter groups, bf16 steps and magnitude thresholding on constructed weights."""

from __future__ import annotations

import pytest
import torch

from esbench.metrics.drift import bf16_steps, drift, group_of, step_multiple_share, threshold

NAMES = {
    "model.embed_tokens.weight": "embeddings",
    "lm_head.weight": "lm_head",
    "model.layers.0.self_attn.q_proj.weight": "attention",
    "model.layers.0.self_attn.q_proj.bias": "biases",
    "model.layers.0.mlp.down_proj.weight": "mlp",
    "model.layers.0.input_layernorm.weight": "norms",
    "model.norm.weight": "norms",
}


def test_groups_follow_table_4_naming():
    assert {n: group_of(n) for n in NAMES} == NAMES


def _weights(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(8, 16, generator=g) for n in NAMES}


def test_drift_of_a_known_perturbation():
    start = _weights()
    delta = {n: torch.zeros_like(t) for n, t in start.items()}
    delta["model.layers.0.mlp.down_proj.weight"][0, :4] = torch.tensor([0.3, -0.4, 0.0, 0.0])  # norm 0.5
    delta["model.layers.0.input_layernorm.weight"][1, 1] = 1.2  # the largest coordinate
    end = {n: start[n] + delta[n] for n in start}
    out = drift(start, end, top=3)
    base = sum(float(t.pow(2).sum()) for t in start.values()) ** 0.5
    assert out["l2"] == pytest.approx((0.25 + 1.44) ** 0.5, rel=1e-5)
    assert out["relative_l2"] == pytest.approx(out["l2"] / base, rel=1e-5)
    assert out["groups"]["mlp"]["share"] == pytest.approx(0.25 / 1.69, rel=1e-4)
    assert out["groups"]["norms"]["share"] == pytest.approx(1.44 / 1.69, rel=1e-4)
    assert out["groups"]["attention"]["share"] == 0.0
    assert [r["group"] for r in out["top"]] == ["norms", "mlp", "mlp"]
    assert out["top"][0]["delta"] == pytest.approx(1.2, rel=1e-5)
    assert out["max_abs_delta"] == pytest.approx(1.2, rel=1e-5)
    assert out["changed_fraction"] == pytest.approx(3 / (16 * 8 * len(NAMES)))
    assert sum(g["top"] for g in out["groups"].values()) == 3


def test_rounding_share_splits_drift_from_its_ideal_trajectory():
    start = _weights()
    end = {n: t + 0.01 for n, t in start.items()}
    assert drift(start, end, ideal=end)["rounding_share"] == pytest.approx(0.0)
    assert drift(start, end, ideal=start)["rounding_share"] == pytest.approx(1.0, rel=1e-5)


def test_bf16_steps_and_step_multiples():
    theta0 = torch.tensor([1.0, 0.75, 3.0, 1.0])
    theta = torch.tensor([1.0 + 3 * 2**-7, 0.75 - 2**-8, 3.0 + 0.5 * 2**-6, 1.0 + 1e-4])
    steps = bf16_steps(theta0, theta)
    assert steps.tolist()[:3] == pytest.approx([3.0, -1.0, 0.5])
    rows = [{"bf16_steps": s} for s in steps.tolist()]
    assert step_multiple_share(rows) == pytest.approx(0.5)  # 3 and -1 steps; half a step and 1e-4 are not


def test_threshold_is_eq16_ablating_changed_coordinates_up_to_tau():
    t = 2.0**-10  # dyadic values: the differences are exact in fp32, so "at tau" is unambiguous
    start = {"a.weight": torch.zeros(2, 3), "b.weight": torch.ones(4)}
    end = {
        "a.weight": torch.tensor([[t / 2, -2 * t, t], [0.0, -0.875 * t, 0.5]]),
        "b.weight": torch.ones(4) + torch.tensor([t, -t, t / 16, 0.0]),
    }
    kept, stats = threshold(start, end, t)
    # kept: |Δ| > τ strictly (Eq. 16 ablates 0 < |Δ| ≤ τ); exactly τ is ablated
    assert torch.equal(kept["a.weight"], torch.tensor([[0.0, -2 * t, 0.0], [0.0, 0.0, 0.5]]))
    assert torch.equal(kept["b.weight"], torch.tensor([1.0, 1.0, 1.0, 1.0]))
    # 8 of 10 coordinates changed; 6 of them have |Δ| ≤ τ: s_τ = 6/8, not 8/10 (unchanged ones are excluded)
    assert stats["sparsity_pct"] == pytest.approx(100 * 6 / 8)
    assert stats["changed_pct"] == pytest.approx(80.0) and stats["dropped_pct"] == pytest.approx(60.0)
    full = drift(start, end)["relative_l2"]
    assert 0 < stats["relative_l2"] < full


def test_drift_at_a_saved_dtype_is_that_of_the_cast_weights():
    """`dtype`: the drift of the weights as a bf16 checkpoint holds them, against θ₀ as loaded in bf16 (Table 4's
    GRPO figures): an fp32 change below half a bf16 step is no change, and max |Δθ| is a whole number of steps."""
    theta0 = torch.tensor([1.0, 0.75, 3.0, 0.5, 0.3])  # bf16(0.3) = 0.30078125: θ₀ as loaded differs from fp32
    master = theta0 + torch.tensor([2**-10, 2**-8 * 0.6, -(2**-6) * 1.2, 0.0, 1e-5])
    start, end = {"model.norm.weight": theta0.to(torch.bfloat16)}, {"model.norm.weight": master}
    out = drift(start, end, dtype=torch.bfloat16)
    a, b = theta0.to(torch.bfloat16).float(), master.to(torch.bfloat16).float()
    d = b - a  # by hand: 1.0 + 2^-10 rounds to 1.0; 0.75 + 0.6 steps to 0.75 + 1 step; 3.0 − 1.2 steps to −1 step
    assert d.tolist() == [0.0, 2**-8, -(2**-6), 0.0, 0.0]
    assert out["changed_fraction"] == pytest.approx(2 / 5)
    assert out["max_abs_delta"] == 2**-6 == float(torch.tensor(out["max_abs_delta"]).to(torch.bfloat16))
    assert out["relative_l2"] == pytest.approx(float(d.norm() / a.norm()), rel=1e-6)
    assert out["top"][0]["bf16_steps"] == pytest.approx(-1.0)
    fp32 = drift(start, end)  # without `dtype`: the master's drift, where all but the 0.5 coordinate moved
    assert fp32["changed_fraction"] == pytest.approx(4 / 5) and fp32["max_abs_delta"] != out["max_abs_delta"]
