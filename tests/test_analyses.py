"""Table 4's drift as the paper measured it: on the weights a user would save (bf16 for a bf16 suite), with the fp32
master's beside it, and a `checkpoint` cell against the model it was trained from (docs/analyses.md)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from methods.test_grpo import GRPO_DTYPE_SUITE  # tiny bf16 GRPO at the paper's lr 1e-6, 3 updates
from run_helpers import only_record

from esbench.cli import main


def _hf_weights(folder, dtype) -> dict[str, torch.Tensor]:
    """A model folder's unique parameters as transformers loads them (tied tensors once)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    return {n: p.detach() for n, p in model.named_parameters()}


def _by_hand(start: dict[str, torch.Tensor], end: dict[str, torch.Tensor]) -> dict[str, float]:
    """Relative L2, max |Δθ| and changed fraction in fp32, written out independently of esbench.metrics.drift."""
    assert set(start) == set(end)
    sq = base = 0.0
    biggest, changed, total = 0.0, 0, 0
    for name, a in start.items():
        d = end[name].float() - a.float()
        sq += float((d * d).sum())
        base += float((a.float() ** 2).sum())
        biggest = max(biggest, float(d.abs().max()))
        changed += int((d != 0).sum())
        total += d.numel()
    return {"relative_l2": (sq / base) ** 0.5, "max_abs_delta": biggest, "changed_fraction": changed / total}


def test_a_bf16_grpo_cell_reports_its_saved_weights_drift_and_its_masters(tmp_path, tiny_model_dir):
    """Paper lr 1e-6 on a bf16 model: the record's drift is that of final.safetensors (the bf16 weights a user
    saves) against the bf16 model as loaded, and the fp32 master's drift sits beside it."""
    from safetensors.torch import load_file

    suite = tmp_path / "grpo.yaml"
    text = GRPO_DTYPE_SUITE.format(dtype="bfloat16").replace("entropy: false}", "entropy: false, save_weights: true}")
    assert "save_weights: true" in text
    suite.write_text(text)
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 0
    rec, cell = only_record(tmp_path / "runs")
    saved = load_file(str(cell / "final.safetensors"))
    assert {t.dtype for t in saved.values()} == {torch.bfloat16}
    want = _by_hand(_hf_weights(tiny_model_dir, torch.bfloat16), saved)
    assert 0 < want["changed_fraction"] < 0.5, "premise: bf16 rounds most of a 1e-6 update away, not all of it"

    d = rec["drift"]
    assert d["weights"] == "saved:bfloat16"
    assert d["relative_l2"] == pytest.approx(want["relative_l2"], rel=1e-6)
    assert d["max_abs_delta"] == want["max_abs_delta"]
    assert d["changed_fraction"] == want["changed_fraction"]
    biggest = torch.tensor(d["max_abs_delta"])
    assert float(biggest.to(torch.bfloat16)) == d["max_abs_delta"], "a difference of bf16 weights: bf16-exact"
    assert sum(g["top"] for g in d["groups"].values()) == len(d["top"]) == 100

    m = d["master"]
    assert m["weights"] == "master:float32"
    assert m["changed_fraction"] > 0.99 > d["changed_fraction"]  # the fp32 master moved nearly every coordinate
    assert m["relative_l2"] > d["relative_l2"] > 0
    assert d["rounding_share"] > 0  # the saved weights against the master they were cast from


def _two_tiny_folders(root, tiny_model_dir):
    """A base folder (the tiny model) and a 'released checkpoint' that differs from it in two known coordinates,
    both set to bf16-exact values so the bf16 difference is known exactly."""
    from transformers import AutoModelForCausalLM

    base, ckpt = root / "base", root / "ckpt"
    shutil.copytree(tiny_model_dir, base)
    shutil.copytree(tiny_model_dir, ckpt)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    params = dict(model.named_parameters())
    with torch.no_grad():
        params["model.layers.0.mlp.down_proj.weight"][3, 5] = 0.5
        params["model.layers.1.input_layernorm.weight"][7] = -1.0
    model.save_pretrained(ckpt)
    return base, ckpt


