"""The TRL side of the `grpo` recipe (`esbench.methods.grpo`): its settings, their mapping onto `trl.GRPOConfig`, and
the glue around `GRPOTrainer` that the one-process stage and the multi-process one (`grpo_processes`) share.

Separate from the recipe so that both stages import it from below: the recipe reads top to bottom, and neither
stage imports the other's module for a helper. The mapping itself and every deviation from TRL are documented in
`esbench.methods.grpo`'s docstring; each helper here says why it exists.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from esbench.backends import Backend
from esbench.limits import MAX_COUNT, MAX_NEW_TOKENS, MAX_UPDATES
from esbench.methods import TrainContext, TrainResult
from esbench.records import atomic_write_json, read_jsonl

if TYPE_CHECKING:
    import torch


class GRPOSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompts_per_rollout: int = Field(64, gt=0, le=MAX_COUNT, description="Prompts per generation batch (paper: 64).")
    num_generations: int = Field(8, ge=2, le=4096, description="Responses per prompt (paper: 8).")
    ppo_minibatch_prompts: int = Field(32, gt=0, le=MAX_COUNT, description="Prompts per optimizer update (paper: 32).")
    micro_batch: int = Field(2, gt=0, le=MAX_COUNT, description="Sequences per forward/backward pass (paper: 2).")
    learning_rate: float = Field(1e-6, gt=0, le=1, description="AdamW learning rate, constant (paper: 1e-6).")
    temperature: float = Field(1.0, gt=0, le=100, description="Rollout temperature (paper: 1.0).")
    top_p: float = Field(1.0, gt=0, le=1, description="Rollout nucleus threshold.")
    clip_epsilon: float = Field(0.2, gt=0, le=10, description="PPO clip range (paper: 0.2).")
    kl_coef: float = Field(0.0, ge=0, le=100, description="β of the k3 KL term vs the stage's start (paper: 0.001).")
    max_completion_length: int = Field(
        2048, gt=0, le=MAX_NEW_TOKENS, description="Response limit (paper: 2048 easy, 8192 hard)."
    )
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = Field("grpo", description="TRL loss aggregation.")
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="Advantage normalisation.")
    weight_decay: float = Field(0.0, ge=0, le=10, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, le=1e6, description="Gradient clipping norm.")
    reward_correct: float = Field(1.0, description="Reward for a correct answer (same verifier as ES).")
    reward_format: float = Field(0.1, description="Reward for an extracted but wrong answer.")
    checkpoint_every: int = Field(
        10, gt=0, le=MAX_UPDATES, description="Trainer checkpoint every k updates (for resume)."
    )


def grpo_config(
    cfg: GRPOSettings,
    budget: int,
    output_dir: str,
    seed: int,
    use_cpu: bool,
    compute: str = "float32",
    vllm_rollouts: bool = False,
    stop_token_ids: Sequence[int] = (),
    max_model_length: int | None = None,
    processes: int = 1,
    fsdp_layers: Sequence[str] = (),
):
    """The `trl.GRPOConfig` for `cfg` (see the table in the module docstring). `compute` is the autocast dtype over
    fp32 master weights (`bfloat16` or `float16` for a half-precision model; `float32`: no autocast).

    `processes` > 1 (`esbench.methods.grpo_processes`): the same global batch over that many processes, each with
    micro-batches of `micro_batch` and a 1/processes share of the accumulation steps (TRL's `generation_batch_size`
    is global). `fsdp_layers` (GPU): FSDP2 full shard wrapping those decoder-layer classes, with FSDP's activation
    checkpointing in place of the Trainer's, sharded checkpoints, and the reference built unplaced.

    `vllm_rollouts`: TRL's colocated vLLM generates the rollouts (a cell on the vLLM backend on a GPU), with the
    importance-sampling correction off so the objective is the HF path's. TRL samples with its own neutral
    `SamplingParams` (top-k 0, min-p 0, repetition penalty 1). `ESBENCH_TRL_VLLM_MEMORY` sets its GPU share.
    `stop_token_ids` (the backend's stop set) joins those `SamplingParams`; TRL's HF rollouts get it through
    `declared_eos`. `max_model_length` bounds the colocated engine's context (`esbench.backends.engine_context`).
    """
    from trl import GRPOConfig

    from esbench.memory import trl_engine_share

    g = cfg.num_generations
    if (cfg.ppo_minibatch_prompts * g) % cfg.micro_batch:
        raise ValueError("ppo_minibatch_prompts * num_generations must be divisible by micro_batch")
    if (cfg.ppo_minibatch_prompts * g) % (cfg.micro_batch * processes):
        raise ValueError(
            f"ppo_minibatch_prompts * num_generations ({cfg.ppo_minibatch_prompts * g}) must be divisible by "
            f"micro_batch * GRPO processes ({cfg.micro_batch} x {processes})"
        )
    sharded: dict[str, Any] = {}
    if fsdp_layers:
        sharded = {
            "fsdp": True,
            "fsdp_config": {
                "version": 2,
                "transformer_layer_cls_to_wrap": list(fsdp_layers),
                "state_dict_type": "SHARDED_STATE_DICT",  # a full optimizer state would gather 8P bytes on rank 0
                "activation_checkpointing": True,
                "reshard_after_forward": True,
                "cpu_ram_efficient_loading": False,
            },
            "gradient_checkpointing": False,  # FSDP's own; both at once is refused (transformers trainer.py)
            "model_init_kwargs": {"device_map": None},  # TRL's reference: built unplaced, then sharded
        }
    if cfg.prompts_per_rollout % cfg.ppo_minibatch_prompts:
        raise ValueError("prompts_per_rollout must be a multiple of ppo_minibatch_prompts")
    return GRPOConfig(
        output_dir=output_dir,
        max_steps=budget,
        per_device_train_batch_size=cfg.micro_batch,
        gradient_accumulation_steps=cfg.ppo_minibatch_prompts * g // (cfg.micro_batch * processes),
        generation_batch_size=cfg.prompts_per_rollout * g,
        num_generations=g,
        num_iterations=1,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        epsilon=cfg.clip_epsilon,
        epsilon_high=cfg.clip_epsilon,
        beta=cfg.kl_coef,
        use_bias_correction_kl=False,  # verl's k3, unweighted (TRL's default weights it by the importance ratio)
        max_completion_length=cfg.max_completion_length,
        loss_type=cfg.loss_type,
        scale_rewards=cfg.scale_rewards,
        seed=seed,
        data_seed=seed,
        use_cpu=use_cpu,
        bf16=compute == "bfloat16",
        fp16=compute == "float16",
        report_to="none",
        logging_steps=1,
        save_strategy="steps",
        save_steps=cfg.checkpoint_every,
        save_only_model=False,
        save_total_limit=2,
        disable_tqdm=True,
        remove_unused_columns=False,
        **(
            {
                "use_vllm": True,
                "vllm_mode": "colocate",
                "vllm_importance_sampling_correction": False,
                "vllm_gpu_memory_utilization": trl_engine_share(),  # the memory plan's (esbench.memory)
                **({"vllm_max_model_length": max_model_length} if max_model_length else {}),
                **({"generation_kwargs": {"stop_token_ids": list(stop_token_ids)}} if stop_token_ids else {}),
            }
            if vllm_rollouts
            else {}
        ),
        **sharded,
    )


def stage_result(config: GRPOSettings, budget: int, ctx: TrainContext, compute: str, engine: str) -> TrainResult:
    """What a GRPO stage reports, in one process or several (`grpo_processes`): its precision, rollout engine and
    KL form, and the rollouts and generated tokens counted from train.jsonl."""
    per_update = config.ppo_minibatch_prompts * config.num_generations
    logged = read_jsonl(ctx.log_path, missing_ok=True)
    summary = {
        "precision": "fp32-master" + (f", {compute} autocast" if compute != "float32" else ""),
        "rollout_engine": engine,
    }
    if config.kl_coef > 0:
        summary["kl"] = f"k3, beta {config.kl_coef}, against the stage's starting weights ({compute}, held in fp32)"
    return TrainResult(
        updates=budget,
        summary=summary,
        rollouts=budget * per_update,
        generated_tokens=int(sum(r.get("completion_length") or 0 for r in logged) * per_update),
    )


def train_log(log: Callable[[dict[str, Any]], None], probe: Callable[..., None] | None, out: Path, budget: int):
    """The Trainer callback of a GRPO stage: one train.jsonl row per optimizer update with the metrics the paper's
    analyses need, the checkpoint marker, and the in-training probe. Built by the in-process stage and by rank 0 of
    a multi-process one (`grpo_processes`)."""
    from transformers import TrainerCallback

    class TrainLog(TrainerCallback):
        tokens_seen = 0

        def on_log(self, args, state, control, logs=None, **kw):
            if not logs or "reward" not in logs:
                return
            row = {
                "update": state.global_step - 1,
                "reward_mean": logs["reward"],
                "reward_std": logs.get("reward_std"),
                "entropy": logs.get("entropy"),
                "kl": logs.get("kl"),
                "clip_ratio": logs.get("clip_ratio/region_mean"),
                "completion_length": logs.get("completions/mean_length"),
                "loss": logs.get("loss"),
                "learning_rate": logs.get("learning_rate"),
            }
            if "num_tokens" in logs:  # compute (esbench.metrics.compute): prompt + completion tokens TRL rolled out
                row["tokens"] = int(logs["num_tokens"]) - self.tokens_seen
                row["tokens_generated"] = round((row["completion_length"] or 0) * args.generation_batch_size)
                self.tokens_seen = int(logs["num_tokens"])
            log(row)

        def on_save(self, args, state, control, **kw):
            mark_complete(out / f"checkpoint-{state.global_step}", state.global_step)

        def on_train_begin(self, args, state, control, **kw):
            self.tokens_seen = state.num_input_tokens_seen  # restored with the checkpoint on a resume
            if probe is not None:
                probe(state.global_step)

        def on_step_end(self, args, state, control, **kw):
            if probe is not None:
                probe(state.global_step, final=state.global_step == budget)

    return TrainLog()


def trl_vllm_rollouts(backend: Backend) -> bool:
    """Whether TRL's colocated vLLM engine generates the rollouts: a cell on the vLLM backend on a GPU.

    TRL's vLLM mode cannot run on vLLM's CPU build: its weight sync (`load_weights`) fails on the repacked CPU linear
    layers (AttributeError: 'Parameter' object has no attribute 'weight_loader'). On CPU the rollouts are TRL's HF
    generation, under the backend's neutral decoding, whatever the backend.
    """
    return backend.kind == "vllm" and backend.device.type != "cpu"


@contextlib.contextmanager
def rollout_weights(model, folder: Path | None) -> Iterator[None]:
    """While TRL builds its colocated engine, point `model.name_or_path` at `folder`, the cell's current weights.

    TRL 1.16 builds it as `LLM(model=model.name_or_path, ...)` (`VLLMGeneration._init_vllm`), with no revision: for a
    model loaded from the hub that is the hub's `main` revision, not the cell's pinned one (and on an offline node
    after `esbench prefetch`, an error). Its weight sync then pushes `model.named_parameters()` by name, which the
    folder, saved from this same model, matches.
    """
    if folder is None:
        yield
        return
    saved = model.name_or_path
    model.name_or_path = str(folder)
    try:
        yield
    finally:
        model.name_or_path = saved


def save_start(backend: Backend, folder: Path) -> Path:
    """Save the weights GRPO starts from (at the backend's dtype, before the fp32 master cast) for TRL's reference."""
    shutil.rmtree(folder, ignore_errors=True)
    backend.save(folder)
    return folder


@contextlib.contextmanager
def reference_weights(model, folder: Path | None) -> Iterator[None]:
    """While TRL builds its KL reference model, point `model.config._name_or_path` at `folder`, the stage's start.

    TRL 1.16 builds the reference as `create_model_from_path(model.config._name_or_path, ...)` in
    `GRPOTrainer.__init__`: for a hub model that is the bare hub id, with no revision or subfolder (the hub's `main`,
    not the cell's pinned commit; offline, an error), and in ES→GRPO it would be the base model instead of ES's
    result. verl's reference is the actor's initial weights, which `folder` holds.
    """
    if folder is None:
        yield
        return
    saved = model.config._name_or_path
    model.config._name_or_path = str(folder)
    try:
        yield
    finally:
        model.config._name_or_path = saved


@contextlib.contextmanager
def probes_at(ctx: TrainContext, dtype: torch.dtype) -> Iterator[None]:
    """While GRPO trains, `ctx`'s probe measures a `dtype` copy of the fp32 master (`Backend.at_dtype`): the suite's
    dtype, as ES's probes (in the engine, or the bf16 model paper-bf16 trains) and the evaluation see their weights."""
    import torch

    probe = ctx.probe
    if probe is None or dtype == torch.float32:
        yield
        return

    def at_dtype(backend: Backend) -> dict[str, Any]:
        view = backend.at_dtype(dtype)
        try:
            return probe(view)
        finally:
            del view

    ctx.probe = at_dtype
    try:
        yield
    finally:
        ctx.probe = probe


def plain_forward(model) -> None:
    """Drop the forwards TRL and accelerate set on the model instance while training (TRL's fused LM head; for a
    half-precision cell accelerate's autocast wrapper, which also returns fp32 logits), so that after GRPO the model
    evaluates, and a later stage (ES in GRPO→ES) rolls out, as the plain model at its own dtype."""
    model.__dict__.pop("forward", None)
    model.__dict__.pop("_original_forward", None)


@contextlib.contextmanager
def declared_eos(model, ids: Sequence[int]) -> Iterator[None]:
    """While TRL builds its trainer, the model declares the backend's stop set as its EOS ids.

    TRL 1.16 reads `model.generation_config.eos_token_id` (plus the tokenizer's) once in `GRPOTrainer.__init__`;
    that list both ends its HF rollouts (its `GenerationConfig`) and cuts each completion's mask, so GRPO stops on
    the set the backends stop on (`esbench.backends.stop_token_ids`, which adds config.json's EOS ids).
    """
    config = model.generation_config
    saved = config.eos_token_id
    config.eos_token_id = list(ids)
    try:
        yield
    finally:
        config.eos_token_id = saved


def reseed_after_engine_start(seed: int) -> None:
    """Redo TRL's own seeding (`set_seed(seed, device_specific=True)` in `GRPOTrainer.__init__`) after its engine
    started: every vLLM engine start seeds `random`, `np.random` and torch with the engine's seed (TRL passes 0), and
    vLLM's CUDA sampler draws the seed of each unseeded request (all of TRL's) from `np.random`, so every cell seed
    would sample the same rollouts."""
    from accelerate.utils import set_seed

    set_seed(seed, device_specific=True)


def close_trl_engine(trainer: Any) -> None:
    """Shut TRL's colocated engine down (TRL leaves it to the garbage collector), so that the backend's own engine
    can start in this process again; see `VLLMBackend.engine_released`."""
    generation = getattr(trainer, "vllm_generation", None)
    llm = getattr(generation, "llm", None)
    if generation is not None and llm is not None:
        from esbench.backends.vllm_engine import shutdown_llm

        generation.llm = None
        shutdown_llm(llm)


COMPLETE = "esbench-complete.json"


def mark_complete(checkpoint: Path, step: int) -> None:
    """Mark a Trainer checkpoint whole. `on_save` fires only after every file of it (and the rotation) is written."""
    atomic_write_json(checkpoint / COMPLETE, {"global_step": step})


def last_complete_checkpoint(out: Path) -> Path | None:
    """The newest checkpoint the Trainer finished writing; newer, half-written ones are deleted.

    transformers writes `checkpoint-N/` in place and `trainer_state.json` last, non-atomically, so a run killed
    mid-save leaves a directory that `get_last_checkpoint` would pick and that cannot be loaded (an empty
    trainer_state.json). Only a directory carrying the marker written in `on_save` counts.
    """
    if not out.exists():
        return None
    found = sorted(
        (int(m.group(1)), d) for d in out.iterdir() if d.is_dir() and (m := re.fullmatch(r"checkpoint-(\d+)", d.name))
    )
    complete = [(n, d) for n, d in found if (d / COMPLETE).exists()]
    last_step, last = complete[-1] if complete else (0, None)
    for n, d in found:
        if n > last_step:
            shutil.rmtree(d)  # half-written; the Trainer will write this step again
    return last


def trl_prompt(prompt: str, tokenizer) -> str:
    """The prompt text to hand TRL so that the model sees exactly the tokens ES and evaluation condition on.

    TRL 1.16 tokenises string prompts with special tokens added; a chat template that already starts with the BOS
    token (Llama 3) would then get it twice. Strip the leading special tokens that tokenisation would add again.
    """
    with_special = tokenizer(prompt)["input_ids"]
    plain = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    extra = len(with_special) - len(plain)
    if extra > 0 and with_special[:extra] == plain[:extra] and with_special[extra:] == plain:
        prefix = tokenizer.decode(plain[:extra])
        if prompt.startswith(prefix):
            return prompt[len(prefix) :]
    return prompt
