"""The subtraction diagnostic (Table 13) on the tiny model: it measures without training, pools the observations
App. E counts, and shows the paper's ordering (fixed-rollout objectives correlate far better than rewards of
regenerated rollouts, and less so as σ grows)."""

from __future__ import annotations

import json

import pytest

from esbench.backends.hf import HFBackend
from esbench.methods import TrainContext
from esbench.methods.subtraction import ALL_OBJECTIVES, Subtraction, SubtractionConfig
from esbench.models import load_model
from esbench.rewards import Reward
from esbench.tasks import get_task


@pytest.fixture(scope="module")
def measured(tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("subtraction")
    loaded = load_model(str(tiny_model_dir))
    backend = HFBackend(loaded.model, loaded.tokenizer, device="cpu", cpu_threads=2)
    task = get_task("tiny_arith")
    ctx = TrainContext(seed=0, workdir=tmp, log_path=tmp / "train.jsonl", prompt=task.prompt, backend=backend)
    # 32 tokens reach the tiny model's "#### answer" line (~30 characters). At 24 most rollouts stop before it: the
    # rewards are nearly all 0, and the independent-seed X₊, X₀, X₋ can agree exactly by chance (κ_base = 0)
    cfg = SubtractionConfig(
        sigmas=[0.001, 0.01], prompts=4, seeds=3, fixed_samples=2, ce_prompts=4, temperature=1.0, max_new_tokens=32
    )
    before = backend.state_hash()
    result = Subtraction().train(task.rows("train", 16), Reward(task), 2, cfg, ctx)
    return result, backend.state_hash() == before, tmp


def test_it_measures_without_training(measured):
    result, unchanged, _ = measured
    assert unchanged, "fp32-master restores: the weights after the diagnostic are the base's, bit for bit"
    assert result.updates == 0 and result.summary["directions"] == 2


def test_rows_pool_the_observations_app_e_counts(measured):
    result, _, tmp = measured
    rows = result.summary["subtraction"]
    assert [(r["sigma"], r["objective"]) for r in rows] == [(s, o) for s in (0.001, 0.01) for o in ALL_OBJECTIVES]
    expected = {"reward-common": 4 * 3 * 2, "reward-independent": 4 * 3 * 2, "cross-entropy": 4 * 2}
    for r in rows:
        assert r["observations"] == expected.get(r["objective"], 4 * 2 * 2)  # fixed: prompts x samples x directions
    logged = [json.loads(x) for x in (tmp / "train.jsonl").read_text().splitlines()]
    assert len(logged) == len(rows) and all(len(x["x_plus"]) == x["observations"] for x in logged)


def test_fixed_rollouts_correlate_better_and_less_so_as_sigma_grows(measured):
    result, _, _ = measured
    by = {(r["sigma"], r["objective"]): r for r in result.summary["subtraction"]}
    small, large = by[(0.001, "fixed-logprob")], by[(0.01, "fixed-logprob")]
    assert small["corr_plus_zero"] > 0.99 and small["kappa_base"] < 0.05  # subtraction removes nearly all variance
    assert large["corr_plus_zero"] < small["corr_plus_zero"] and large["kappa_base"] > small["kappa_base"]
    indep = by[(0.001, "reward-independent")]
    if "undefined" not in indep:  # fresh samples: little correlation, subtraction does not help (κ near or above 1)
        assert indep["kappa_base"] > small["kappa_base"]
