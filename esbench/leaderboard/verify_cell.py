"""The checks of one cell folder of a submission, for `esbench leaderboard verify`.

One cell is checked on its own: its record's shape and release, its place on the release's grid and its labels,
its provenance, its eval and train sets, its training log against the updates its budget buys, and every metric
re-derived from its per-sample logs (verdicts re-run by the task verifiers). verify.py holds the submission-level
flow around this (manifest, submission.json, the checks across cells) and calls `_check_cell` once per folder.

The two are separate so each reads on its own; this module is the lower one. It also holds what both need (the
`Report` and `CellResult` dataclasses, the JSON helpers), so verify.py imports from here and never the reverse.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esbench.leaderboard.grid import ReleaseGrid, _canon, _diff_paths
from esbench.leaderboard.release import task_source, verifier_fingerprint
from esbench.records import CELL_SEED_EVAL_RELEASES, eval_seed
from esbench.untrusted import UntrustedInputError, load_jsonl, loads, read_bytes, read_text

CELL_FILES = {"cell.json", "record.json", "train.jsonl"}
RECORD_KEYS = {
    "schema": str,
    "release": str,
    "cell": dict,
    "metrics": dict,
    "held_out": list,
    "train": dict,
    "budget_used": dict,
    "timings": dict,
    "provenance": dict,
    "samples_sha256": dict,
}
TOL = 1e-9
# Verifiers that grade by running the response as code: their verdicts count only from the OS-confined sandbox.
CODE_VERIFIERS = {"mbpp"}
CONFINED_MODE = "bwrap"


@dataclass
class CellResult:
    """A verified cell: its record and what was recomputed from its samples."""

    id: str
    record: dict[str, Any]
    recomputed: dict[str, dict[str, Any]] = field(default_factory=dict)
    per_problem: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # task -> metric -> values
    grid: str = ""  # "release" or "plug-in"
    evidence: str = ""  # hash of every sampled response, to spot one run submitted under two seeds
    train: list[dict[str, Any]] | None = None  # train.jsonl as verified (render reads it from here, not from disk)


@dataclass
class Report:
    path: Path
    release: str
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # not grounds for rejection, shown with the submission
    unverified: dict[str, list[str]] = field(default_factory=dict)  # record fields verify cannot recompute
    cells: list[CellResult] = field(default_factory=list)
    submission: dict[str, Any] = field(default_factory=dict)
    stopped: bool = False  # a hash failed: nothing further is read or recomputed
    evidence: str = ""  # the submission's evidence fingerprint (`verify.submission_evidence`), set when accepted

    @property
    def ok(self) -> bool:
        """Accepted: no reason, and at least one cell verified (an empty verification proves nothing)."""
        return not self.reasons and bool(self.cells)

    def add(self, reason: str) -> None:
        self.reasons.append(reason)

    def stop(self, reason: str) -> None:
        """A failed hash: the submission is rejected whatever else holds, so the work ends here (a hostile
        submission cannot make verify recompute, or run verifiers on, content it has already been caught editing)."""
        self.add(reason)
        self.stopped = True

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "release": self.release,
            "accepted": self.ok,
            "reasons": self.reasons,
            "notes": self.notes,
            "cells": [c.id for c in self.cells],
        }


def _get(d: Any, dotted: str) -> tuple[bool, Any]:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return False, None
        d = d[part]
    return True, d


def _refused(e: UntrustedInputError, path: Path, what: str) -> str:
    """The reader's one-line reason, with the submission-relative name instead of the absolute path."""
    return str(e).replace(os.fspath(path), what)


def _read_json(path: Path, report: Report, what: str) -> Any:
    """A submission's JSON file, read by the strict reader (regular file only, no link followed, size cap,
    duplicate keys, NaN/Infinity and deep nesting refused); None, with the reason added, when it is refused."""
    if not os.path.lexists(path):
        report.add(f"{what}: missing")
        return None
    try:
        return loads(read_text(path), what=what)
    except UntrustedInputError as e:
        report.add(_refused(e, path, what))
    return None


def _read_jsonl(path: Path, report: Report, what: str) -> list[dict[str, Any]] | None:
    try:
        return load_jsonl(path)
    except UntrustedInputError as e:
        report.add(_refused(e, path, what))
    return None


