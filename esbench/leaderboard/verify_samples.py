"""A cell's metrics re-derived from its per-sample logs, for `esbench leaderboard verify`.

Each log must hash to what the record bound at run time; its rows are parsed from those same bytes and validated
into `esbench.records.SampleRow`, every response is re-graded by the task verifier against the release's eval set,
and the metrics (pass@k, maj@k, greedy, answer entropy) are recomputed and compared with the record's as its file
states them. Separate from verify_cell.py, which checks the rest of a
cell folder (record shape, grid place, provenance, data, training log) and calls `_recompute` last; this module is
the lower one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from esbench.leaderboard.grid import _canon
from esbench.leaderboard.release import task_source, verifier_fingerprint
from esbench.leaderboard.verify_report import CellResult, Report, _close, _refused, _validated
from esbench.records import Record, SampleRow
from esbench.untrusted import UntrustedInputError, loads, read_bytes


def _read_samples(
    data: bytes | None, where: str, report: Report
) -> tuple[list[dict[str, Any]], list[SampleRow]] | None:
    """The rows of a per-sample log, parsed from the very bytes whose hash was checked: as written (what the
    evidence hash is made of) and as `SampleRow`s (None: missing or refused)."""
    if data is None:
        report.add(f"{where}: missing per-sample log")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        report.add(f"{where}: not UTF-8 ({e.reason} at byte {e.start})")
        return None
    rows, typed = [], []
    for i, line in enumerate(text.splitlines(), 1):
        try:
            row = loads(line, what=f"{where}:{i}")
        except UntrustedInputError as e:
            report.add(str(e))
            return None
        if not isinstance(row, dict) or not isinstance(row.get("resps"), list) or not isinstance(row.get("doc"), dict):
            report.add(f"{where}:{i}: a sample row needs doc_id, doc and resps")
            return None
        got = _validated(SampleRow, row, f"{where}:{i}", report)
        if got is None:
            return None
        rows.append(row)
        typed.append(got)
    return rows, typed


def _rescore(
    rows: list[SampleRow], task_name: str, expected: list[dict[str, str]], n: int, where: str, report: Report
) -> list[dict[str, Any]] | None:
    """Evidence rows rebuilt from responses alone: doc checked against the eval set, verdicts recomputed."""
    from esbench.tasks import get_task

    task = get_task(task_name)
    ok = True
    ids = [r.doc_id for r in rows]
    if sorted(ids) != list(range(len(expected))):
        missing = sorted(set(range(len(expected))) - set(ids))
        dup = sorted({i for i in ids if ids.count(i) > 1}, key=str)
        report.add(
            f"{where}: {len(rows)} problems, the release's eval set has {len(expected)}"
            + (f"; missing doc_ids {missing[:10]}" if missing else "")
            + (f"; duplicated doc_ids {dup[:10]}" if dup else "")
            + " (removed or added samples)"
        )
        ok = False
    out = []
    flags_wrong = 0
    for r in sorted(rows, key=lambda r: r.doc_id):
        i = r.doc_id
        if not 0 <= i < len(expected):
            continue
        gold = expected[i]
        doc = r.doc
        if (doc.get("id"), doc.get("question"), doc.get("answer")) != (gold["id"], gold["question"], gold["answer"]):
            report.add(
                f"{where}: doc_id {i} is not the release's problem {gold['id']} (question or gold answer edited)"
            )
            ok = False
        resps = r.resps
        if len(resps) != n:
            report.add(f"{where}: doc_id {i} has {len(resps)} responses, the cell samples {n} per problem")
            ok = False
            continue
        verdicts = [task.verify(x, gold["answer"]) for x in resps]
        answers = [v.answer for v in verdicts]
        correct = [v.correct for v in verdicts]
        if r.correct != correct or r.answers != answers:
            flags_wrong += 1
        out.append({"doc_id": i, "answers": answers, "correct": correct})
    if flags_wrong:
        report.add(f"{where}: stored answers/correct flags of {flags_wrong} problems disagree with the task verifier")
    return out if ok else None


def _derived(claimed: dict[str, Any], sampled: list[dict[str, Any]]) -> dict[str, Any]:
    """Further metrics that are functions of the sampled answers alone (recomputed when the record has them)."""
    out: dict[str, Any] = {}
    if "answer_entropy" in claimed:
        try:
            from esbench.evaluation import answer_entropy
        except ImportError:
            return out
        out["answer_entropy"] = answer_entropy(sampled)
    return out


def _recompute(
    where: str,
    d: Path,
    record: Record,
    metrics: dict[str, Any],
    release: dict[str, Any],
    result: CellResult,
    report: Report,
) -> None:
    """Recompute the metrics of `record` from its samples; `metrics` is its `metrics` as the file states them (the
    keys each task has, its numbers before validation made integers floats), which the recomputed ones must equal."""
    from esbench.evaluation import summarise
    from esbench.metrics.passk import majority_correct, pass_at_k
    from esbench.tasks import get_task

    ev = record.cell["spec"]["eval"]
    if sorted(metrics) != sorted(ev["tasks"]):
        report.add(f"{where}: record metrics cover {sorted(metrics)}, the cell evaluates {sorted(ev['tasks'])}")
    if record.held_out != ev.get("held_out", []):
        report.add(f"{where}: record held_out {record.held_out} differs from the cell's eval.held_out")
    allowed = {f"{t}.jsonl" for t in ev["tasks"]} | (
        {f"{t}.greedy.jsonl" for t in ev["tasks"]} if ev["greedy"] else set()
    )
    evidence = hashlib.sha256()
    samples_dir = d / "samples"
    # The run hashed its per-sample logs into the record: an edit that keeps every verdict (say, to a response's
    # reasoning) still breaks the binding, even when the manifest was re-made. Each log is read once (strictly),
    # hashed, and parsed from those same bytes; the first hash that fails ends the work.
    bound = record.samples_sha256
    present = sorted(p.name for p in samples_dir.glob("*.jsonl")) if samples_dir.is_dir() else []
    data: dict[str, bytes] = {}
    for name in sorted(set(bound) | set(present)):
        if name not in present:
            report.add(f"{where}/samples/{name}: removed (the record hashed it at run time)")
            continue
        if name not in bound:
            report.add(f"{where}/samples/{name}: not produced by the run (absent from the record's samples_sha256)")
            continue
        try:
            data[name] = read_bytes(samples_dir / name)
        except UntrustedInputError as e:
            report.stop(_refused(e, samples_dir / name, f"{where}/samples/{name}"))
            return
        if hashlib.sha256(data[name]).hexdigest() != bound[name]:
            report.stop(f"{where}/samples/{name}: edited sample (SHA-256 differs from the record's samples_sha256)")
            return
    if samples_dir.is_dir():
        for p in sorted(samples_dir.iterdir()):
            if p.name not in allowed:
                report.add(f"{where}/samples/{p.name}: not a per-sample log of this cell")
    for t in ev["tasks"]:
        pin = release["tasks"].get(t)
        if pin is None:
            continue
        task = get_task(t)
        scheme = release.get("fingerprint_scheme", 1)
        if task.version != pin["version"] or verifier_fingerprint(task.verifier, scheme) != pin["verifier_sha256"]:
            report.add(f"{where}: task {t}'s verifier differs from release {release['id']}; metrics are not comparable")
            continue
        if "source" in pin and task_source(task) != pin["source"]:
            report.add(f"{where}: task {t}'s data source differs from release {release['id']}: {pin['source']}")
            continue
        expected = task.rows("test", ev.get("limit") or None)
        claimed = metrics.get(t)
        read = _read_samples(data.get(f"{t}.jsonl"), f"{where}/samples/{t}.jsonl", report)
        greedy = None
        if ev["greedy"]:
            greedy_read = _read_samples(data.get(f"{t}.greedy.jsonl"), f"{where}/samples/{t}.greedy.jsonl", report)
            if greedy_read is not None:
                greedy = _rescore(greedy_read[1], t, expected, 1, f"{where}/samples/{t}.greedy.jsonl", report)
        if read is None:
            continue
        raw, rows = read
        sampled = _rescore(rows, t, expected, ev["n"], f"{where}/samples/{t}.jsonl", report)
        if sampled is None or (ev["greedy"] and greedy is None):
            continue
        evidence.update(response_evidence(raw))
        got = summarise(sampled, greedy, ev["k"])
        got.update(_derived(claimed if isinstance(claimed, dict) else {}, sampled))
        if not isinstance(claimed, dict):
            report.add(f"{where}: metrics.{t} must be an object of metrics (samples give {sorted(got)})")
            continue
        for key in sorted(set(got) | set(claimed)):
            if key not in claimed:
                report.add(f"{where}: metrics.{t}.{key} is missing from the record")
            elif key not in got:
                report.unverified.setdefault(f"metrics.{t}.{key}", []).append(result.id)
            elif key == "per_problem":
                if claimed[key] != got[key]:
                    report.add(f"{where}: metrics.{t}.per_problem does not match the samples")
            elif not _close(claimed[key], got[key]):
                report.add(f"{where}: edited metric: metrics.{t}.{key} is {claimed[key]!r}, samples give {got[key]!r}")
        result.recomputed[t] = got
        pp: dict[str, list[float]] = {}
        for k in ev["k"]:
            pp[f"pass@{k}"] = [pass_at_k(len(r["correct"]), sum(r["correct"]), k) for r in sampled]
            pp[f"maj@{k}"] = [float(majority_correct(r["answers"], r["correct"], k)) for r in sampled]
        if greedy is not None:
            pp["greedy"] = [float(r["correct"][0]) for r in greedy]
        result.per_problem[t] = pp
    result.evidence = evidence.hexdigest() if result.recomputed else ""


def response_evidence(rows: list[dict[str, Any]]) -> bytes:
    """A task's sampled responses in a canonical form, whatever the file's formatting or row order: what a cell's
    evidence hash is made of (here and in `verify.submission_evidence`, which must agree with it)."""
    ordered = sorted((r for r in rows if isinstance(r.get("doc_id"), int)), key=lambda r: r["doc_id"])
    return _canon([r.get("resps") for r in ordered]).encode()
