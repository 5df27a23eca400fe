"""Records that are validated before they are written. (The cell lease that keeps two runners apart is
tests/test_leases.py's.)"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from esbench.records import RELEASE, CellDir, Events, append_jsonl, atomic_write_text, read_jsonl, write_record


def _good() -> dict:
    return {
        "schema": "esbench.record/1",
        "release": RELEASE,
        "cell": {},
        "metrics": {"t": {"problems": 1, "n": 2, "per_problem": [[2, 1]], "format_rate": 1.0, "pass@1": 0.5}},
        "samples_sha256": {},
        "held_out": [],
        "train": {},
        "budget_used": {"updates": 0, "rollouts": 0, "generated_tokens": 0},
        "timings": {"total_s": 1.0},
        "provenance": {},
    }


def test_a_malformed_record_is_never_written(tmp_path):
    good = _good()
    write_record(tmp_path / "ok.json", good)
    assert json.loads((tmp_path / "ok.json").read_text())["metrics"]["t"]["pass@1"] == 0.5
    bad = {**good, "budget_used": {"updates": -1, "rollouts": 0, "generated_tokens": 0}}
    with pytest.raises(ValidationError):
        write_record(tmp_path / "bad.json", bad)
    assert not (tmp_path / "bad.json").exists()


def test_a_cell_folder_reads_back_as_typed_records_and_rows(tmp_path):
    cd = CellDir(tmp_path / "cell")
    write_record(cd.record, _good())
    record = cd.read_record()
    assert record.metrics["t"].metric("pass@1") == 0.5 and record.metrics["t"].metric("pass@4") is None
    assert record.compute is None and record.drift is None
    assert record.as_dict() == _good(), "the typed record gives back what record.json holds"
    sample = {"doc_id": 0, "doc": {"question": "1+1"}, "resps": ["2", "?"], "answers": ["2", None]}
    atomic_write_text(cd.samples / "t.jsonl", json.dumps({**sample, "correct": [True, False], "lm_eval_pass@1": 0.5}))
    (row,) = cd.sample_rows("t")
    assert row.answers == ["2", None] and row.correct == [True, False] and row.model_extra == {"lm_eval_pass@1": 0.5}
    assert cd.train_rows() == [], "a cell without a training log has no rows"
    probe = {"entropy": 1.5, "success": 0.5, "pass@k": {"1": 0.5}, "tokens": 9}
    append_jsonl(cd.train_log, {"update": 0, "probe": probe})
    append_jsonl(cd.train_log, {"update": 0, "reward_mean": 0.25, "tokens": 12, "loss": 0.1, "kl": None})
    measured, step = cd.train_rows()
    assert measured.probe.pass_at_k == {"1": 0.5} and measured.probe.entropy == 1.5 and measured.reward_mean is None
    assert step.reward_mean == 0.25 and step.tokens == 12 and step.model_extra == {"loss": 0.1, "kl": None}


def test_one_reader_for_json_lines_files(tmp_path):
    path = tmp_path / "rows.jsonl"
    with pytest.raises(FileNotFoundError):
        read_jsonl(path)
    assert read_jsonl(path, missing_ok=True) == [] and read_jsonl(path, live=True) == []
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": ')  # a blank line, and a line still being written
    assert read_jsonl(path, live=True) == [{"a": 1}, {"a": 2}], "a file another process appends to"
    with pytest.raises(ValueError):
        read_jsonl(path)  # a finished file's torn line is an error


def test_a_driver_follows_a_cells_events_while_a_line_is_being_written(tmp_path):
    cd = CellDir(tmp_path)
    events = Events(cd.events)
    assert cd.event_rows() == [] and events.attempt() is None
    events.emit("started")
    events.emit("stage", stage="model loaded")
    with open(cd.events, "a") as f:
        f.write('{"t": 1.0, "eve')
    rows = cd.event_rows()
    assert [r.event for r in rows] == ["started", "stage"] and rows[1].stage == "model loaded" and rows[0].pid > 0
    assert events.attempt() == (1, "model loaded")


def test_a_rewound_train_log_keeps_the_earlier_rows_byte_for_byte(tmp_path):
    from esbench.methods import TrainContext

    ctx = TrainContext(seed=0, workdir=tmp_path, log_path=tmp_path / "train.jsonl", prompt=str, backend=None)
    for u in range(3):
        ctx.log({"update": u, "reward_mean": u / 3, "probe": {"entropy": 0.1, "success": 1.0}, "stage_method": "es"})
    lines = ctx.log_path.read_text().splitlines(keepends=True)
    ctx.rewind(2)
    assert ctx.log_path.read_text() == "".join(lines[:2])


def test_every_submitted_record_and_its_evidence_read_back(repo):
    cells = sorted(p.parent for p in (repo / "leaderboard" / "submissions").glob("*/cells/*/record.json"))
    assert cells, "premise: the repository holds submissions"
    for d in cells:
        cd = CellDir(d)
        record = cd.read_record()
        assert record.as_dict() == json.loads(cd.record.read_text()), d
        for task, m in record.metrics.items():
            assert len(cd.sample_rows(task)) == m.problems
        assert all(r.update >= 0 for r in cd.train_rows())
