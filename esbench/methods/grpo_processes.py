"""GRPO over several processes: a node's GPUs through FSDP2 (`--grpo-gpus G`), or G gloo processes on a CPU.

Full-parameter GRPO keeps an fp32 master, its gradients and AdamW's moments, 16 bytes per parameter (122 GB for
Qwen2.5-7B) plus a frozen fp32 KL reference: a 3B or 7B cell does not fit one 80 GB GPU (`esbench plan`). TRL
trains across processes through accelerate, so esbench launches the stage as G processes and keeps everything else
in the cell's own process:

1. The cell's process (the parent) releases its vLLM engine, parks its model on the CPU, and saves the stage's
   start weights at the cell's dtype. That folder is what every rank loads, what TRL's KL reference is built from
   (`model.config._name_or_path`) and what TRL's colocated vLLM engines load (`model.name_or_path`), one per rank.
2. `python -m torch.distributed.run --standalone --nproc_per_node G -m esbench.methods.grpo_processes SPEC` runs
   `worker` on every rank: the fp32 master on the rank's device, `grpo_config(processes=G)` (the same global batch:
   each rank takes 1/G of the accumulation steps), on a GPU FSDP2 full shard over the decoder layers with an fp32
   mixed-precision policy, so that accelerate's autocast keeps the single-process numerics (fp32 master, compute
   in the cell's dtype) instead of FSDP's bf16 parameters and bf16 gradient reduction. Rank 0 writes train.jsonl
   and the checkpoint markers; every rank takes part in gathering the full state dict at the end, and rank 0 saves
   it (fp32) for the parent.
3. The parent loads it into its model, now the fp32 master as in the one-process stage, and goes on (evaluation
   casts to the cell's dtype, as for every cell).

On a CPU accelerate 1.15 has no FSDP: with `use_cpu` it sets `MULTI_CPU` (gloo) and drops the FSDP plugin without
a word (accelerate/state.py, the FSDP branch lists accelerator types only), and FSDP1 refuses a CPU device. So the
CPU runs the same launch, training, gather and reload with DDP, which is what the tests run; the FSDP configuration
is checked by building accelerate's plugin from it (tests/methods/test_grpo_processes.py). What only a GPU shows:
FSDP2's sharded training, TRL's per-rank colocated vLLM engines and their weight sync from FSDP shards.

Results depend on G, like a different machine: TRL seeds each rank's sampling with seed + rank
(`set_seed(..., device_specific=True)`), each rank shuffles its own share of a rollout, and gradients reduce in
another order. The prompts of each rollout are the same (the samplers share the seed). G is recorded in the
stage's summary (`processes`) and in provenance, and a checkpoint is resumed only with the G that wrote it.
In-training probes are off with G > 1 (the model is sharded across processes); the summary says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from esbench.methods import TrainContext, TrainResult
from esbench.methods.grpo_trl import (
    GRPOSettings,
    close_trl_engine,
    declared_eos,
    grpo_config,
    last_complete_checkpoint,
    reseed_after_engine_start,
    save_start,
    stage_result,
    train_log,
    trl_prompt,
    trl_vllm_rollouts,
)
from esbench.records import append_jsonl, atomic_write_json
from esbench.rewards import Reward

SPEC = "grpo-processes.json"
FINAL = "final.safetensors"


def train_in_processes(
    train_data: list[dict[str, str]],
    reward: Reward,
    budget: int,
    config: GRPOSettings,
    ctx: TrainContext,
    processes: int,
) -> TrainResult:
    """The parent's side (module docstring, steps 1 and 3)."""
    import torch
    from safetensors.torch import load_file

    backend = ctx.backend
    g = config.num_generations
    if (config.ppo_minibatch_prompts * g) % (config.micro_batch * processes):  # before anything is released
        raise ValueError(
            f"GRPO on {processes} processes: ppo_minibatch_prompts * num_generations "
            f"({config.ppo_minibatch_prompts * g}) must be divisible by micro_batch x {processes}"
        )
    out = ctx.workdir / "grpo"
    out.mkdir(parents=True, exist_ok=True)
    written = out / "processes.json"
    if written.exists() and json.loads(written.read_text())["processes"] != processes:
        raise RuntimeError(
            f"{out}: its checkpoints were written by GRPO on {json.loads(written.read_text())['processes']} "
            f"processes; resume it with --grpo-gpus equal to that, or delete the folder to start over"
        )
    atomic_write_json(written, {"processes": processes})
    last = last_complete_checkpoint(out)
    ctx.rewind(int(last.name.rsplit("-", 1)[1]) if last else 0)
    tokenizer = backend.tokenizer
    rows = [{"prompt": trl_prompt(ctx.prompt(r), tokenizer), "answer": r["answer"]} for r in train_data]
    compute = str(backend.dtype).removeprefix("torch.")
    rollout_engine = "vllm" if trl_vllm_rollouts(backend) else "hf"
    device = backend.device
    with backend.engine_released():
        start = save_start(backend, ctx.workdir / "grpo-start")  # the cell's dtype: ranks, reference, TRL's vLLM
        model = backend.model
        model.to("cpu")  # the ranks need the GPUs' memory; the parent's copy waits on the host
        if device.type == "cuda":
            torch.cuda.empty_cache()
        spec = {
            "rows": rows,
            "task": reward.task.name,
            "reward": {"rule": reward.rule, "correct": config.reward_correct, "formatted": config.reward_format},
            "config": config.model_dump(),
            "budget": budget,
            "seed": ctx.seed,
            "out": str(out),
            "start": str(start),
            "log": str(ctx.log_path),
            "compute": compute,
            "use_cpu": device.type == "cpu",
            "cpu_threads": torch.get_num_threads(),  # the cell's (`backend.cpu_threads`): CPU sums depend on it
            "vllm_rollouts": rollout_engine == "vllm",
            "stop_token_ids": list(backend.stop_token_ids),
            "resume": str(last) if last else None,
        }
        atomic_write_json(ctx.workdir / SPEC, spec)
        launch(ctx.workdir / SPEC, processes, ctx.workdir / "grpo-processes.log")
        if compute != "float32":
            backend.cast(torch.float32)  # the parent's model becomes the fp32 master, as in the one-process stage
        model = backend.model
        state = load_file(str(out / FINAL))
        missing, unexpected = model.load_state_dict(state, strict=False)
        tied = {k for k in missing if k.endswith("lm_head.weight") and model.config.tie_word_embeddings}
        if set(missing) - tied or unexpected:
            raise RuntimeError(f"GRPO's gathered weights do not match the model: missing {missing}, extra {unexpected}")
        model.to(device)
        model.eval()
    result = stage_result(config, budget, ctx, compute, rollout_engine)
    result.summary["processes"] = processes
    result.summary["sharding"] = "none (CPU: DDP over gloo)" if device.type == "cpu" else "FSDP2 full shard"
    if ctx.probe is not None:
        result.summary["probe"] = f"off: the model is split over {processes} processes"
    return result