def _check_cell(d: Path, release: dict[str, Any], grid: ReleaseGrid, report: Report) -> CellResult | None:
    from esbench.spec import cell_id

    where = f"cells/{d.name}"
    for p in sorted(d.iterdir()):
        if p.name not in CELL_FILES and p.name != "samples":
            report.add(f"{where}/{p.name}: unexpected file in a cell folder")
    n_before = len(report.reasons)
    record = _read_json(d / "record.json", report, f"{where}/record.json")
    cell_json = _read_json(d / "cell.json", report, f"{where}/cell.json")
    if len(report.reasons) == n_before:  # read and parsed: both must then be objects
        if not isinstance(record, dict):
            report.add(f"{where}/record.json: holds {_kind(record)}, not an object (a cell's record)")
        if not isinstance(cell_json, dict):
            report.add(f"{where}/cell.json: holds {_kind(cell_json)}, not an object (the cell's spec and labels)")
    if not isinstance(record, dict):
        return None
    n_before = len(report.reasons)
    for key, typ in RECORD_KEYS.items():
        if key not in record:
            report.add(f"{where}/record.json: required field {key!r} is missing")
        elif not isinstance(record[key], typ):
            report.add(f"{where}/record.json: {key!r} must be a {typ.__name__}")
    if len(report.reasons) > n_before:
        return None  # the remaining checks need a well-formed record
    if record["schema"] != release["record_schema"]:
        report.add(
            f"{where}/record.json: schema {record['schema']!r}, release {release['id']} requires "
            f"{release['record_schema']!r}"
        )
    if record["release"] != release["id"]:
        report.add(
            f"{where}/record.json: record from another release ({record['release']!r}, expected {release['id']!r})"
        )
    cell = record["cell"]
    spec = cell.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("eval"), dict) or "seed" not in spec:
        report.add(f"{where}/record.json: cell.spec is missing or malformed")
        return None
    seed = spec["seed"]
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        report.add(f"{where}: cell.spec.seed {seed!r} is not a non-negative integer")
        return None
    real_id = cell_id(spec)
    if cell.get("id") != real_id:
        report.add(f"{where}: cell spec edited: its hash is {real_id}, the record claims id {cell.get('id')}")
    if d.name != cell.get("id"):
        report.add(f"{where}: folder name does not match the record's cell id {cell.get('id')} (renamed cell folder)")
    if isinstance(cell_json, dict) and cell_json != cell:
        report.add(
            f"{where}/cell.json: differs from the record's cell at {', '.join(_diff_paths(cell_json, cell)[:6])}"
        )
    placed, on = grid.place(spec)
    if placed is None:
        report.add(f"{where}: cell spec is not on the grid of release {release['id']}'s suites ({on})")
    else:
        _check_labels(where, cell, on, placed, grid, report)
    result = CellResult(real_id if cell.get("id") == real_id else str(cell.get("id")), record, grid=placed or "")
    for key in sorted(set(record) - set(RECORD_KEYS)):
        report.unverified.setdefault(key, []).append(result.id)  # e.g. `analyses`: drift, diversity, sparsity
    _check_provenance(where, record, release, report)
    train_size = _check_datasets(where, record, release, report)
    result.train = _check_train_log(where, d, record, train_size, report)
    _recompute(where, d, record, release, result, report)
    return result


def _kind(x: Any) -> str:
    return "null" if x is None else type(x).__name__


def _check_labels(where: str, cell: dict[str, Any], on: Any, placed: str, grid: ReleaseGrid, report: Report) -> None:
    """Display labels are not hashed, so they are checked against the release cell: a base cell relabelled `es`
    would otherwise be shown on the ES row."""
    from esbench.spec import Cell

    labels = cell.get("labels")
    keys = ("suite", "model", "dataset", "method") if placed == "release" else ("suite", "model", "dataset")
    if not isinstance(labels, dict) or any(
        not isinstance(labels.get(k), str) for k in ("suite", "model", "dataset", "method")
    ):
        report.add(f"{where}: cell.labels must name suite, model, dataset and method")
        return
    for k in keys:
        if labels[k] != on.labels[k]:
            report.add(f"{where}: cell label {k}={labels[k]!r}, the release cell it stands on says {on.labels[k]!r}")
    if placed == "plug-in" and labels["method"] in {c.labels["method"] for c in grid.cells}:
        report.add(f"{where}: a plug-in method may not take the name of the release's method {labels['method']!r}")
    if cell.get("name") != Cell(cell["spec"], labels).name:
        report.add(f"{where}: cell name {cell.get('name')!r} does not follow from its spec and labels")