CKPT_SUITE = """\
name: ckpt
models: {{tiny: {{path: "{base}", dtype: bfloat16}}}}
methods:
  released: {{method: checkpoint, path: "{ckpt}", base: {{path: "{base}"}}}}
  unknown-origin: {{method: checkpoint, path: "{ckpt}"}}
seeds: [0]
eval: {{tasks: [tiny_arith], limit: 2, n: 1, k: [1], temperature: 1.0, max_new_tokens: 8, greedy: false,
        entropy: false}}
"""


def test_a_checkpoint_cell_reports_drift_against_its_base(tmp_path, tiny_model_dir, capsys):
    base, ckpt = _two_tiny_folders(tmp_path, tiny_model_dir)
    suite = tmp_path / "ckpt.yaml"
    suite.write_text(CKPT_SUITE.format(base=base, ckpt=ckpt))
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 0
    recs = {}
    for p in (tmp_path / "runs" / "ckpt").glob("*/record.json"):
        rec = json.loads(p.read_text())
        recs[rec["cell"]["labels"]["method"]] = rec
    assert "drift" not in recs["unknown-origin"]  # no base named: nothing to measure against

    d = recs["released"]["drift"]
    start = _hf_weights(base, torch.bfloat16)
    a1 = float(start["model.layers.0.mlp.down_proj.weight"][3, 5])
    a2 = float(start["model.layers.1.input_layernorm.weight"][7])
    d1, d2 = 0.5 - a1, -1.0 - a2  # the two known differences (exact: bf16 values subtracted in fp32)
    base_l2 = sum(float((t.float() ** 2).sum()) for t in start.values()) ** 0.5
    assert d["weights"] == "saved:bfloat16" and d["against"]["path"] == str(base)
    assert "master" not in d
    assert d["changed_fraction"] == 2 / sum(t.numel() for t in start.values())
    assert d["max_abs_delta"] == abs(d2) and d["top"][0]["name"] == "model.layers.1.input_layernorm.weight"
    assert (d["top"][0]["index"], d["top"][1]["index"]) == (7, 3 * 384 + 5)
    assert d["relative_l2"] == pytest.approx((d1**2 + d2**2) ** 0.5 / base_l2, rel=1e-6)
    assert d["groups"]["norms"]["share"] == pytest.approx(d2**2 / (d1**2 + d2**2), rel=1e-6)

    capsys.readouterr()  # the run's own output
    assert main(["report", str(tmp_path / "runs" / "ckpt"), "--json", "--bootstrap", "10"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["drift"]["rows"]
    assert (row["method"], row["against"], row["weights"]) == ("checkpoint", str(base), "saved:bfloat16")


def test_a_checkpoint_base_is_validated(tmp_path, tiny_model_dir):
    from esbench.analyses import checkpoint_drift
    from esbench.methods.checkpoint import CheckpointConfig

    with pytest.raises(ValueError, match="pin its `revision`"):
        CheckpointConfig.model_validate({"path": "org/released", "revision": "a" * 40, "base": {"path": "org/base"}})
    with pytest.raises(ValueError, match="extra"):
        CheckpointConfig.model_validate({"path": "org/released", "base": {"path": "org/base", "rev": "x"}})
    cfg = CheckpointConfig.model_validate({"path": "org/r", "base": {"path": "org/base", "revision": "b" * 40}})
    assert cfg.base.revision == "b" * 40
    method = {"kind": "checkpoint", "config": {"path": "x", "base": {"path": str(tiny_model_dir)}}}
    with pytest.raises(ValueError, match="does not match the checkpoint's tensors"):
        checkpoint_drift(method, "float32", torch.nn.Linear(2, 2))


def test_the_hard_grpo_checkpoint_is_measured_against_the_suites_model(repo):
    """Table 4's DeepSeek GRPO drift (0.0548e-2) is SofT-GRPO against DeepSeek-R1-Distill-Qwen-1.5B, pinned alike."""
    from esbench.spec import load_suite

    cells = {c.labels["method"]: c for c in load_suite(repo / "suites" / "paper-hard.yaml").cells()}
    model = cells["grpo"].spec["model"]
    base = cells["grpo"].spec["method"]["config"]["base"]
    assert (base["path"], base["revision"]) == (model["path"], model["revision"])
    assert base["path"] == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
