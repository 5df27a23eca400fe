"""The checks of one cell folder of a submission, for `esbench leaderboard verify`.

One cell is checked on its own: its record's shape and release, its place on the release's grid and its labels,
its provenance, its eval and train sets, its training log against the updates its budget buys, and every metric
re-derived from its per-sample logs (verdicts re-run by the task verifiers; verify_samples.py). verify.py holds the
submission-level flow around this (manifest, submission.json, the checks across cells) and calls `_check_cell` once
per folder.

The record and the training log are validated into `esbench.records.Record` and `TrainRow` (the models the runner
writes and the report reads) once their shape is checked, with no coercion; a field of the wrong type refuses the cell
with a reason naming the file and the field. The grid, provenance, data and sample checks then read the typed record;
what is about the file as written (the keys it has, its metrics and train summary, compared number for number) is
read from its JSON.

The two are separate so each reads on its own; this module is the lower one. What both need (the `Report` and
`CellResult` dataclasses, the JSON helpers) is in verify_report.py, below both.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from esbench.leaderboard.grid import ReleaseGrid, _diff_paths
from esbench.leaderboard.verify_report import CellResult, Report, _close, _read_json, _read_jsonl, _validated
from esbench.leaderboard.verify_samples import _recompute
from esbench.records import CELL_SEED_EVAL_RELEASES, Record, TrainRow, eval_seed

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
# Verifiers that grade by running the response as code: their verdicts count only from the OS-confined sandbox.
CODE_VERIFIERS = {"mbpp"}
CONFINED_MODE = "bwrap"


def _get(d: Any, dotted: str) -> tuple[bool, Any]:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return False, None
        d = d[part]
    return True, d


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
    for t, m in record["metrics"].items():
        if not isinstance(m, dict):
            report.add(f"{where}: metrics.{t} must be an object of metrics")
    typed = _validated(Record, record, f"{where}/record.json", report) if len(report.reasons) == n_before else None
    if typed is None:
        return None
    if typed.schema_ != release["record_schema"]:
        report.add(
            f"{where}/record.json: schema {typed.schema_!r}, release {release['id']} requires "
            f"{release['record_schema']!r}"
        )
    if typed.release != release["id"]:
        report.add(f"{where}/record.json: record from another release ({typed.release!r}, expected {release['id']!r})")
    cell = typed.cell
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
    for key in sorted(set(record) - set(RECORD_KEYS)):  # the keys the file has, beyond the ones checked here
        report.unverified.setdefault(key, []).append(result.id)  # e.g. `analyses`: drift, diversity, sparsity
    _check_provenance(where, typed, release, report)
    train_size = _check_datasets(where, typed, release, report)
    result.train = _check_train_log(where, d, record, train_size, report)
    _recompute(where, d, typed, record["metrics"], release, result, report)
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


def _check_provenance(where: str, record: Record, release: dict[str, Any], report: Report) -> None:
    prov = record.provenance
    spec = record.cell["spec"]
    for key in release["provenance"]["required"]:
        present, value = _get(prov, key)
        if not present or value is None or value == "" or value == {}:
            report.add(f"{where}: missing provenance: provenance.{key}")
    for key in release["provenance"]["nullable"]:
        if not _get(prov, key)[0]:
            report.add(f"{where}: missing provenance: provenance.{key} (may be null, must be present)")
    seeds: dict[str, Any] = prov["seeds"] if isinstance(prov.get("seeds"), dict) else {}
    for k in ("cell", "train", "eval"):
        expected, what = spec["seed"], "the cell's seed"
        if k == "eval" and record.release not in CELL_SEED_EVAL_RELEASES:
            expected = eval_seed(spec["seed"], str(prov.get("final_weights_sha256")))
            what = "the eval seed derived from the cell's seed and final weights"
        if k in seeds and seeds[k] != expected:
            report.add(f"{where}: provenance.seeds.{k} is {seeds[k]}, but {what} is {expected}")
    model: dict[str, Any] = prov["model"] if isinstance(prov.get("model"), dict) else {}
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


def _check_datasets(where: str, record: Record, release: dict[str, Any], report: Report) -> int | None:
    """Check the eval and train sets against provenance; returns the train set's size (None: the cell trains not)."""
    from esbench.tasks import get_task, rows_hash

    spec = record.cell["spec"]
    data = (record.provenance.get("datasets") or {}).get("eval") or {}
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
    train = (record.provenance.get("datasets") or {}).get("train")
    if not isinstance(train, dict):
        report.add(f"{where}: missing provenance: provenance.datasets.train")
    elif train.get("sha256") != rows_hash(rows) or train.get("version") != task.version:
        report.add(f"{where}: provenance.datasets.train does not match the train set of the cell's spec")
    return len(rows)


def _check_train_log(
    where: str, d: Path, record: dict[str, Any], train_size: int | None, report: Report
) -> list[TrainRow] | None:
    """Check the training log against the record (its JSON: the fields read here are its cell spec, budget_used and
    train summary) and the budget; returns its rows as `TrainRow`s (None: none, or refused)."""
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
    typed: list[TrainRow] = []
    for i, row in enumerate(rows, 1):
        got = _validated(TrainRow, row, f"{where}/train.jsonl: row {i}", report)
        if got is None:
            return None
        typed.append(got)
    summary = _train_summary(rows)  # from the rows as written: a key that is absent is not one that is null
    # The budget is the comparison's unit: a cell that spent more updates than its spec says is not on the grid
    # point it claims, whatever its record says. The log has one reward row per update.
    assert train_size is not None  # the cell has a dataset, so _check_datasets gave its train set's size
    expected = _expected_updates(spec, train_size)
    if used != summary["updates_logged"]:
        report.add(f"{where}: budget_used.updates is {used!r}, train.jsonl logs {summary['updates_logged']} updates")
    if expected is not None and used != expected:
        report.add(f"{where}: budget_used.updates is {used!r}, the cell's budget {spec['budget']!r} is {expected}")
    for k, v in summary.items():
        if not _close(record["train"].get(k), v):
            report.add(f"{where}: record train.{k} is {record['train'].get(k)!r}, train.jsonl gives {v!r}")
    return typed


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