def _check_provenance(where: str, record: dict[str, Any], release: dict[str, Any], report: Report) -> None:
    prov = record["provenance"]
    spec = record["cell"]["spec"]
    for key in release["provenance"]["required"]:
        present, value = _get(prov, key)
        if not present or value is None or value == "" or value == {}:
            report.add(f"{where}: missing provenance: provenance.{key}")
    for key in release["provenance"]["nullable"]:
        if not _get(prov, key)[0]:
            report.add(f"{where}: missing provenance: provenance.{key} (may be null, must be present)")
    seeds = prov.get("seeds") if isinstance(prov.get("seeds"), dict) else {}
    for k in ("cell", "train", "eval"):
        expected, what = spec["seed"], "the cell's seed"
        if k == "eval" and record.get("release") not in CELL_SEED_EVAL_RELEASES:
            expected = eval_seed(spec["seed"], str(prov.get("final_weights_sha256")))
            what = "the eval seed derived from the cell's seed and final weights"
        if k in seeds and seeds[k] != expected:
            report.add(f"{where}: provenance.seeds.{k} is {seeds[k]}, but {what} is {expected}")
    model = prov.get("model") if isinstance(prov.get("model"), dict) else {}
    if model.get("path") not in (None, spec.get("model", {}).get("path")):
        report.add(f"{where}: provenance.model.path {model.get('path')!r} is not the cell's model")
    if not (model.get("weights_sha256") or model.get("revision")):
        report.add(f"{where}: missing provenance: provenance.model needs weights_sha256 or a pinned revision")
    if spec.get("dataset") is None and prov.get("final_weights_sha256") != model.get("state_sha256"):
        report.add(f"{where}: an untrained cell's final weights differ from its starting weights")
    _check_environment(where, prov, spec, report)


def _check_environment(where: str, prov: dict[str, Any], spec: dict[str, Any], report: Report) -> None:
    """What the run's environment changed about what was evaluated, and how code was graded.

    `env_overrides` lists environment variables that changed the evaluated content (ESBENCH_DATASETS_DIR, say): such
    a cell did not evaluate the release's sets as the release loads them (absent in records before it existed).
    A cell with a task graded by running code counts only when it ran in the OS-confined sandbox."""
    overrides = prov.get("env_overrides")
    if overrides is not None and not isinstance(overrides, dict):
        report.add(f"{where}: provenance.env_overrides must be an object of environment variables")
    elif overrides:
        names = ", ".join(sorted(map(str, overrides))[:6])
        report.add(
            f"{where}: provenance.env_overrides: the run changed what was evaluated through the environment ({names});"
            " the leaderboard accepts only runs of the release's own data"
        )
    if _graded_by_execution(spec):
        sandbox = prov.get("sandbox")
        mode = sandbox.get("mode") if isinstance(sandbox, dict) else None
        if mode != CONFINED_MODE:
            report.add(
                f"{where}: provenance.sandbox.mode is {mode!r}: the leaderboard accepts verdicts only from the "
                f"confined mode ({CONFINED_MODE!r}) for tasks graded by running code"
            )


def _graded_by_execution(spec: dict[str, Any]) -> bool:
    """Whether a task of the cell (evaluated, or its training set's, whose verdicts were the reward) runs code."""
    from esbench.tasks import TASKS

    names = list(spec["eval"].get("tasks") or [])
    dataset = spec.get("dataset")
    if isinstance(dataset, dict):
        names.append(dataset.get("task"))
    return any(isinstance(t, str) and t in TASKS and TASKS[t].verifier in CODE_VERIFIERS for t in names)


