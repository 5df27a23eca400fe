"""The `checkpoint` method (released weights, no training), epoch budgets split in epochs, and stage-only entries."""

from __future__ import annotations

import pytest

from esbench.methods import TrainContext, model_to_load, registry
from esbench.methods.checkpoint import Checkpoint
from esbench.methods.grpo import GRPOSettings
from esbench.methods.sequence import SequenceConfig
from esbench.spec import SuiteError, load_suite

ES = {"kind": "es", "config": {"batch_size": 64}}
GRPO = {"kind": "grpo", "config": {"ppo_minibatch_prompts": 32}}
CKPT = {"kind": "checkpoint", "config": {"path": "org/released", "revision": "a" * 40}}


def test_checkpoint_is_registered_and_trains_nothing():
    cls = registry.get("checkpoint")
    assert cls is Checkpoint and not cls.trains and cls.loads_weights
    with pytest.raises(ValueError):
        cls.Config.model_validate({"path": "/no/such/dir"})


def test_model_to_load_swaps_in_the_checkpoint():
    cell_model = {"path": "org/base", "revision": "b" * 40, "dtype": "bfloat16"}
    assert model_to_load({"kind": "es", "config": {}}, cell_model) == cell_model
    got = model_to_load(CKPT, cell_model)
    assert got == {"path": "org/released", "revision": "a" * 40, "dtype": "bfloat16"}
    seq = {"kind": "sequence", "config": {"stages": [CKPT, ES], "split": None}}
    assert model_to_load(seq, cell_model)["path"] == "org/released"
    sub = {"kind": "checkpoint", "config": {**CKPT["config"], "subfolder": "m", "dtype": "float32"}}
    assert model_to_load(sub, cell_model) == {**got, "subfolder": "m", "dtype": "float32"}


def test_grpo_epochs_count_optimizer_updates():
    """Two epochs of GSM8K train (7,473) at 32 prompts per PPO minibatch: 468 updates = 234 rollouts of 64."""
    assert registry.get("grpo").updates_for("2ep", 7473, GRPOSettings()) == 468


def test_epoch_budget_of_a_sequence_splits_in_epochs():
    seq = SequenceConfig.model_validate({"stages": [ES, GRPO]})
    assert seq.stage_updates("2ep", 7473) == [117, 234]  # one epoch of each
    assert registry.get("sequence").updates_for("2ep", 7473, seq) == 351
    assert seq.stage_updates(12, 7473) == [6, 6]  # update budgets keep the equal halves


def test_checkpoint_stage_spends_no_updates_and_must_come_first():
    seq = SequenceConfig.model_validate({"stages": [CKPT, ES]})
    assert seq.stage_updates("1ep", 40315) == [0, 630]
    assert seq.stage_updates(10, 100) == [0, 10]
    with pytest.raises(ValueError, match="only come first"):
        SequenceConfig.model_validate({"stages": [ES, CKPT]})


def test_sequence_train_skips_the_checkpoint_stage(tmp_path):
    """The runner already loaded the checkpoint; the sequence runs the remaining stages with the whole budget."""
    from esbench.methods.sequence import Sequence

    seen = []

    from esbench.methods import Method

    class Recorder(Method):
        def train(self, data, reward, budget, cfg, ctx):
            from esbench.methods import TrainResult

            seen.append(budget)
            return TrainResult(updates=budget)

    cfg = SequenceConfig.model_validate({"stages": [CKPT, ES]})
    import torch

    from esbench.backends.hf import HFBackend

    backend = HFBackend(torch.nn.Linear(1, 1), None, device="cpu")
    ctx = TrainContext(
        seed=0, workdir=tmp_path, log_path=tmp_path / "t.jsonl", prompt=str, backend=backend, budget_spec=5
    )
    import esbench.methods.sequence as sequence_module

    orig = sequence_module.registry.get

    def fake_get(kind):
        cls = orig(kind)
        return type("R", (Recorder,), {"Config": cls.Config, "trains": cls.trains}) if kind == "es" else cls

    sequence_module.registry.get = fake_get
    try:
        res = Sequence().train([{}] * 10, None, 5, cfg, ctx)
    finally:
        sequence_module.registry.get = orig
    assert seen == [5] and res.summary["stage_budgets"] == [0, 5]


SUITE = """\
name: s
models: {{m: {{path: builtin:tiny}}}}
datasets: {{d: {{task: tiny_arith}}}}
methods:
  es: {{method: es, population: 4}}
  grpo-train: {{method: grpo, stage_only: {flag}}}
  es-grpo: {{sequence: [es, grpo-train]}}
budgets: [4]
seeds: [0]
eval: {{tasks: [tiny_arith], n: 2}}
"""


def test_stage_only_entries_are_stages_but_not_cells(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SUITE.format(flag="true"))
    cells = load_suite(path).cells()
    assert sorted(c.labels["method"] for c in cells) == ["es", "es-grpo"]
    (seq,) = [c for c in cells if c.labels["method"] == "es-grpo"]
    assert [s["kind"] for s in seq.spec["method"]["config"]["stages"]] == ["es", "grpo"]
    path.write_text(SUITE.format(flag="false"))
    assert len(load_suite(path).cells()) == 3
    path.write_text(SUITE.format(flag="true").replace("es-grpo: {sequence: [es, grpo-train]}", "x: {}"))
    with pytest.raises(SuiteError, match="stage-only method must be a stage"):
        load_suite(path)
