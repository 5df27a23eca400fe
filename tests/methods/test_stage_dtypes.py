"""Every stage of a sequence computes in the suite's dtype (issue 23, Table 14 exactly).

On a bf16 cell: ES perturbs and rolls out the bf16 model and hands it back at the dtype it got (test_es_dtype.py);
GRPO trains an fp32 master under bf16 autocast, its in-training probe generates on a bf16 copy of that master, and
it hands the model back without TRL's and accelerate's forward wrappers, so a later ES stage rolls out the plain
bf16 model. GRPO's KL term (verl's k3) is taken against the weights its stage starts from: ES's result in ES→GRPO,
so the KL is exactly 0 before GRPO's first step. HF backend, the embedded tiny model, CPU.
"""

from __future__ import annotations

import json

import pytest
import torch

from esbench.backends.hf import HFBackend
from esbench.methods import TrainContext
from esbench.methods.es import ESConfig
from esbench.methods.grpo import GRPOSettings
from esbench.methods.sequence import Sequence, SequenceConfig, Stage
from esbench.metrics.entropy import Probe
from esbench.models import load_model
from esbench.rewards import Reward
from esbench.tasks import get_task

GRPO = GRPOSettings(
    prompts_per_rollout=4,
    num_generations=4,
    ppo_minibatch_prompts=4,
    micro_batch=16,
    learning_rate=1e-4,
    max_completion_length=12,
    kl_coef=0.001,
)
# weight decay moves every weight whatever the rewards, so ES's result surely differs from the base
ES = ESConfig(population=2, batch_size=2, max_new_tokens=8, precision="paper-bf16", weight_decay=0.01)


@pytest.fixture
def calls(monkeypatch):
    """Every HF `generate` and `token_entropy` call: (what, dtype of the model, whether its forward is wrapped)."""
    seen: list[tuple[str, torch.dtype, bool]] = []
    for name in ("generate", "token_entropy"):
        original = getattr(HFBackend, name)

        def spy(self, *args, _name=name, _original=original, **kwargs):
            seen.append((_name, self.dtype, "forward" in self.model.__dict__))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(HFBackend, name, spy)
    return seen


def _run(tmp_path, stages, probe_every: int | None = 1):
    task = get_task("tiny_arith")
    loaded = load_model("builtin:tiny", dtype="bfloat16")
    backend = HFBackend(loaded.model, loaded.tokenizer, device="cpu", cpu_threads=1)
    rows = task.rows("test", 2)
    probe = Probe(
        prompts=[task.prompt(r, loaded.tokenizer) for r in rows],
        golds=[r["answer"] for r in rows],
        verify=task.verify,
        samples=2,
        temperature=1.0,
        max_new_tokens=6,
        seed=0,
    )
    ctx = TrainContext(
        seed=0,
        workdir=tmp_path,
        log_path=tmp_path / "train.jsonl",
        prompt=lambda r: task.prompt(r, loaded.tokenizer),
        backend=backend,
        probe=probe if probe_every else None,
        probe_every=probe_every or 0,
    )
    config = SequenceConfig(stages=[Stage(kind=k, config=c.model_dump()) for k, c in stages])
    Sequence().train(task.rows("train", 8), Reward(task), len(stages), config, ctx)
    log = [json.loads(x) for x in ctx.log_path.read_text().splitlines()]
    return backend, log


def test_es_then_grpo_every_stage_and_probe_at_bf16(tmp_path, calls, monkeypatch):
    import trl.trainer.grpo_trainer

    import esbench.methods.grpo as grpo

    computes, references = [], []
    original = grpo.grpo_config
    monkeypatch.setattr(grpo, "grpo_config", lambda *a, **k: computes.append(k["compute"]) or original(*a, **k))
    build = trl.trainer.grpo_trainer.create_model_from_path

    def reference(model_id, **kwargs):  # TRL's KL reference model, as built
        ref = build(model_id, **kwargs)
        references.append({k: v.clone() for k, v in ref.state_dict().items()})
        return ref

    monkeypatch.setattr(trl.trainer.grpo_trainer, "create_model_from_path", reference)
    backend, log = _run(tmp_path, [("es", ES), ("grpo", GRPO)])
    assert computes == ["bfloat16"], "ES handed GRPO the bf16 model: GRPO autocasts in bf16 over its fp32 master"
    probes = [r for r in log if "probe" in r]
    assert {r["stage"] for r in probes} == {0, 1}  # ES's probes and GRPO's
    # ES's rollouts and probe, GRPO's probe (TRL's own rollouts call the model directly): all on a plain bf16 model
    assert {c[0] for c in calls} == {"generate", "token_entropy"}
    assert all(dtype == torch.bfloat16 and not wrapped for _, dtype, wrapped in calls), calls
    # the KL reference is ES's result (saved by the sequence at bf16), in the fp32 master's precision; TRL alone
    # would load the base model from its folder
    from safetensors.torch import load_file

    es_result = load_file(str(tmp_path / "stage0" / "model.safetensors"))
    base = load_model("builtin:tiny", dtype="bfloat16").model.state_dict()
    (ref,) = references
    assert all(ref[k].dtype == torch.float32 and torch.equal(ref[k], es_result[k].float()) for k in es_result)
    assert not all(torch.equal(es_result[k], base[k]) for k in es_result)
    (first,) = [r for r in log if r.get("stage") == 1 and "kl" in r]
    assert 0 <= first["kl"] < 1e-4  # 5e-6 here (training vs no-grad kernels); 2e-4 against the base model
    assert backend.dtype == torch.float32 and "forward" not in backend.model.__dict__


def test_grpo_then_es_rolls_out_the_plain_bf16_model_and_the_probe_changes_nothing(tmp_path, calls):
    """After GRPO the model has no autocast wrapper (which returns fp32 logits): ES's bf16 rollouts are the plain
    model's. GRPO's probe copy is built and used off the trainer's random stream: with or without the probe, the
    trained weights are the same."""
    weights = {}
    for probe_every in (1, None):
        backend, _ = _run(tmp_path / str(probe_every), [("grpo", GRPO), ("es", ES)], probe_every=probe_every)
        weights[probe_every] = {k: v.clone() for k, v in backend.parameters().items()}
    assert calls and all(dtype == torch.bfloat16 and not wrapped for _, dtype, wrapped in calls), calls
    assert all(torch.equal(weights[1][k], weights[None][k]) for k in weights[None])
    backend.cast(torch.bfloat16)  # as the runner does before evaluation
    assert backend.model(torch.tensor([[1, 5, 6, 7]])).logits.dtype == torch.bfloat16
