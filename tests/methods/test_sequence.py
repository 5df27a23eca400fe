"""Sequences (ES->GRPO, GRPO->ES): exact budget split, per-stage logs, and exact resume after a kill mid-stage."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from run_helpers import only_record, start_run

from esbench.methods.sequence import stage_budgets
from esbench.spec import SuiteError, load_suite

SUITE = """\
# esbench run {path}
name: seq
models: {{tiny: {{path: builtin:tiny}}}}
datasets: {{arith: {{task: tiny_arith, size: 32}}}}
methods:
  es: {{method: es, population: 4, sigma: 0.003, alpha: 0.003, batch_size: 8, max_new_tokens: 40,
        checkpoint_every: 2}}
  grpo: {{method: grpo, prompts_per_rollout: 4, num_generations: 4, ppo_minibatch_prompts: 4, micro_batch: 16,
          learning_rate: 0.0001, max_completion_length: 40, checkpoint_every: 2}}
  es-grpo: {{sequence: [es, grpo]}}
  grpo-es: {{sequence: [grpo, es], split: [0.25, 0.75]}}
budgets: [{budget}]
seeds: [0]
eval: {{tasks: [tiny_arith], limit: 4, n: 2, k: [1, 2], temperature: 1.0, max_new_tokens: 40, greedy: false}}
"""


def write(tmp_path, budget=8):
    path = tmp_path / "seq.yaml"
    path.write_text(SUITE.format(path=path, budget=budget))
    return path


@pytest.mark.parametrize(
    ("budget", "n", "split", "expected"),
    [
        (40, 2, None, [20, 20]),
        (41, 2, None, [20, 21]),
        (8, 2, [0.25, 0.75], [2, 6]),
        (10, 3, None, [3, 3, 4]),
    ],
)
def test_stage_budgets_sum_exactly(budget, n, split, expected):
    assert stage_budgets(budget, n, split) == expected
    assert sum(stage_budgets(budget, n, split)) == budget


def test_sequence_config_inlines_the_named_stages(tmp_path):
    cells = {c.labels["method"]: c for c in load_suite(write(tmp_path)).cells()}
    seq = cells["es-grpo"].spec["method"]
    assert seq["kind"] == "sequence"
    assert [s["kind"] for s in seq["config"]["stages"]] == ["es", "grpo"]
    assert seq["config"]["stages"][0]["config"] == cells["es"].spec["method"]["config"]
    assert cells["grpo-es"].spec["method"]["config"]["split"] == [0.25, 0.75]


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        ("es-grpo: {sequence: [es, grpoo]}", "'grpoo' is not a (non-sequence) method"),
        ("es-grpo: {sequence: [es, grpo], split: [0.5, 0.6]}", "summing to 1"),
        ("es-grpo: {sequence: [es, grpo], sigma: 1}", "unknown key 'sigma'"),
        ("es-grpo: {sequence: [es, grpo-es]}", "not a (non-sequence) method"),
    ],
)
def test_bad_sequences_are_rejected_with_their_path(tmp_path, edit, fragment):
    path = write(tmp_path)
    path.write_text(path.read_text().replace("es-grpo: {sequence: [es, grpo]}", edit))
    with pytest.raises(SuiteError) as exc:
        load_suite(path)
    assert fragment in str(exc.value) and "methods.es-grpo" in str(exc.value)


def test_kill_during_second_stage_resumes_to_identical_record(tmp_path, tiny_model_dir):
    suite = write(tmp_path, budget=12)  # es 6 updates, then grpo 6 updates with a checkpoint every 2
    proc = start_run(suite, tmp_path / "clean", "--only", "*/es-grpo/*")
    assert proc.wait(timeout=600) == 0, proc.stdout.read()
    ref, ref_dir = only_record(tmp_path / "clean")
    rows = [json.loads(x) for x in (ref_dir / "train.jsonl").read_text().splitlines()]
    assert [(r["stage_method"], r["update"]) for r in rows] == [("es", i) for i in range(6)] + [
        ("grpo", i) for i in range(6, 12)
    ]
    assert ref["budget_used"]["updates"] == 12 and ref["train"]["stage_budgets"] == [6, 6]

    killed = tmp_path / "killed"
    proc = start_run(suite, killed, "--only", "*/es-grpo/*")
    deadline, hit = time.time() + 300, False
    while time.time() < deadline and proc.poll() is None:
        if list(killed.glob("seq/*/work/stage1/grpo/checkpoint-2/trainer_state.json")):
            os.kill(proc.pid, signal.SIGKILL)
            hit = True
            break
        time.sleep(0.01)
    proc.wait()
    assert hit, "the run ended before a second-stage checkpoint appeared"
    assert not list(killed.glob("seq/*/record.json"))
    assert list(killed.glob("seq/*/work/stage0/done.json")), "first stage finished and was saved"

    proc = start_run(suite, killed, "--only", "*/es-grpo/*")
    assert proc.wait(timeout=600) == 0, proc.stdout.read()
    got, got_dir = only_record(killed)
    assert got["provenance"]["final_weights_sha256"] == ref["provenance"]["final_weights_sha256"]
    assert got["metrics"] == ref["metrics"]
    assert got["budget_used"]["updates"] == ref["budget_used"]["updates"]
    assert (got_dir / "train.jsonl").read_text() == (ref_dir / "train.jsonl").read_text()


def test_a_cell_is_never_run_twice_at_once(tmp_path):
    from esbench.leases import CellBusy, Lease

    with Lease(tmp_path / "cell" / ".lease"):
        with pytest.raises(CellBusy):
            with Lease(tmp_path / "cell" / ".lease"):
                pass
    # released: the next runner takes it
    with Lease(tmp_path / "cell" / ".lease"):
        pass
