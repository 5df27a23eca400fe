"""The local executor: `--jobs 2` runs cells as `esbench run-cell` processes and gives the in-process run's files bit
for bit (each cell's backend fixes its own CPU threads); a failing cell is reported with its traceback."""

from __future__ import annotations

from executor_helpers import assert_same_cell, on_model
from run_helpers import suite_cells


def test_two_jobs_reproduce_the_in_process_run(tmp_path, tiny_model_dir, small_reference):
    from esbench.records import cell_dir

    suite, cells = suite_cells(tmp_path)
    one = small_reference  # these cells run in process (jobs=1), once per session
    import io

    from rich.console import Console

    from esbench.executors import get_executor

    run_cells = get_executor("local")

    console = Console(file=io.StringIO(), width=120)
    assert run_cells(cells, lambda c: cell_dir(tmp_path / "two", suite, c.id), console, jobs=2) == []
    for c in cells:
        trained = c.spec["dataset"] is not None
        assert_same_cell(cell_dir(one, suite, c.id), cell_dir(tmp_path / "two", suite, c.id), trained)


def test_a_failing_cell_in_a_subprocess_is_reported_with_its_traceback(tmp_path, tiny_model_dir):
    import io

    from rich.console import Console

    from esbench.executors import get_executor

    run_cells = get_executor("local")
    from esbench.records import CellDir, cell_dir

    suite, cells = suite_cells(tmp_path)
    base = next(c for c in cells if c.spec["method"]["kind"] == "base")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{}")  # passes validation, fails to load in the child
    broken = on_model(base, tmp_path / "broken")
    console = Console(file=io.StringIO(), width=120)
    failed = run_cells([broken, base], lambda c: cell_dir(tmp_path / "o", suite, c.id), console, jobs=2)
    assert [c.id for c, _ in failed] == [broken.id]
    assert "run-cell exited" in failed[0][1]
    assert "Traceback" in CellDir(cell_dir(tmp_path / "o", suite, broken.id)).error_log.read_text()
    assert CellDir(cell_dir(tmp_path / "o", suite, base.id)).record.exists(), "the other cell still ran"


# A stand-in for `esbench run-cell`: records the devices it was given and when it ran. The first two cells wait for
# each other (so both must hold a GPU at once), then each runs a little longer.
FAKE_CELL = """
import json, os, sys, time
from pathlib import Path
out, barrier = Path(sys.argv[1]), Path(sys.argv[2])
start = time.monotonic()
(barrier / str(os.getpid())).touch()
deadline = start + 20
while len(list(barrier.iterdir())) < 2 and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(0.3)
row = {"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start, "end": time.monotonic()}
(out / "ran.json").write_text(json.dumps(row))
"""


def test_concurrent_gpu_cells_each_get_their_own_gpu(tmp_path, monkeypatch):
    """`--jobs 3` on a host with 2 GPUs: each running cell sees one distinct CUDA_VISIBLE_DEVICES, and the third
    waits for a GPU to be released instead of landing on GPU 0 beside another vLLM engine."""
    import io
    import json
    import sys

    from rich.console import Console

    from esbench.executors import get_executor, local
    from esbench.records import cell_dir
    from esbench.spec import Cell

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ESBENCH_ES_WORKERS", raising=False)
    monkeypatch.setattr(local, "gpu_count", lambda: 2)
    barrier = tmp_path / "started"
    barrier.mkdir()
    monkeypatch.setattr(
        local, "cell_command", lambda h, *a: [sys.executable, "-c", FAKE_CELL, str(h.cd.path), str(barrier)]
    )
    suite, cells = suite_cells(tmp_path)
    base = next(c for c in cells if c.spec["method"]["kind"] == "base")
    gpu_cells = [Cell({**base.spec, "seed": s}, base.labels) for s in range(3)]  # device: auto, as paper suites
    console = Console(file=io.StringIO(), width=120)
    dirs = [cell_dir(tmp_path / "o", suite, c.id) for c in gpu_cells]
    assert get_executor("local")(gpu_cells, lambda c: cell_dir(tmp_path / "o", suite, c.id), console, jobs=3) == []

    runs = [json.loads((d / "ran.json").read_text()) for d in dirs]
    assert sorted(r["cvd"] for r in runs) in (["0", "0", "1"], ["0", "1", "1"]), runs
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            if a["start"] < b["end"] and b["start"] < a["end"]:  # ran at the same time
                assert a["cvd"] != b["cvd"], runs
    first, second, third = sorted(runs, key=lambda r: r["start"])
    assert {first["cvd"], second["cvd"]} == {"0", "1"}
    same = first if first["cvd"] == third["cvd"] else second
    assert third["start"] >= same["end"] - 0.05, "the third cell started before its GPU was released"


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    from esbench.executors import local

    monkeypatch.setattr(local, "gpu_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert local.visible_gpus() == ["3", "5"]  # the host ids the parent was given, handed on as they are
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,-1,6")
    assert local.visible_gpus() == ["4"]  # CUDA stops at an invalid entry
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert local.visible_gpus() == ["0", "1"]
    monkeypatch.setattr(local, "gpu_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert local.visible_gpus() == []
