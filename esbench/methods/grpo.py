"""`grpo`: Group Relative Policy Optimization through TRL's `GRPOTrainer` (pinned trl 1.16).

Paper: arXiv 2608.27351 compares ES against GRPO (Shao et al. 2024, DeepSeekMath) trained with the settings of its
Table 14; esbench does not write a GRPO trainer, it maps those settings onto `trl.GRPOConfig` (ADR 0006).

Table 14 -> GRPOConfig (v2: both settings list clip 0.2 and KL coefficient 0.001):

- global batch 64 prompts -> `prompts_per_rollout`; `generation_batch_size = prompts_per_rollout * G`
- 8 responses per prompt -> `num_generations` (G) -> `num_generations`
- PPO minibatch 32 prompts -> `ppo_minibatch_prompts`; `gradient_accumulation_steps = minibatch * G / micro`
- microbatch 2 sequences -> `micro_batch` -> `per_device_train_batch_size`
- lr 1.0e-6 -> `learning_rate` (constant schedule, no warm-up)
- T = 1.0 -> `temperature` (top_p 1.0)
- clip 0.2 -> `clip_epsilon` -> `epsilon` and `epsilon_high` (symmetric clip)
- KL coefficient 0.001 -> `kl_coef` -> `beta` (default 0: a suite states it; the paper suites do). The form is not
  stated (Eq. 4 has no KL term); esbench uses verl's default, `use_kl_loss` with `kl_loss_type: low_var_kl`: the k3
  estimator exp(r) − r − 1, r = log π_ref − log π_θ per response token, added to the per-token loss with weight β
  and aggregated with it, against a frozen reference. TRL 1.16 with `beta > 0` computes exactly that k3 and adds
  β·k3 to the per-token loss before its aggregation (`GRPOTrainer._compute_loss`), against `ref_model`, a second
  model it builds in `__init__` and never updates (`sync_ref_model` off). Where TRL would differ, esbench sets it
  to verl's: `use_bias_correction_kl=False` (TRL's default multiplies k3 by the importance ratio, which changes its
  gradient even on-policy); the reference is the weights this stage starts from (verl's `ref` loads the actor's
  initial weights: the base model for GRPO, ES's result in ES→GRPO), not TRL's hub id without revision
  (`reference_weights`). TRL holds the reference at the policy's dtype, the fp32 master's (an exact widening of the
  starting weights), under the same autocast, so the KL starts at 0 up to the rounding between TRL's training and
  no-grad forwards (tiny model: 5e-6 after ES, against 2e-4 with TRL's own reference, the base model). The cost:
  one more model copy, 4 bytes per parameter (6 GB at 1.5B, 28 GB at 7B), and one more forward per rollout batch.
  A bf16 reference (verl's reference worker dtype) would halve the copy but not compute like the autocast policy
  (fp32 norms and residual stream): on the tiny model, with every advantage 0, it gave a KL of 9e-6 at the start
  and 2e-3 one Adam step later, where the fp32 one gave 0 and 0. verl also clamps k3 to [−10, 10]; TRL does not,
  which matters only where |log π_ref − log π_θ| > 2.5 on a token.
- response limit 2048 / 8192 -> `max_completion_length`
- group-relative advantage -> `scale_rewards = "group"` (mean and std within each group)
- one pass over each rollout -> `num_iterations = 1`
- verl's mixed precision -> a bf16 (fp16) model is trained as an fp32 master with `bf16=True` (`fp16=True`) autocast;
  the weights handed to drift are the fp32 master's, and evaluation casts them to the suite's dtype like every cell.
  The in-training probe (`eval.probe`) measures a copy of the master at the suite's dtype (`probes_at`), as ES's
  probes and the evaluation see their weights, and after training the model is handed back without the forwards TRL
  and accelerate set on it (`plain_forward`), so that evaluation and a later stage run the plain model at its dtype

Where TRL has no exact equivalent: the paper does not name its loss aggregation; esbench defaults to
`loss_type: grpo` (per-sequence length normalisation, the original GRPO objective) and lets a suite choose
TRL's others. One optimizer update = one PPO minibatch, so a 64-prompt rollout with minibatch 32 gives two
updates, and the suite budget counts those updates (TRL's `max_steps`).

A documented deviation: the paper's Eq. 3 divides by the group's population SD (ddof 0); TRL's `scale_rewards:
group` divides by the sample SD (ddof 1), and TRL offers no ddof option. With G responses per group the two
advantages differ by the constant factor √(G/(G−1)) (1.069 at G = 8), apart from TRL's 1e-4 in the denominator.
Every advantage of every group is scaled alike, so the direction of each gradient is unchanged; only its length is,
by 6.9 %, which AdamW's per-coordinate normalisation removes up to its ε and which the gradient clip (when it binds)
sees. esbench keeps TRL's code path rather than patching TRL (ADR 0006); `test_grpo` pins the factor.

On the vLLM backend on a GPU, TRL's colocated vLLM engine rolls out (`trl_vllm_rollouts`). It loads the cell's own
weights from a local folder, never a hub revision (`rollout_weights`); the backend's engine is shut down while TRL
trains and restarts from the trained weights (`VLLMBackend.engine_released`); and TRL's seeding is redone after its
engine start, which reseeds the process with 0 (`reseed_after_engine_start`). `tests/methods/test_grpo_vllm.py`.
"""

