"""The backend seam: one backend per cell carries every generation, and `esbench run-cell` re-runs a finished cell
from its frozen cell.json bit for bit."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import small_suite

ANALYSES = """\
  probe: {prompts: 3, samples: 2, every: 1}
  diversity: {sigma: 0.01, members: 2, prompts: 3, samples: 2}
  sparsity: {taus: [0.001]}
"""


class CountingBackend:
    """Delegates to the cell's real backend and records, for every `generate`, which esbench functions asked."""

    def __init__(self, inner):
        self.inner = inner
        self.callers: list[set[str]] = []
        self.inside = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, prompts, **kw):
        self.callers.append({f.function for f in inspect.stack() if "esbench" in f.filename})
        self.inside = True
        try:
            return self.inner.generate(prompts, **kw)
        finally:
            self.inside = False

    def lm_eval_model(self):
        from esbench.backends.lm_eval_adapter import BackendLM

        return BackendLM(self)


def test_every_generation_of_a_trained_cell_goes_through_its_backend(tmp_path, tiny_model_dir, monkeypatch):
    import transformers.generation.utils as gen_utils

    import esbench.backends as backends
    from esbench.runner import run_cell
    from esbench.spec import load_suite

    suite_file = tmp_path / "seam.yaml"
    suite_file.write_text(small_suite("seam", eval_extra=ANALYSES))
    (cell,) = [c for c in load_suite(suite_file).cells() if c.labels["method"] == "es"]

    proxies: list[CountingBackend] = []
    real_build = backends.build_backend

    def build(*a, **kw):
        proxies.append(CountingBackend(real_build(*a, **kw)))
        return proxies[-1]

    outside = []
    real_generate = gen_utils.GenerationMixin.generate

    def raw_generate(model, *a, **kw):
        if not (proxies and proxies[-1].inside):
            outside.append([f.function for f in inspect.stack()[1:6]])
        return real_generate(model, *a, **kw)

    monkeypatch.setattr(backends, "build_backend", build)
    monkeypatch.setattr(gen_utils.GenerationMixin, "generate", raw_generate)
    record = run_cell(cell, tmp_path / "cell")

    assert len(proxies) == 1, "the runner builds exactly one backend per cell"
    assert outside == [], f"model.generate called outside the backend: {outside}"
    callers = proxies[0].callers
    for who in ("train", "__call__", "evaluate", "population_diversity", "functional_sparsity"):
        assert any(who in c for c in callers), f"no generation from {who}"
    assert any("train" in c and "maybe_probe" not in c for c in callers)  # the ES rollouts themselves
    assert record["sparsity"] and record["diversity"] and record["train"]["probe"]
    assert record["provenance"]["backend"]["kind"] == "hf" and record["provenance"]["backend"]["device"] == "cpu"


def _esbench(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "esbench.cli", *args], capture_output=True, text=True, env=env)


def test_run_cell_reproduces_a_finished_cell_exactly(tmp_path, tiny_model_dir, small_reference):
    """The finished cells are the session's small reference (the small suite's base and ES cells, run by the local
    executor in one process: what `esbench run` does with its default --jobs 1)."""
    cells = sorted((small_reference / "executors").glob("*/record.json"))
    assert len(cells) == 2
    for rec_path in cells:
        first = json.loads(rec_path.read_text())
        again = tmp_path / "again" / rec_path.parent.name
        proc = _esbench("run-cell", str(rec_path.parent / "cell.json"), "--out", str(again))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        second = json.loads((again / "record.json").read_text())
        assert second["cell"] == first["cell"]
        assert second["provenance"]["final_weights_sha256"] == first["provenance"]["final_weights_sha256"]
        assert second["samples_sha256"] == first["samples_sha256"] and len(first["samples_sha256"]) == 4
        for f in (rec_path.parent / "samples").glob("*.jsonl"):
            assert (again / "samples" / f.name).read_bytes() == f.read_bytes()
        if first["cell"]["spec"]["method"]["kind"] == "es":
            assert (again / "train.jsonl").read_text() == (rec_path.parent / "train.jsonl").read_text()


def test_run_cell_refuses_a_tampered_or_malformed_cell_json(tmp_path):
    from esbench.spec import load_suite

    suite_file = tmp_path / "seam.yaml"
    suite_file.write_text(small_suite("seam"))
    cell = load_suite(suite_file).cells()[0]
    tampered = cell.to_json()
    tampered["spec"] = {**tampered["spec"], "seed": 5}  # the id no longer matches
    (tmp_path / "t.json").write_text(json.dumps(tampered))
    (tmp_path / "m.json").write_text("[1, 2]")
    for name, message in (("t.json", "does not match its spec"), ("m.json", "expected an object")):
        proc = _esbench("run-cell", str(tmp_path / name), "--out", str(tmp_path / "o"))
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o" / "record.json").exists()


def test_the_plugin_surface_is_typed_and_exported():
    import esbench
    import esbench.api as api

    for name in api.__all__:
        assert getattr(api, name) is not None
    assert (Path(esbench.__file__).parent / "py.typed").exists()
    assert api.Method.loads_weights is False and api.Method.trains is True
    assert api.registry.get("es").prompts_per_update(api.registry.get("es").Config(batch_size=7)) == 7
    with pytest.raises(ValueError, match="no prompts_per_update"):
        api.Method.updates_for("1ep", 10, None)
