"""`esbench submit`: packages a finished run with a manifest, verifies it first, and refuses bad input."""

from __future__ import annotations

import json
import shutil

from lb_helpers import edit_json, esbench

from esbench.leaderboard.release import CURRENT
from esbench.leaderboard.verify import manifest_for


def test_genuine_submission_layout(genuine):
    root, sub, run, _ = genuine
    meta = json.loads((sub / "submission.json").read_text())
    assert meta["schema"] == "esbench.submission/1" and meta["release"] == CURRENT and meta["suite"] == "lbsmall"
    assert sorted(c["id"] for c in meta["cells"]) == sorted(p.name for p in (sub / "cells").iterdir())
    manifest = json.loads((sub / "MANIFEST.json").read_text())
    assert manifest == manifest_for(sub)  # every file, and only those, with its SHA-256
    names = {p.name for p in sub.rglob("*") if p.is_file()}
    assert "lm_eval.log" not in names and ".lock" not in names  # logs and locks of the run stay behind
    for cell in (sub / "cells").iterdir():
        src = run / cell.name
        assert (cell / "record.json").read_bytes() == (src / "record.json").read_bytes()
        assert sorted(p.name for p in (cell / "samples").iterdir()) == sorted(
            p.name for p in (src / "samples").iterdir()
        )
        assert json.loads((cell / "record.json").read_text())["release"] == CURRENT


def test_plugin_cell_was_trained_through_the_entry_point(genuine):
    _, sub, _, _ = genuine
    (cell,) = [
        d
        for d in (sub / "cells").iterdir()
        if "/random-search/b2/s0" in json.loads((d / "cell.json").read_text())["name"]
    ]
    record = json.loads((cell / "record.json").read_text())
    assert record["cell"]["spec"]["method"]["kind"] == "random-search"
    rows = [json.loads(x) for x in (cell / "train.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "accepted" in r]
    assert [r["update"] for r in steps] == [0, 1] and record["budget_used"]["updates"] == 2
    assert record["train"]["accepted_updates"] == sum(r["accepted"] for r in steps)
    assert record["budget_used"]["rollouts"] == 2 * (1 + 2) * 8  # (current + 2 candidates) x 8 prompts per update


def test_duplicate_name_is_an_error(genuine):
    root, _, run, _ = genuine
    proc = esbench("submit", str(run), "--name", "genuine", "--root", str(root))
    assert proc.returncode == 2 and "already exists" in proc.stderr


def test_bad_names_and_missing_runs(genuine, tmp_path):
    root, _, run, _ = genuine
    proc = esbench("submit", str(run), "--name", "../escape", "--root", str(root))
    assert proc.returncode == 2 and "invalid submission name" in proc.stderr
    proc = esbench("submit", str(tmp_path / "none"), "--name", "x", "--root", str(root))
    assert proc.returncode == 2 and "no such run folder" in proc.stderr


def test_output_root_with_one_suite_is_accepted_and_unfinished_cells_refused(genuine, tmp_path):
    root, _, run, _ = genuine
    lb = tmp_path / "leaderboard"
    shutil.copytree(root / "releases", lb / "releases")
    out = tmp_path / "runs"
    shutil.copytree(run, out / "lbsmall", ignore=shutil.ignore_patterns("*.lock"))
    proc = esbench("submit", str(out), "--name", "from-root", "--root", str(lb))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (lb / "submissions" / "from-root" / "MANIFEST.json").exists()
    cell = next(p for p in (out / "lbsmall").iterdir() if p.is_dir())
    (cell / "record.json").unlink()
    proc = esbench("submit", str(out / "lbsmall"), "--name", "partial", "--root", str(lb))
    assert proc.returncode == 2 and f"cells not done (no record.json): {cell.name}" in proc.stderr


def test_run_from_another_release_is_refused(genuine, tmp_path):
    root, _, run, _ = genuine
    out = tmp_path / "lbsmall"
    shutil.copytree(run, out)
    edit_json(next(out.glob("*/record.json")), lambda r: r.update(release="v0.9"))
    proc = esbench("submit", str(out), "--name", "old", "--root", str(root))
    assert proc.returncode == 2 and "made under release v0.9" in proc.stderr
    assert not (root / "submissions" / "old").exists()


def test_a_run_that_fails_verification_leaves_nothing_behind(genuine, tmp_path):
    root, _, run, _ = genuine
    lb = tmp_path / "leaderboard"
    shutil.copytree(root / "releases", lb / "releases")
    out = tmp_path / "lbsmall"
    shutil.copytree(run, out)
    edit_json(next(out.glob("*/record.json")), lambda r: r["metrics"]["tiny_arith"].update({"pass@2": 0.123456}))
    proc = esbench("submit", str(out), "--name", "edited", "--root", str(lb))
    assert proc.returncode == 1 and "edited metric: metrics.tiny_arith.pass@2" in proc.stderr
    assert list((lb / "submissions").iterdir()) == []  # no submission and no temporary folder


def test_a_run_whose_record_is_wrongly_typed_is_refused_by_field(genuine, tmp_path):
    """The run's records are validated as verify validates them (`esbench.records.Record`, no coercion), before
    anything is packaged."""
    root, _, run, _ = genuine
    out = tmp_path / "lbsmall"
    shutil.copytree(run, out)
    edit_json(next(out.glob("*/record.json")), lambda r: r["budget_used"].update(rollouts="48"))
    proc = esbench("submit", str(out), "--name", "typed", "--root", str(root))
    assert proc.returncode == 2 and "cannot package the run" in proc.stderr, proc.stderr
    assert "record.json: budget_used.rollouts: Input should be a valid integer (got '48')" in proc.stderr
    assert not (root / "submissions" / "typed").exists()
