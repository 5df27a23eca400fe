"""The local executor: `--jobs 2` runs cells as `esbench run-cell` processes and gives the in-process run's files bit
for bit (each cell's backend fixes its own CPU threads); a failing cell is reported with its traceback."""

from __future__ import annotations

from executor_helpers import assert_same_cell, run_with, suite_cells


def test_two_jobs_reproduce_the_in_process_run(tmp_path, tiny_model_dir):
    from esbench.records import cell_dir

    suite, cells = suite_cells(tmp_path)
    failed, _ = run_with("local", cells, tmp_path / "one", suite)
    assert failed == []
    import io

    from rich.console import Console

    from esbench.executors import get_executor

    run_cells = get_executor("local")

    console = Console(file=io.StringIO(), width=120)
    assert run_cells(cells, lambda c: cell_dir(tmp_path / "two", suite, c.id), console, jobs=2) == []
    for c in cells:
        trained = c.spec["dataset"] is not None
        assert_same_cell(cell_dir(tmp_path / "one", suite, c.id), cell_dir(tmp_path / "two", suite, c.id), trained)


def test_a_failing_cell_in_a_subprocess_is_reported_with_its_traceback(tmp_path, tiny_model_dir):
    import io

    from rich.console import Console

    from esbench.executors import get_executor

    run_cells = get_executor("local")
    from esbench.records import CellDir, cell_dir
    from esbench.spec import Cell

    suite, cells = suite_cells(tmp_path)
    base = next(c for c in cells if c.spec["method"]["kind"] == "base")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{}")  # passes validation, fails to load in the child
    broken = Cell({**base.spec, "model": {**base.spec["model"], "path": str(tmp_path / "broken")}}, base.labels)
    console = Console(file=io.StringIO(), width=120)
    failed = run_cells([broken, base], lambda c: cell_dir(tmp_path / "o", suite, c.id), console, jobs=2)
    assert [c.id for c, _ in failed] == [broken.id]
    assert "run-cell exited" in failed[0][1]
    assert "Traceback" in CellDir(cell_dir(tmp_path / "o", suite, broken.id)).error_log.read_text()
    assert CellDir(cell_dir(tmp_path / "o", suite, base.id)).record.exists(), "the other cell still ran"
