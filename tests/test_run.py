"""`esbench run` end to end on the real tiny model: records, evidence, resume, idempotence, --only, plan."""

from __future__ import annotations

import json

import pytest

from esbench.cli import main
from esbench.metrics.passk import majority_correct, mean_pass_at_k
from esbench.records import RECORD_SCHEMA


@pytest.fixture
def two_seed_suite(small_suite):
    small_suite.write_text(small_suite.read_text().replace("seeds: [0]", "seeds: [0, 1]"))
    return small_suite


def records(out):
    return {p.parent.name: p for p in sorted(out.glob("small/*/record.json"))}


def test_run_writes_recomputable_records_and_is_idempotent(tmp_path, two_seed_suite, capsys):
    out = tmp_path / "runs"
    assert main(["run", str(two_seed_suite), "--out", str(out)]) == 0
    first = capsys.readouterr().out
    assert "2 of 2 cells to run" in first and "Pass@1" in first and "tiny_reverse*" in first
    recs = records(out)
    assert len(recs) == 2

    for path in recs.values():
        rec = json.loads(path.read_text())
        assert rec["schema"] == RECORD_SCHEMA and rec["cell"]["id"] == path.parent.name
        assert json.loads((path.parent / "cell.json").read_text())["spec"] == rec["cell"]["spec"]
        events = [json.loads(x) for x in (path.parent / "events.jsonl").read_text().splitlines()]
        assert events[0]["event"] == "started" and events[-1]["event"] == "done"
        assert [e["stage"] for e in events[1:-1]][-1] == "record written" and events[0]["t"] <= events[-1]["t"]
        prov = rec["provenance"]
        for key in (
            "esbench",
            "git_commit",
            "container_image_digest",
            "python",
            "packages",
            "cuda",
            "seeds",
            "model",
            "datasets",
            "final_weights_sha256",
        ):
            assert key in prov, key
        assert prov["model"]["weights_sha256"] and prov["datasets"]["eval"]["tiny_arith"]["rows"] == 6
        assert prov["final_weights_sha256"] == prov["model"]["state_sha256"], "base must not change weights"
        for task in ("tiny_arith", "tiny_reverse"):
            m = rec["metrics"][task]
            samples = [json.loads(x) for x in (path.parent / "samples" / f"{task}.jsonl").read_text().splitlines()]
            greedy = [
                json.loads(x) for x in (path.parent / "samples" / f"{task}.greedy.jsonl").read_text().splitlines()
            ]
            assert len(samples) == 6 and all(len(s["resps"]) == 4 for s in samples)
            # every number in the record is recomputable from its evidence
            assert m["per_problem"] == [[4, sum(s["correct"])] for s in samples]
            for k in (1, 4):
                assert m[f"pass@{k}"] == pytest.approx(mean_pass_at_k(m["per_problem"], k))
                assert m[f"maj@{k}"] == pytest.approx(
                    sum(majority_correct(s["answers"], s["correct"], k) for s in samples) / 6
                )
            assert m["greedy"] == pytest.approx(sum(g["correct"][0] for g in greedy) / 6)
            assert 0 <= m["pass@1"] <= m["pass@4"] <= 1
    mtimes = {k: p.stat().st_mtime_ns for k, p in recs.items()}

    # A second run does no work.
    assert main(["run", str(two_seed_suite), "--out", str(out)]) == 0
    assert "all 2 cells of 'small' are done" in capsys.readouterr().out
    assert {k: p.stat().st_mtime_ns for k, p in records(out).items()} == mtimes

    # Deleting one record re-runs exactly that cell, with identical results (same seed, one thread).
    victim, keeper = sorted(recs)
    before = json.loads(recs[victim].read_text())
    recs[victim].unlink()
    assert main(["plan", str(two_seed_suite), "--out", str(out), "--json"]) == 0
    plan = {r["id"]: r["status"] for r in json.loads(capsys.readouterr().out)}
    assert plan == {victim: "partial", keeper: "done"}
    assert main(["run", str(two_seed_suite), "--out", str(out)]) == 0
    assert "1 of 2 cells to run" in capsys.readouterr().out
    assert records(out)[keeper].stat().st_mtime_ns == mtimes[keeper]
    after = json.loads(records(out)[victim].read_text())
    assert after["metrics"] == before["metrics"]


def test_only_selects_cells_by_name_or_id(tmp_path, two_seed_suite, capsys):
    out = tmp_path / "runs"
    assert main(["run", str(two_seed_suite), "--out", str(out), "--only", "*/s1"]) == 0
    (rec,) = records(out).values()
    assert json.loads(rec.read_text())["cell"]["spec"]["seed"] == 1
    capsys.readouterr()
    assert main(["plan", str(two_seed_suite), "--out", str(out), "--json"]) == 0
    statuses = sorted(r["status"] for r in json.loads(capsys.readouterr().out))
    assert statuses == ["done", "pending"]
    with pytest.raises(SystemExit) as exc:
        main(["run", str(two_seed_suite), "--out", str(out), "--only", "nomatch*"])
    assert exc.value.code == 2


def test_failed_cell_exits_nonzero_naming_it(tmp_path, small_suite, capsys, monkeypatch):
    import esbench.evaluation

    def boom(*a, **k):
        raise RuntimeError("simulated evaluation failure")

    monkeypatch.setattr(esbench.evaluation, "evaluate", boom)
    out = tmp_path / "runs"
    assert main(["run", str(small_suite), "--out", str(out)]) == 1
    text = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "cell" in text and "failed: RuntimeError: simulated evaluation failure" in text
    (cell_dir,) = [d for d in (out / "small").iterdir() if d.is_dir()]
    assert not (cell_dir / "record.json").exists() and (cell_dir / "error.log").exists()
    events = [json.loads(line) for line in (cell_dir / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["started", "stage", "failed"]  # model loaded, then the failure
    assert events[1]["stage"] == "model loaded" and "simulated evaluation failure" in events[2]["error"]
    assert main(["run", str(small_suite), "--out", str(out)]) == 1  # a retry is a new attempt in the same file
    assert [e["event"] for e in (json.loads(x) for x in (cell_dir / "events.jsonl").read_text().splitlines())][3] == (
        "started"
    )


def test_env_prints_provenance(capsys):
    assert main(["env"]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["packages"]["torch"].startswith("2.13") and env["python"]
