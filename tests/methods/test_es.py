"""The `es` recipe on the real tiny model: it learns, it is deterministic, and a kill -9 resumes exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from run_helpers import only_record, start_run

from esbench.cli import main
from esbench.leases import _proc_stat

ES_SUITE = """\
# esbench run {path}
name: es-small
models: {{tiny: {{path: builtin:tiny}}}}
datasets: {{arith: {{task: tiny_arith, size: 64}}}}
methods:
  es: {{method: es, population: 4, sigma: 0.01, alpha: 0.005, batch_size: 8, max_new_tokens: 40,
        checkpoint_every: 2}}
budgets: [12]
seeds: [0]
eval: {{tasks: [tiny_arith], limit: 4, n: 2, k: [1, 2], temperature: 1.0, max_new_tokens: 40, greedy: false}}
"""


@pytest.fixture
def es_suite(tmp_path, tiny_model_dir):
    path = tmp_path / "es.yaml"
    path.write_text(ES_SUITE.format(path=path))
    return path


def test_kill_minus_9_then_resume_gives_identical_weights_and_metrics(tmp_path, es_suite):
    clean = tmp_path / "clean"
    proc = start_run(es_suite, clean)
    assert proc.wait(timeout=600) == 0, proc.stdout.read()
    ref, ref_dir = only_record(clean)
    ref_log = (ref_dir / "train.jsonl").read_text().splitlines()
    assert [json.loads(x)["update"] for x in ref_log] == list(range(12))
    assert ref["budget_used"]["updates"] == 12 and ref["budget_used"]["rollouts"] == 12 * 4 * 8

    killed = tmp_path / "killed"
    proc = start_run(es_suite, killed)
    deadline = time.time() + 300
    state = None
    while time.time() < deadline:  # wait until a mid-run checkpoint exists, then kill without warning
        states = list(killed.glob("es-small/*/work/es/state.json"))
        if states and json.loads(states[0].read_text())["step"] >= 4:
            state = states[0]
            break
        time.sleep(0.05)
    assert state is not None, "no checkpoint appeared"
    os.kill(proc.pid, signal.SIGKILL)
    # not reaped until the re-run is over: the killed holder stays a zombie, its pid (in the cell's lease) still there
    while _proc_stat(proc.pid)[0] != "Z":
        time.sleep(0.01)
    assert json.loads((state.parents[2] / ".lease").read_text())["pid"] == proc.pid
    assert not list(killed.glob("es-small/*/record.json"))
    plan = subprocess.run(
        [sys.executable, "-m", "esbench.cli", "plan", str(es_suite), "--out", str(killed), "--json"],
        capture_output=True,
        text=True,
    )
    assert json.loads(plan.stdout)[0]["status"] == "partial"

    rerun = start_run(es_suite, killed)  # at once: the zombie's lease is taken over, not waited for
    assert rerun.wait(timeout=600) == 0, rerun.stdout.read()
    assert proc.wait() == -signal.SIGKILL
    got, got_dir = only_record(killed)
    assert got["provenance"]["final_weights_sha256"] == ref["provenance"]["final_weights_sha256"]
    assert got["metrics"] == ref["metrics"]
    assert got["budget_used"] == ref["budget_used"]
    assert (got_dir / "train.jsonl").read_text().splitlines() == ref_log, "log rewound to the checkpoint"
    assert not (got_dir / "work").exists(), "checkpoints are removed once the record is written"


def test_same_seed_same_weights_and_training_moves_them(tmp_path, es_suite):
    for out in ("a", "b"):
        assert main(["run", str(es_suite), "--out", str(tmp_path / out)]) == 0
    a, a_dir = only_record(tmp_path / "a")
    b, _ = only_record(tmp_path / "b")
    assert a["provenance"]["final_weights_sha256"] == b["provenance"]["final_weights_sha256"]
    assert a["provenance"]["final_weights_sha256"] != a["provenance"]["model"]["state_sha256"]
    rows = [json.loads(x) for x in (a_dir / "train.jsonl").read_text().splitlines()]
    assert any(row["reward_std"] > 0 for row in rows), "premise: some update saw different member rewards"
    for row in rows:
        assert {"reward_mean", "reward_std", "update_norm", "changed_fraction"} <= set(row)
        if row["reward_std"] > 0:
            assert row["changed_fraction"] > 0.999, "fp32 compute weights: (nearly) every coordinate moves"
        else:  # every member scored the same: all z-scores are 0, and so is the update
            assert row["changed_fraction"] == 0 and row["update_norm"] == 0
        assert "restore_residual_rms" not in row


def test_paper_bf16_mode_logs_restore_residual(tmp_path, es_suite):
    es_suite.write_text(
        es_suite.read_text()
        .replace("checkpoint_every: 2", "checkpoint_every: 2, precision: paper-bf16")
        .replace("budgets: [12]", "budgets: [2]")
    )
    assert main(["run", str(es_suite), "--out", str(tmp_path / "o")]) == 0
    rec, d = only_record(tmp_path / "o")
    assert (rec["train"]["precision"], rec["train"]["evaluated_dtype"]) == ("paper-bf16", "float32")  # policy stated
    rows = [json.loads(x) for x in (d / "train.jsonl").read_text().splitlines()]
    assert all(r["restore_residual_rms"] > 0 for r in rows), rows
    assert all(r["changed_fraction"] < 1.0 for r in rows), "bf16 rounds part of each update away"