def launch(spec: Path, processes: int, log: Path) -> None:
    """Run `worker` on `processes` ranks with torch's launcher on this node; its output goes to `log`."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "-m",
        "esbench.methods.grpo_processes",
        str(spec),
    ]
    env = {**os.environ, "TQDM_DISABLE": "1"}
    with open(log, "ab") as f:
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-20:]
        raise RuntimeError(f"GRPO on {processes} processes failed (exit {done.returncode}); {log}:\n" + "\n".join(tail))


def fsdp_layers(model) -> list[str]:
    """The decoder-layer classes FSDP wraps one by one (transformers declares them as `_no_split_modules`)."""
    return list(getattr(model, "_no_split_modules", None) or [])


def fp32_policy(args) -> None:
    """Keep FSDP's parameters and gradient reduction in fp32: accelerate's autocast then computes in the cell's
    dtype over the fp32 master, as in one process. Without it accelerate sets bf16 parameters and bf16 reduction
    (its `set_mixed_precision` keeps an explicit policy)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    args.fsdp_plugin_args = {
        **(args.fsdp_plugin_args or {}),
        "mixed_precision_policy": MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32),
    }


def worker(spec_path: str) -> None:
    """One rank (module docstring, step 2)."""
    import datasets
    import torch
    from safetensors.torch import save_file
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from esbench.backends import engine_context
    from esbench.models import load_model
    from esbench.tasks import get_task

    spec = json.loads(Path(spec_path).read_text())
    rank = int(os.environ.get("RANK", "0"))
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    cfg = GRPOSettings(**spec["config"])
    out = Path(spec["out"])
    if spec["use_cpu"]:
        torch.set_num_threads(spec["cpu_threads"])
    loaded = load_model(spec["start"], dtype="float32")
    model, tokenizer = loaded.model, loaded.tokenizer
    rule = spec["reward"]
    reward = Reward(get_task(spec["task"]), rule["correct"], rule["formatted"], rule["rule"])

    def verifier_reward(prompts, completions, answer, **_):
        return [reward(c, a) for c, a in zip(completions, answer, strict=True)]

    gpu = not spec["use_cpu"]
    args = grpo_config(
        cfg,
        spec["budget"],
        str(out),
        spec["seed"],
        spec["use_cpu"],
        compute=spec["compute"],
        vllm_rollouts=spec["vllm_rollouts"],
        stop_token_ids=spec["stop_token_ids"],
        max_model_length=engine_context(
            max((len(tokenizer(r["prompt"])["input_ids"]) for r in spec["rows"]), default=0),
            cfg.max_completion_length,
            model.config,
        ),
        processes=processes,
        fsdp_layers=fsdp_layers(model) if gpu else (),
    )
    if gpu:
        fp32_policy(args)
    log = (lambda row: append_jsonl(Path(spec["log"]), row)) if rank == 0 else (lambda row: None)
    callback = train_log(log, None, out, spec["budget"])
    if rank != 0:
        callback.on_save = lambda *a, **k: None  # rank 0 marks checkpoints complete
    model.train()
    with declared_eos(model, spec["stop_token_ids"]):
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=verifier_reward,
            args=args,
            train_dataset=datasets.Dataset.from_list(spec["rows"]),
            processing_class=tokenizer,
            callbacks=[callback],
        )
    if spec["vllm_rollouts"]:
        reseed_after_engine_start(args.seed)
    trainer.remove_callback(PrinterCallback)
    try:
        trainer.train(resume_from_checkpoint=spec["resume"])
        state = trainer.accelerator.get_state_dict(trainer.model_wrapped)  # a collective: every rank calls it
    finally:
        close_trl_engine(trainer)
    if trainer.accelerator.is_main_process:
        shared = {id(p) for n, p in model.named_parameters() if n.endswith("lm_head.weight")}
        tied = bool(model.config.tie_word_embeddings) and len(shared) == 1
        clean = {
            k: v.detach().to("cpu").contiguous().clone()
            for k, v in state.items()
            if not (tied and k.endswith("lm_head.weight"))  # one storage with the embedding: safetensors refuses
        }
        tmp = out / (FINAL + ".tmp")
        save_file(clean, str(tmp))
        os.replace(tmp, out / FINAL)
    trainer.accelerator.wait_for_everyone()


if __name__ == "__main__":
    worker(sys.argv[1])
