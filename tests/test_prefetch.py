"""`esbench prefetch` fills the Hugging Face caches from a hub (here `tests/fakehub.py`, serving real files at pinned
revisions), after which the same suite's models and datasets load with the hub switched off; and `esbench run` of a
suite whose artefacts are neither cached nor reachable stops before any cell, listing all of them at once.

The HF libraries read their endpoint, offline flags and cache paths at import time, so every step that talks to a
hub, or must not, runs in a subprocess with an explicit environment (`FakeHub.env`)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fakehub import FakeHub, hub_env

from esbench.prefetch import artefacts
from esbench.spec import load_suite
from esbench.tasks.hub import SOURCES

REPO = Path(__file__).resolve().parent.parent
MODEL, MODEL_REV = "esbench-fixtures/tiny-llama", "3" * 40
GSM8K = SOURCES["gsm8k"]
README = """\
---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train.jsonl
  - split: test
    path: main/test.jsonl
---
"""
SUITE = f"""\
name: prefetch
models: {{tiny: {{path: {MODEL}, revision: "{MODEL_REV}"}}}}
datasets: {{gsm8k: {{task: gsm8k}}}}
methods: {{base: {{}}, es: {{method: es}}}}
budgets: [1]
seeds: [0]
eval: {{tasks: [gsm8k], limit: 2, n: 1, k: [1]}}
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The fake hub with a tiny Llama at a pinned commit and the GSM8K fixture rows at GSM8K's real pinned commit."""
    from esbench.models import load_model

    src = tmp_path_factory.mktemp("prefetch_src")
    tiny = load_model("builtin:tiny")
    tiny.model.save_pretrained(src / "model")
    tiny.tokenizer.save_pretrained(src / "model")
    shutil.copytree(REPO / "tests/fixtures/datasets/openai/gsm8k/main", src / "data" / "main")
    (src / "data" / "README.md").write_text(README)
    with FakeHub() as hub:
        hub.add_model(MODEL, MODEL_REV, src / "model")
        hub.add_dataset(GSM8K.path, GSM8K.revision, src / "data")
        yield hub


def _esbench(env: dict, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in env.items() if k != "ESBENCH_DATASETS_DIR"}  # no local mirror: the hub or the cache
    return subprocess.run(
        [sys.executable, "-m", "esbench.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_prefetch_then_everything_loads_with_the_hub_off(hub, tmp_path):
    suite = tmp_path / "prefetch.yaml"
    suite.write_text(SUITE)
    hf_home = tmp_path / "hf"
    online, offline = hub.env(hf_home, offline=False), hub.env(hf_home, offline=True)

    before = _esbench(offline, "run", str(suite), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert before.returncode == 2, before.stderr
    assert f"model {MODEL}@333333333333" in before.stderr and "dataset openai/gsm8k@740312add88f" in before.stderr
    assert not (tmp_path / "runs").exists()

    fetched = _esbench(online, "prefetch", str(suite), cwd=tmp_path)
    assert fetched.returncode == 0, fetched.stderr
    assert "fetched  model esbench-fixtures/tiny-llama" in fetched.stdout
    assert "fetched  dataset openai/gsm8k@740312add88f config main splits test, train" in fetched.stdout

    served = len(hub.requests)
    check = textwrap.dedent(f"""
        import json
        from esbench.spec import load_suite
        from esbench.prefetch import artefacts, missing
        from esbench.models import load_model
        from esbench.tasks import get_task
        cells = load_suite({str(suite)!r}).cells()
        gone = missing(artefacts(cells))
        m = load_model({MODEL!r}, revision={MODEL_REV!r})
        rows = get_task("gsm8k").rows("test", 2) + get_task("gsm8k").rows("train", 2)  # the fixture has 1 train row
        print(json.dumps({{"missing": [a.describe() for a, _ in gone], "params": m.provenance["parameters"],
                          "resolved": m.provenance["resolved_revision"], "rows": [r["answer"] for r in rows]}}))
    """)
    proc = subprocess.run([sys.executable, "-c", check], env=offline, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["missing"] == [] and out["params"] == 1333440 and out["resolved"] == MODEL_REV
    assert len(out["rows"]) == 3 and all(a.lstrip("-").isdigit() for a in out["rows"])
    again = _esbench(offline, "prefetch", str(suite), cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.count("cached   ") == 2, again.stdout + again.stderr
    assert len(hub.requests) == served  # nothing offline reached the hub


def test_run_with_the_hub_unreachable_lists_every_missing_artefact_before_any_cell(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on: connections are refused at once
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    env = hub_env(f"http://127.0.0.1:{closed}", tmp_path / "hf", offline=False)
    proc = _esbench(env, "run", str(REPO / "suites/paper-easy.yaml"), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("  ")]
    models = [ln.split()[1].split("@")[0] for ln in lines if ln.startswith("  model ")]
    assert models == ["Qwen/Qwen2.5-1.5B-Instruct", "meta-llama/Llama-3.2-3B-Instruct", "Qwen/Qwen2.5-7B-Instruct"]
    monkeypatch.delenv("ESBENCH_DATASETS_DIR", raising=False)
    expected = artefacts(load_suite(REPO / "suites/paper-easy.yaml").cells())
    assert [ln.split(": ")[0].strip() for ln in lines] == [a.describe() for a in expected]
    assert sum(a.kind == "dataset" for a in expected) >= 6  # GSM8K and the held-out tasks, every one listed
    assert all("the hub did not serve it" in ln for ln in lines)
    assert "no cell was started" in proc.stderr and not (tmp_path / "runs").exists()
