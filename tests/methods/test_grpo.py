"""GRPO through TRL: the paper's Table 14 mapping is complete and exact, and GRPO learns on the tiny task."""

from __future__ import annotations

import json

import pytest

from esbench.methods.grpo_trl import GRPOSettings, grpo_config

# Paper Table 14 (../shared/reference/paper_tables.md). v2 lists KL coefficient 0.001 for both settings; it is not a
# default (kl_coef 0: the tiny suites keep their cells), the paper suites state it.
TABLE_14 = {
    "prompts_per_rollout": 64,  # global batch 64
    "num_generations": 8,  # 8 responses per prompt
    "ppo_minibatch_prompts": 32,  # PPO minibatch 32
    "micro_batch": 2,  # microbatch 2
    "learning_rate": 1.0e-6,
    "temperature": 1.0,
    "clip_epsilon": 0.2,
    "max_completion_length": 2048,
}
# What each Table 14 setting must become in trl.GRPOConfig.
EXPECTED_TRL = {
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 32 * 8 // 2,  # one optimizer update per PPO minibatch of 32 prompts x 8
    "generation_batch_size": 64 * 8,  # one rollout batch = 64 prompts x 8 responses
    "num_generations": 8,
    "learning_rate": 1.0e-6,
    "lr_scheduler_type": "constant",
    "temperature": 1.0,
    "top_p": 1.0,
    "epsilon": 0.2,
    "epsilon_high": 0.2,
    "beta": 0.0,
    "max_completion_length": 2048,
    "scale_rewards": "group",
    "num_iterations": 1,
    "max_steps": 10,
    "loss_type": "grpo",
}


def test_defaults_are_table_14():
    defaults = GRPOSettings()
    for field, value in TABLE_14.items():
        assert getattr(defaults, field) == value, field


def test_table_14_maps_onto_grpo_config_exactly(tmp_path):
    args = grpo_config(GRPOSettings(), 10, str(tmp_path), seed=0, use_cpu=True)
    for field, value in EXPECTED_TRL.items():
        got = getattr(args, field)
        got = getattr(got, "value", got)  # enums (scheduler type)
        assert got == value, (field, got, value)
    assert args.steps_per_generation == 256, "two optimizer updates per 64-prompt rollout"
    hard = grpo_config(GRPOSettings(kl_coef=0.001, max_completion_length=8192), 10, str(tmp_path), 0, True)
    assert hard.beta == 0.001 and hard.max_completion_length == 8192
    assert hard.use_bias_correction_kl is False and args.use_bias_correction_kl is False  # verl's plain k3
    assert hard.model_init_kwargs is None  # TRL's reference at the policy's dtype: the fp32 master's
    assert not args.use_vllm


def test_trls_kl_is_verls_k3_added_to_the_per_token_loss():
    """grpo.py's docstring, pinned on TRL 1.16's source: with beta > 0 the per-token KL is k3 against the reference
    model's log-probs, weighted by the importance ratio only under `use_bias_correction_kl`, and added to the
    per-token loss before its aggregation. Fails if a TRL upgrade changes the form."""
    import inspect

    from trl import GRPOTrainer

    src = " ".join(inspect.getsource(GRPOTrainer._compute_loss).split())
    k3 = "torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1"
    assert k3 in src
    assert "if self.args.use_bias_correction_kl: per_token_kl = per_token_kl * coef_1" in src
    assert "per_token_loss = per_token_loss + self.beta * per_token_kl" in src
    assert src.index("self.beta * per_token_kl") < src.index("(per_token_loss * mask).sum(-1)")


def test_vllm_rollouts_use_trl_colocate_mode_without_importance_sampling(tmp_path):
    """A GPU cell on the vLLM backend: TRL's colocated vLLM rolls out, and the objective stays the HF path's."""
    plain = grpo_config(GRPOSettings(), 10, str(tmp_path), 0, False).to_dict()
    args = grpo_config(GRPOSettings(), 10, str(tmp_path), 0, False, vllm_rollouts=True)
    assert args.use_vllm and args.vllm_mode == "colocate" and args.vllm_importance_sampling_correction is False
    assert args.top_k == 0 and args.min_p is None and args.repetition_penalty == 1.0  # TRL's vLLM sampler: neutral
    changed = {k for k, v in args.to_dict().items() if plain.get(k) != v}
    assert changed == {"use_vllm", "vllm_importance_sampling_correction", "vllm_gpu_memory_utilization"} - (
        {"vllm_gpu_memory_utilization"} if plain["vllm_gpu_memory_utilization"] == 0.25 else set()
    )


