"""A cell that grades model-written code stops before anything loads where the confined sandbox cannot run."""

from __future__ import annotations

import pytest
from run_helpers import small_suite

from esbench.runner import run_cell
from esbench.spec import Cell, load_suite
from esbench.tasks import sandbox


@pytest.fixture
def base_cell(tmp_path) -> Cell:
    suite = tmp_path / "s.yaml"
    suite.write_text(small_suite("sbx"))
    return next(c for c in load_suite(suite).cells() if c.labels["method"] == "base")


def test_a_cell_grading_code_needs_the_sandbox(base_cell, tmp_path, monkeypatch):
    import esbench.models

    monkeypatch.setattr(sandbox, "_bwrap_probe", lambda: "bubblewrap (bwrap) is not installed")
    monkeypatch.setattr(esbench.models, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    code = Cell(
        {**base_cell.spec, "eval": {**base_cell.spec["eval"], "tasks": [*base_cell.spec["eval"]["tasks"], "mbpp"]}},
        dict(base_cell.labels),
    )
    out = tmp_path / "cell"
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        run_cell(code, out)
    assert not (out / "cell.json").exists() and not (out / "record.json").exists()
    # a cell without code tasks does not ask for it (the check is per cell, not global)
    from esbench.runner import _require_code_sandbox

    _require_code_sandbox(base_cell.typed)