def _check_datasets(where: str, record: dict[str, Any], release: dict[str, Any], report: Report) -> int | None:
    """Check the eval and train sets against provenance; returns the train set's size (None: the cell trains not)."""
    from esbench.tasks import get_task, rows_hash

    spec = record["cell"]["spec"]
    data = (record["provenance"].get("datasets") or {}).get("eval") or {}
    for t in spec["eval"]["tasks"]:
        pin = release["tasks"].get(t)
        if pin is None:
            report.add(f"{where}: task {t!r} is not part of release {release['id']}")
            continue
        got = data.get(t) or {}
        if got.get("version") != pin["version"]:
            report.add(
                f"{where}: provenance.datasets.eval.{t}.version {got.get('version')!r}, release pins {pin['version']}"
            )
        revision = (pin.get("source") or {}).get("revision")
        if revision is not None and got.get("revision") != revision:
            report.add(
                f"{where}: provenance.datasets.eval.{t}.revision {got.get('revision')!r}, release pins {revision}"
            )
        try:
            rows = get_task(t).rows("test", spec["eval"].get("limit") or None)
        except Exception as e:  # a loader failure is a reason, not a crash
            report.add(f"{where}: cannot load {t}'s eval set to check it ({e})")
            continue
        if got.get("sha256") != rows_hash(rows) or got.get("rows") != len(rows):
            report.add(f"{where}: provenance.datasets.eval.{t} does not match the release's eval set (hash or size)")
    if spec.get("dataset") is None:
        return None
    task = get_task(spec["dataset"]["task"])
    rows = task.rows("train", spec["dataset"].get("size"))
    train = (record["provenance"].get("datasets") or {}).get("train")
    if not isinstance(train, dict):
        report.add(f"{where}: missing provenance: provenance.datasets.train")
    elif train.get("sha256") != rows_hash(rows) or train.get("version") != task.version:
        report.add(f"{where}: provenance.datasets.train does not match the train set of the cell's spec")
    return len(rows)


def _check_train_log(
    where: str, d: Path, record: dict[str, Any], train_size: int | None, report: Report
) -> list[dict[str, Any]] | None:
    """Check the training log against the record and the budget; returns its rows (None: none, or refused)."""
    from esbench.records import train_summary as _train_summary

    spec = record["cell"]["spec"]
    log = d / "train.jsonl"
    used = record["budget_used"].get("updates")
    if spec.get("dataset") is None:
        if os.path.lexists(log):
            rows = _read_jsonl(log, report, f"{where}/train.jsonl")
            if rows:
                report.add(f"{where}/train.jsonl: an untrained cell has a training log")
        if used not in (0, None):
            report.add(f"{where}: budget_used.updates is {used!r} for a cell that does not train")
        return None
    if not os.path.lexists(log):
        report.add(f"{where}/train.jsonl: missing (the cell trains)")
        return None
    rows = _read_jsonl(log, report, f"{where}/train.jsonl")
    if rows is None:
        return None
    summary = _train_summary(rows)
    # The budget is the comparison's unit: a cell that spent more updates than its spec says is not on the grid
    # point it claims, whatever its record says. The log has one reward row per update.
    expected = _expected_updates(spec, train_size)
    if used != summary["updates_logged"]:
        report.add(f"{where}: budget_used.updates is {used!r}, train.jsonl logs {summary['updates_logged']} updates")
    if expected is not None and used != expected:
        report.add(f"{where}: budget_used.updates is {used!r}, the cell's budget {spec['budget']!r} is {expected}")
    for k, v in summary.items():
        if not _close(record["train"].get(k), v):
            report.add(f"{where}: record train.{k} is {record['train'].get(k)!r}, train.jsonl gives {v!r}")
    return rows


def _expected_updates(spec: dict[str, Any], train_size: int) -> int | None:
    """Updates the cell's budget buys (None when an epoch budget's method is not installed here)."""
    from esbench.methods import registry

    budget = spec["budget"]
    try:
        cls = registry.get(spec["method"]["kind"])
    except (KeyError, ImportError):  # a plug-in method not installed (or not importable) where verify runs
        cls = None
    if cls is not None and not cls.spends_updates:  # a measurement (`subtraction`): its budget buys no updates
        return 0
    if isinstance(budget, int) and not isinstance(budget, bool):
        return budget
    if cls is None:
        return None
    config = cls.Config.model_validate(spec["method"]["config"])
    return cls.updates_for(budget, train_size, config)


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        try:
            return math.isclose(a, b, rel_tol=0, abs_tol=TOL)
        except OverflowError:  # a JSON integer too large for a float
            return False
    return a == b