from __future__ import annotations

import shutil
from typing import Any

from esbench.backends import engine_context
from esbench.methods import Method, TrainContext, TrainResult
from esbench.methods.grpo_trl import (
    GRPOSettings,
    close_trl_engine,
    declared_eos,
    grpo_config,
    last_complete_checkpoint,
    plain_forward,
    probes_at,
    reference_weights,
    reseed_after_engine_start,
    rollout_weights,
    save_start,
    stage_result,
    train_log,
    trl_prompt,
    trl_vllm_rollouts,
)
from esbench.rewards import Reward

__all__ = ["GRPO", "GRPOSettings"]


class GRPO(Method):
    Config = GRPOSettings

    @classmethod
    def prompts_per_update(cls, config: GRPOSettings) -> int:
        return config.ppo_minibatch_prompts

    def train(
        self, train_data: list[dict[str, str]], reward: Reward, budget: int, config: GRPOSettings, ctx: TrainContext
    ) -> TrainResult:
        import datasets
        import torch
        from trl import GRPOTrainer

        if ctx.processes > 1:  # a node's GPUs through FSDP2 (gloo processes on a CPU)
            from esbench.methods.grpo_processes import train_in_processes

            return train_in_processes(train_data, reward, budget, config, ctx, ctx.processes)
        backend = ctx.backend
        model = backend.model  # TRL trains a transformers model in place
        tokenizer = backend.tokenizer

        reward = reward.with_values(config.reward_correct, config.reward_format)
        rows = [{"prompt": trl_prompt(ctx.prompt(r), tokenizer), "answer": r["answer"]} for r in train_data]
        dataset = datasets.Dataset.from_list(rows)

        def verifier_reward(prompts: list[str], completions: list[str], answer: list[str], **_: Any) -> list[float]:
            return [reward(c, a) for c, a in zip(completions, answer, strict=True)]

        out = ctx.workdir / "grpo"
        last = last_complete_checkpoint(out)
        start = int(last.name.rsplit("-", 1)[1]) if last else 0
        ctx.rewind(start)

        use_cpu = backend.device.type == "cpu"
        rollout_engine = "vllm" if trl_vllm_rollouts(backend) else "hf"
        # A vLLM backend's own engine is shut down while TRL trains (and, on a GPU, while TRL's colocated engine
        # lives) and restarted afterwards from the trained weights; see `VLLMBackend.engine_released`.
        with backend.engine_released() as weights:
            # verl's mixed precision: a half-precision model trains as an fp32 master with autocast compute in its
            # dtype. Pure-bf16 AdamW at lr 1e-6 would round most updates away (a GRPO row that sits on Base).
            compute = str(backend.dtype).removeprefix("torch.")
            reference = None  # the KL reference (beta > 0): the weights this stage starts from, saved at their dtype
            if config.kl_coef > 0:
                reference = weights if weights is not None else save_start(backend, ctx.workdir / "grpo-reference")
            if compute != "float32":
                backend.cast(torch.float32)
            args = grpo_config(
                config,
                budget,
                str(out),
                ctx.seed,
                use_cpu,
                compute=compute,
                vllm_rollouts=rollout_engine == "vllm",
                stop_token_ids=backend.stop_token_ids,
                # TRL tokenises string prompts with special tokens added: measured the same way
                max_model_length=engine_context(
                    max((len(tokenizer(r["prompt"])["input_ids"]) for r in rows), default=0),
                    config.max_completion_length,
                    model.config,
                ),
            )
            model.train()
            with (
                rollout_weights(model, weights if rollout_engine == "vllm" else None),
                reference_weights(model, reference),
                declared_eos(model, backend.stop_token_ids),
            ):
                trainer = GRPOTrainer(
                    model=model,
                    reward_funcs=verifier_reward,
                    args=args,
                    train_dataset=dataset,
                    processing_class=tokenizer,
                    callbacks=[train_log(ctx.log, ctx.maybe_probe, out, budget)],
                )
            if reference is not None and reference != weights:
                shutil.rmtree(reference, ignore_errors=True)  # TRL holds the reference model in memory now
            if rollout_engine == "vllm":
                reseed_after_engine_start(args.seed)
            from transformers.trainer_callback import PrinterCallback

            trainer.remove_callback(PrinterCallback)  # metrics go to train.jsonl, not stdout
            try:
                # TRL's rollouts must not inherit the folder's generation_config.json; probes see the suite's dtype
                with backend.neutral_decoding(), probes_at(ctx, getattr(torch, compute)):
                    trainer.train(resume_from_checkpoint=str(last) if last else None)
                if trainer.model is not model:
                    raise RuntimeError(
                        "TRL returned a different model object; the backend would not see the trained weights"
                    )
            finally:
                close_trl_engine(trainer)
                del trainer  # its optimizer state too, before the backend's engine starts again
                plain_forward(model)
            model.eval()
        result = stage_result(config, budget, ctx, compute, rollout_engine)
        if ctx.probe is not None:
            result.summary["probe_dtype"] = compute
        return result