# every esbench GRPO field and a changed value; reward values act on the reward function, not on GRPOConfig
CHANGES = {
    "prompts_per_rollout": 32,
    "num_generations": 4,
    "ppo_minibatch_prompts": 16,
    "micro_batch": 4,
    "learning_rate": 2e-6,
    "temperature": 0.7,
    "top_p": 0.9,
    "clip_epsilon": 0.3,
    "kl_coef": 0.01,
    "max_completion_length": 512,
    "loss_type": "dr_grpo",
    "scale_rewards": "none",
    "weight_decay": 0.1,
    "max_grad_norm": 0.5,
    "checkpoint_every": 3,
}


def test_no_setting_is_silently_dropped(tmp_path):
    """Changing any field changes the TRL config: a field that stops reaching TRL fails here."""
    assert set(CHANGES) == set(GRPOSettings.model_fields) - {"reward_correct", "reward_format"}
    base = grpo_config(GRPOSettings(), 10, str(tmp_path), 0, True).to_dict()
    for field, value in CHANGES.items():
        changed = grpo_config(GRPOSettings(**{field: value}), 10, str(tmp_path), 0, True).to_dict()
        assert changed != base, f"{field} does not reach trl.GRPOConfig"


def test_inconsistent_batch_shapes_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="multiple of ppo_minibatch_prompts"):
        grpo_config(GRPOSettings(prompts_per_rollout=48, ppo_minibatch_prompts=32), 1, str(tmp_path), 0, True)


class _BosTokenizer:
    """Llama-3-like: adds <bos> unless told not to; the chat template already wrote it into the text."""

    def __call__(self, text, add_special_tokens=True):
        ids = [0] if text.startswith("<bos>") else []
        rest = text.removeprefix("<bos>")
        ids += [1 + (ord(c) % 50) for c in rest]
        return {"input_ids": ([0] if add_special_tokens else []) + ids}

    def decode(self, ids):
        return "".join("<bos>" if i == 0 else "?" for i in ids)


def test_trl_prompt_removes_a_bos_that_tokenisation_would_add_again():
    from esbench.methods.grpo_trl import trl_prompt

    tok = _BosTokenizer()
    templated = "<bos>system: reason step by step\nuser: 2+2?\nassistant:"
    fixed = trl_prompt(templated, tok)
    assert fixed == templated.removeprefix("<bos>")
    # what TRL will feed the model equals what ES and lm-eval feed it (the template's tokens, one BOS)
    assert tok(fixed)["input_ids"] == tok(templated, add_special_tokens=False)["input_ids"]
    plain = "Q 1+2=?\n"  # no BOS in the text: nothing to strip
    assert trl_prompt(plain, tok) == plain


def _checkpoint(out, step, complete=True, state='{"global_step": 0}'):
    from esbench.methods.grpo_trl import mark_complete

    d = out / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "trainer_state.json").write_text(state)
    if complete:
        mark_complete(d, step)
    return d


def test_a_half_written_checkpoint_is_never_resumed_from(tmp_path):
    from esbench.methods.grpo_trl import last_complete_checkpoint

    out = tmp_path / "grpo"
    assert last_complete_checkpoint(out) is None
    _checkpoint(out, 2)
    ten = _checkpoint(out, 10)
    _checkpoint(out, 12, complete=False, state="")  # killed while trainer_state.json was being written
    _checkpoint(out, 14, complete=False)  # every file there, killed before on_save
    (out / "checkpoint-x").mkdir()  # not a checkpoint name: left alone
    assert last_complete_checkpoint(out) == ten
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-10", "checkpoint-2", "checkpoint-x"]
    only_bad = tmp_path / "bad"
    _checkpoint(only_bad, 4, complete=False)
    assert last_complete_checkpoint(only_bad) is None and not (only_bad / "checkpoint-4").exists()