def _read_samples(data: bytes | None, where: str, report: Report) -> list[dict[str, Any]] | None:
    """The rows of a per-sample log, parsed from the very bytes whose hash was checked (None: missing or refused)."""
    if data is None:
        report.add(f"{where}: missing per-sample log")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        report.add(f"{where}: not UTF-8 ({e.reason} at byte {e.start})")
        return None
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        try:
            row = loads(line, what=f"{where}:{i}")
        except UntrustedInputError as e:
            report.add(str(e))
            return None
        if not isinstance(row, dict) or not isinstance(row.get("resps"), list) or not isinstance(row.get("doc"), dict):
            report.add(f"{where}:{i}: a sample row needs doc_id, doc and resps")
            return None
        rows.append(row)
    return rows


def _rescore(
    rows: list[dict[str, Any]], task_name: str, expected: list[dict[str, str]], n: int, where: str, report: Report
) -> list[dict[str, Any]] | None:
    """Evidence rows rebuilt from responses alone: doc checked against the eval set, verdicts recomputed."""
    from esbench.tasks import get_task

    task = get_task(task_name)
    ok = True
    ids = [r.get("doc_id") for r in rows]
    if sorted(i for i in ids if isinstance(i, int)) != list(range(len(expected))) or len(ids) != len(expected):
        missing = sorted(set(range(len(expected))) - {i for i in ids if isinstance(i, int)})
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
    for r in sorted((r for r in rows if isinstance(r.get("doc_id"), int)), key=lambda r: r["doc_id"]):
        i = r["doc_id"]
        if not 0 <= i < len(expected):
            continue
        gold = expected[i]
        doc = r["doc"]
        if (doc.get("id"), doc.get("question"), doc.get("answer")) != (gold["id"], gold["question"], gold["answer"]):
            report.add(
                f"{where}: doc_id {i} is not the release's problem {gold['id']} (question or gold answer edited)"
            )
            ok = False
        resps = r["resps"]
        if len(resps) != n or not all(isinstance(x, str) for x in resps):
            report.add(f"{where}: doc_id {i} has {len(resps)} responses, the cell samples {n} per problem")
            ok = False
            continue
        verdicts = [task.verify(x, gold["answer"]) for x in resps]
        answers = [v.answer for v in verdicts]
        correct = [v.correct for v in verdicts]
        if r.get("correct") != correct or r.get("answers") != answers:
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
    where: str, d: Path, record: dict[str, Any], release: dict[str, Any], result: CellResult, report: Report
) -> None:
    from esbench.evaluation import summarise
    from esbench.metrics.passk import majority_correct, pass_at_k
    from esbench.tasks import get_task

    ev = record["cell"]["spec"]["eval"]
    metrics = record["metrics"]
    if sorted(metrics) != sorted(ev["tasks"]):
        report.add(f"{where}: record metrics cover {sorted(metrics)}, the cell evaluates {sorted(ev['tasks'])}")
    if record["held_out"] != ev.get("held_out", []):
        report.add(f"{where}: record held_out {record['held_out']} differs from the cell's eval.held_out")
    allowed = {f"{t}.jsonl" for t in ev["tasks"]} | (
        {f"{t}.greedy.jsonl" for t in ev["tasks"]} if ev["greedy"] else set()
    )
    evidence = hashlib.sha256()
    samples_dir = d / "samples"
    # The run hashed its per-sample logs into the record: an edit that keeps every verdict (say, to a response's
    # reasoning) still breaks the binding, even when the manifest was re-made. Each log is read once (strictly),
    # hashed, and parsed from those same bytes; the first hash that fails ends the work.
    bound = record["samples_sha256"]
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
        sampled = _read_samples(data.get(f"{t}.jsonl"), f"{where}/samples/{t}.jsonl", report)
        greedy = None
        if ev["greedy"]:
            greedy = _read_samples(data.get(f"{t}.greedy.jsonl"), f"{where}/samples/{t}.greedy.jsonl", report)
            if greedy is not None:
                greedy = _rescore(greedy, t, expected, 1, f"{where}/samples/{t}.greedy.jsonl", report)
        if sampled is None:
            continue
        raw = sampled
        sampled = _rescore(sampled, t, expected, ev["n"], f"{where}/samples/{t}.jsonl", report)
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
