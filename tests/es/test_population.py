"""The ES population on Ray actors (`--es-workers W`): a run's results do not depend on W or on which actor rolls
out which member, and a replica whose weights diverge from the driver's is caught and named."""

from __future__ import annotations

import json

import pytest
from run_helpers import only_record, small_suite

from esbench.backends.hf import HFBackend
from esbench.es.population import LocalPopulation, Rollout, blocks
from esbench.es.weights import WeightsDiverged
from esbench.methods.es_ray import RayPopulation
from esbench.models import load_model
from esbench.tasks import get_task

SPEC = Rollout(
    population=5, antithetic=False, sigma=0.05, temperature=0.0, max_new_tokens=30, common_sampling_seed=True
)


def test_members_are_dealt_in_contiguous_blocks():
    assert blocks(5, 2) == [[0, 1, 2], [3, 4]]
    assert blocks(5, 3) == [[0, 1], [2, 3], [4]]
    assert blocks(2, 3) == [[0], [1], []]


@pytest.fixture
def tiny_backend(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir))
    return HFBackend(loaded.model, loaded.tokenizer, device="cpu", cpu_threads=1)


def _prompts(backend, n=8):
    task = get_task("tiny_arith")
    return [task.prompt(r, backend.tokenizer) for r in task.rows("train", n)]


@pytest.mark.parametrize("noise", ["torch", "table"])
def test_three_actors_roll_out_what_the_driver_would_and_catch_a_corrupted_replica(
    tiny_backend, ray_env, tmp_path, noise
):
    editor = tiny_backend.weight_editor(noise=noise)
    prompts = _prompts(tiny_backend)
    local = LocalPopulation(tiny_backend, editor, SPEC, 0).roll_out(3, prompts)
    assert len({json.dumps(m) for m in local}) > 1  # the members really differ
    pop = RayPopulation(tiny_backend, editor, SPEC, 0, 3, tmp_path)
    try:
        import ray

        assert ray.get([a.__ray_call__.remote(lambda actor: actor.editor.noise) for a in pop.actors]) == [noise] * 3
        assert pop.roll_out(3, prompts) == local  # blocks of 2, 2 and 1 members, same answers
        editor.update([11, 12], [0.01, -0.01])
        pop.update([11, 12], [0.01, -0.01], 0.0, step=3)  # all replicas agree

        def corrupt(actor):  # the replica's state is its fp32 master (compute weights are re-derived from it)
            actor.editor.master["model.layers.0.mlp.up_proj.weight"][0, 0] += 1e-4

        ray.get(pop.actors[1].__ray_call__.remote(corrupt))
        editor.update([13], [0.01])
        with pytest.raises(WeightsDiverged, match=r"ES worker\(s\) \[1\] of 3 diverged from the driver after update 4"):
            pop.update([13], [0.01], 0.0, step=4)
    finally:
        pop.close()


def test_paper_bf16_is_refused_for_several_workers(tiny_backend, tmp_path):
    editor = tiny_backend.weight_editor("paper-bf16")
    with pytest.raises(ValueError, match="needs precision fp32-master"):
        RayPopulation(tiny_backend, editor, SPEC, 0, 2, tmp_path)


def test_an_es_cell_on_two_workers_equals_the_same_cell_on_one(tmp_path, tiny_model_dir, ray_env, monkeypatch):
    from esbench.cli import main

    monkeypatch.setenv("ESBENCH_ES_WORKERS", "1")  # restored after the test (the CLI sets it for its children)
    suite = tmp_path / "es.yaml"
    suite.write_text(small_suite("es-workers", budget=2))
    runs = {}
    for w in (1, 2):
        out = tmp_path / f"w{w}"
        assert main(["run", str(suite), "--out", str(out), "--only", "*/es/*", "--es-workers", str(w)]) == 0
        runs[w] = only_record(out)
    (one, one_dir), (two, two_dir) = runs[1], runs[2]
    assert two["provenance"]["execution"] == {"es_workers": 2, "grpo_gpus": 1}
    assert one["provenance"]["execution"]["es_workers"] == 1
    assert two["train"]["updates_logged"] == 2
    assert two["provenance"]["final_weights_sha256"] == one["provenance"]["final_weights_sha256"]
    assert two["provenance"]["final_weights_sha256"] != two["provenance"]["model"]["state_sha256"]  # it trained
    assert two["samples_sha256"] == one["samples_sha256"]
    assert (two_dir / "train.jsonl").read_text() == (one_dir / "train.jsonl").read_text()
    assert two["cell"]["id"] == one["cell"]["id"]  # W is not part of the cell


@pytest.mark.parametrize("engines", [2, 4])
def test_paper_bf16_engines_as_actors_equal_the_one_process_simulation(
    tmp_path, tiny_model_dir, ray_env, monkeypatch, engines
):
    """`engines: E` with `--es-workers E`: engine 0 in the cell's process, engines 1..E-1 as Ray actors with their
    own restore residuals, re-synced every 2 updates: the same final weights, samples and train.jsonl as the
    simulation of the same topology in one process (issue 25)."""
    from esbench.cli import main

    monkeypatch.setenv("ESBENCH_ES_WORKERS", "1")
    extra = f", precision: paper-bf16, engines: {engines}, engine_sync_every: 2"
    suite = tmp_path / "es.yaml"
    suite.write_text(small_suite("es-engines", budget=3, es_extra=extra))
    runs = {}
    for w in (1, engines):
        out = tmp_path / f"w{w}"
        assert main(["run", str(suite), "--out", str(out), "--only", "*/es/*", "--es-workers", str(w)]) == 0
        runs[w] = only_record(out)
    (one, one_dir), (many, many_dir) = runs[1], runs[engines]
    assert many["provenance"]["execution"] == {"es_workers": engines, "grpo_gpus": 1}
    assert many["train"]["precision"] == f"paper-bf16, {engines} engines"
    assert many["provenance"]["final_weights_sha256"] == one["provenance"]["final_weights_sha256"]
    assert many["provenance"]["final_weights_sha256"] != many["provenance"]["model"]["state_sha256"]  # it trained
    assert many["samples_sha256"] == one["samples_sha256"]
    assert (many_dir / "train.jsonl").read_text() == (one_dir / "train.jsonl").read_text()
    rows = [json.loads(line) for line in (many_dir / "train.jsonl").read_text().splitlines()]
    assert any(r.get("restore_residual_rms", 0) > 0 for r in rows)  # the residuals the engines keep are real


def test_engines_need_one_process_each(tiny_backend, tmp_path):
    from esbench.methods.es_ray import RayEnginesPopulation

    editor = tiny_backend.weight_editor("paper-bf16")
    spec = Rollout(
        population=4, antithetic=False, sigma=0.05, temperature=0.0, max_new_tokens=8, common_sampling_seed=True
    )
    with pytest.raises(ValueError, match="run it with --es-workers 4 \\(not 3\\)"):
        RayEnginesPopulation(tiny_backend, editor, spec, 0, 4, 0, 3, tmp_path)