def _train_grpo(workdir, updates):
    from esbench.backends.hf import HFBackend
    from esbench.methods import TrainContext, registry
    from esbench.models import load_model
    from esbench.rewards import Reward
    from esbench.tasks import get_task

    cls = registry.get("grpo")
    cfg = cls.Config(
        prompts_per_rollout=4,
        num_generations=4,
        ppo_minibatch_prompts=4,
        micro_batch=16,
        learning_rate=1e-4,
        max_completion_length=24,
        checkpoint_every=2,
    )
    task = get_task("tiny_arith")
    loaded = load_model("builtin:tiny")
    backend = HFBackend(loaded.model, loaded.tokenizer, device="cpu")
    ctx = TrainContext(seed=0, workdir=workdir, log_path=workdir / "train.jsonl", prompt=task.prompt, backend=backend)
    cls().train(task.rows("train", 16), Reward(task), updates, cfg, ctx)
    return {k: v.detach().clone() for k, v in backend.parameters().items()}, ctx.log_path.read_text()


def test_resume_after_a_kill_mid_save_matches_the_uninterrupted_run(tmp_path, tiny_model_dir):
    """The state a SIGKILL during `_save_checkpoint` leaves: the newest checkpoint exists, its state file empty."""
    import torch

    ref_weights, ref_log = _train_grpo(tmp_path / "clean", 4)
    out = tmp_path / "clean" / "grpo"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    (out / "checkpoint-4" / "trainer_state.json").write_text("")
    (out / "checkpoint-4" / "esbench-complete.json").unlink()
    weights, log = _train_grpo(tmp_path / "clean", 4)  # resumes from checkpoint-2 and redoes updates 2 and 3
    assert log == ref_log
    assert all(torch.equal(weights[k], ref_weights[k]) for k in ref_weights)


GRPO_DTYPE_SUITE = """\
name: grpo-{dtype}
models: {{tiny: {{path: builtin:tiny, dtype: {dtype}}}}}
datasets: {{arith: {{task: tiny_arith, size: 8}}}}
methods:
  grpo: {{method: grpo, prompts_per_rollout: 4, num_generations: 4, ppo_minibatch_prompts: 4, micro_batch: 16,
          learning_rate: 1.0e-6, max_completion_length: 24}}
budgets: [3]
seeds: [0]
eval: {{tasks: [tiny_arith], limit: 2, n: 1, k: [1], temperature: 1.0, max_new_tokens: 24, greedy: false,
        entropy: false}}
"""


def test_grpo_on_a_bf16_model_keeps_its_updates_in_an_fp32_master(tmp_path, tiny_model_dir):
    """Paper setting lr 1e-6 on a bf16 model: pure-bf16 AdamW would round nearly every update away. With the fp32
    master (verl's mixed precision) the drift is of the same order as the fp32 cell's, and evaluation is in bf16."""
    from esbench.cli import main

    drift = {}
    for dtype in ("bfloat16", "float32"):
        suite = tmp_path / f"{dtype}.yaml"
        suite.write_text(GRPO_DTYPE_SUITE.format(dtype=dtype))
        assert main(["run", str(suite), "--out", str(tmp_path / dtype)]) == 0
        (path,) = (tmp_path / dtype).glob("*/*/record.json")
        rec = json.loads(path.read_text())
        drift[dtype] = rec["drift"].get("master", rec["drift"])["relative_l2"]  # the master's (the bf16 cell's)
        assert rec["provenance"]["backend"]["dtype"] == dtype, "evaluated at the suite's dtype"
        expected = "fp32-master, bfloat16 autocast" if dtype == "bfloat16" else "fp32-master"
        assert rec["train"]["precision"] == expected
    assert drift["float32"] > 0
    assert drift["bfloat16"] >= 0.5 * drift["float32"], drift


def test_trls_group_advantage_is_eq3s_times_the_documented_constant():
    """The deviation in grpo.py's docstring, pinned: TRL's group SD has ddof 1, Eq. 3's population SD ddof 0, so
    TRL's advantages are Eq. 3's times √((G−1)/G) up to TRL's 1e-4. Fails if a TRL upgrade changes either."""
    import math

    import torch
    from trl.trainer.grpo_trainer import nanstd

    g = 8
    rewards = torch.tensor([1.0, 0.1, 0.0, 1.0, 1.0, 0.1, 0.0, 0.0])
    centred = rewards - rewards.mean()
    trl_adv = centred / (nanstd(rewards.view(1, g), dim=1) + 1e-4)
    eq3_adv = centred / rewards.std(correction=0)
    ratio = trl_adv / eq3_adv
    assert torch.allclose(ratio, torch.full_like(ratio, math.sqrt((g - 1) / g)), rtol=1e-3)
