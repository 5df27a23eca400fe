"""GRPO over several processes (`esbench.methods.grpo_processes`, `--grpo-gpus`): on this CPU, 2 gloo processes
(DDP) through the same launch, training, gather and reload a GPU node runs with FSDP2; the FSDP2 configuration is
checked by building accelerate's plugin from it."""

from __future__ import annotations

import json

import pytest

SUITE = """name: gp
models:
  tiny: {path: "builtin:tiny"}
datasets:
  arith: {task: tiny_arith, size: 32}
methods:
  grpo:
    method: grpo
    prompts_per_rollout: 4
    num_generations: 4
    ppo_minibatch_prompts: 2
    micro_batch: 2
    max_completion_length: 48
    learning_rate: 0.001
    kl_coef: 0.001
budgets: [2]
seeds: [0]
backend: {kind: hf, device: cpu}
eval: {tasks: [tiny_arith], limit: 8, n: 2, k: [1, 2], max_new_tokens: 48, greedy: false, entropy: false}
"""


def _settings(**kw):
    from esbench.methods.grpo import GRPOSettings

    return GRPOSettings(**{"prompts_per_rollout": 64, "num_generations": 8, "ppo_minibatch_prompts": 32, **kw})


@pytest.mark.parametrize("processes", [1, 2, 4, 8])
def test_the_global_batch_is_the_same_on_any_number_of_processes(tmp_path, processes):
    """Table 14's 64 x 8 rollout, minibatch 32, micro 2: 256 sequences per update and 2 updates per rollout, for
    every G; each process takes 1/G of the accumulation steps (TRL's generation batch is global)."""
    from esbench.methods.grpo_trl import grpo_config

    args = grpo_config(_settings(), 10, str(tmp_path), 0, True, processes=processes)
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps * processes == 32 * 8
    assert args.generation_batch_size == 64 * 8
    steps_per_generation = args.generation_batch_size // (args.per_device_train_batch_size * processes)
    assert steps_per_generation // args.gradient_accumulation_steps == 2


def test_a_batch_that_does_not_split_over_the_processes_is_refused(tmp_path):
    from esbench.methods.grpo_trl import grpo_config

    with pytest.raises(ValueError, match="micro_batch \\* GRPO processes"):
        grpo_config(
            _settings(ppo_minibatch_prompts=2, num_generations=3, micro_batch=2), 1, str(tmp_path), 0, True, processes=2
        )


def test_the_fsdp2_configuration_builds_accelerates_plugin_with_an_fp32_policy(tmp_path):
    """What a GPU node gets (`fsdp_layers`): accelerate builds its FSDP2 plugin from the config as transformers'
    Trainer does, and the explicit fp32 policy survives the bf16 autocast setting (accelerate would otherwise train
    bf16 parameters and reduce gradients in bf16)."""
    import torch
    from accelerate.utils import FullyShardedDataParallelPlugin

    from esbench.methods.grpo_processes import fp32_policy
    from esbench.methods.grpo_trl import grpo_config

    args = grpo_config(
        _settings(), 10, str(tmp_path), 0, True, compute="bfloat16", processes=8, fsdp_layers=["Qwen2DecoderLayer"]
    )
    assert args.gradient_checkpointing is False and args.model_init_kwargs == {"device_map": None}
    fp32_policy(args)
    plugin = FullyShardedDataParallelPlugin(**args.fsdp_plugin_args)
    plugin.set_mixed_precision("bf16")  # what accelerate's state does under bf16=True
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True and plugin.activation_checkpointing
    assert plugin.transformer_cls_names_to_wrap == ["Qwen2DecoderLayer"]
    assert plugin.mixed_precision_policy.param_dtype == torch.float32
    assert plugin.mixed_precision_policy.reduce_dtype == torch.float32


def test_fsdp_wraps_the_models_own_decoder_layers(tiny_model_dir):
    from esbench.methods.grpo_processes import fsdp_layers
    from esbench.models import load_model

    assert fsdp_layers(load_model(str(tiny_model_dir)).model) == ["LlamaDecoderLayer"]


def test_two_processes_train_a_grpo_cell_to_a_record(tmp_path, tiny_model_dir, monkeypatch):
    """`--grpo-gpus 2` on a CPU: two gloo ranks train, rank 0's gathered weights come back into the cell's model,
    which is evaluated; the record says how many processes trained it."""
    from esbench.cli import main

    monkeypatch.setenv("ESBENCH_GRPO_GPUS", "1")  # `--grpo-gpus` sets it for the run; put back afterwards
    suite = tmp_path / "gp.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "runs"
    assert main(["run", str(suite), "--out", str(out), "--grpo-gpus", "2"]) == 0
    (record_path,) = out.glob("gp/*/record.json")
    record = json.loads(record_path.read_text())
    assert record["train"]["processes"] == 2 and "DDP" in record["train"]["sharding"]
    assert record["provenance"]["execution"]["grpo_gpus"] == 2
    assert record["drift"]["relative_l2"] > 0  # the trained weights, not the start, were evaluated
    rows = [json.loads(x) for x in (record_path.parent / "train.jsonl").read_text().splitlines()]
    assert rows and all(r["update"] < 2 for r in rows)  # rank 0 alone wrote them, once per logged update


def test_a_checkpoint_resumes_only_with_the_process_count_that_wrote_it(tmp_path):
    from esbench.methods import TrainContext
    from esbench.methods.grpo_processes import train_in_processes

    work = tmp_path / "work"
    (work / "grpo").mkdir(parents=True)
    (work / "grpo" / "processes.json").write_text(json.dumps({"processes": 4}))
    ctx = TrainContext(seed=0, workdir=work, log_path=tmp_path / "t.jsonl", prompt=str, backend=None, processes=2)
    with pytest.raises(RuntimeError, match="4 processes"):
        train_in_processes([], None, 2, _settings(micro_batch=2), ctx, 2)


def test_the_executors_give_a_grpo_cell_its_gpus(monkeypatch):
    from esbench.executors import gpus_needed

    grpo = {"method": {"kind": "grpo", "config": {}}}
    es = {"method": {"kind": "es", "config": {}}}
    seq = {"method": {"kind": "sequence", "config": {"stages": [{"kind": "es"}, {"kind": "grpo"}]}}}
    assert gpus_needed(grpo) == 1
    monkeypatch.setenv("ESBENCH_GRPO_GPUS", "4")
    assert gpus_needed(grpo) == 4 and gpus_needed(es) == 1 and gpus_needed(seq) == 4
