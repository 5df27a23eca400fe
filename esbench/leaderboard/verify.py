"""`esbench leaderboard verify PATH`: accept a submission only if every number can be recomputed from its samples.

Nothing in a submission is trusted. Verification:
- checks the manifest: every file listed with its SHA-256, nothing unlisted, no links, no paths outside;
- checks each record against the record schema of the release, and that it carries the release's id;
- recomputes each cell's id from its spec and checks the spec is a cell of the release's suites (a plug-in method
  may take the place of a built-in one on the same grid point: same model, data, budget and eval block);
- checks that provenance is complete, that seeds are integers that agree and are distinct, and that no two cells
  share evidence (sampled outputs or trained weights), within a grid point or across grid points;
- checks the updates spent against the training log and against the updates the cell's budget buys;
- re-reads each per-sample log, checks every problem is the release's eval problem, re-runs the task verifiers on
  every response (the stored `correct` flags are ignored) and recomputes every metric of the record.

It collects every reason rather than stopping at the first, so a submitter fixes everything in one go, and turns
malformed input into reasons rather than tracebacks. What it cannot detect is a consistent forgery of the model's
outputs themselves (docs/leaderboard.md says which); re-running a cell is the check for that.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esbench.leaderboard.release import CURRENT, load_release, task_source, verifier_fingerprint
from esbench.records import sha256_file

SUBMISSION_SCHEMA = "esbench.submission/1"
MANIFEST = "MANIFEST.json"
SUBMISSION = "submission.json"
CELL_FILES = {"cell.json", "record.json", "train.jsonl"}
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
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


def manifest_for(directory: Path) -> dict[str, Any]:
    """The manifest of every regular file under `directory` except the manifest itself."""
    files = {
        p.relative_to(directory).as_posix(): sha256_file(p)
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.relative_to(directory).as_posix() != MANIFEST
    }
    return {"algorithm": "sha256", "files": files}


@dataclass
class CellResult:
    """A verified cell: its record and what was recomputed from its samples."""

    id: str
    record: dict[str, Any]
    recomputed: dict[str, dict[str, Any]] = field(default_factory=dict)
    per_problem: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # task -> metric -> values
    grid: str = ""  # "release" or "plug-in"
    evidence: str = ""  # hash of every sampled response, to spot one run submitted under two seeds


@dataclass
class Report:
    path: Path
    release: str
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # not grounds for rejection, shown with the submission
    unverified: dict[str, list[str]] = field(default_factory=dict)  # record fields verify cannot recompute
    cells: list[CellResult] = field(default_factory=list)
    submission: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.reasons

    def add(self, reason: str) -> None:
        self.reasons.append(reason)

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


def _read_json(path: Path, report: Report, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        report.add(f"{what}: missing")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        report.add(f"{what}: not valid JSON ({e})")
    return None


def _canon(obj: Any) -> str:
    from esbench.spec import canonical_json

    return canonical_json(obj)


def _strip(spec: dict[str, Any], *keys: str) -> str:
    return _canon({k: v for k, v in spec.items() if k not in keys})


def _diff_paths(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two JSON values differ (for naming what an edited spec changed)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff_paths(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else k)
        return out
    return [] if a == b else [prefix or "(root)"]


class ReleaseGrid:
    """The release's frozen cells (`cells.json`), indexed for the grid check.

    The release freezes expanded, normalised cell specs rather than re-expanding its suite YAML with today's code:
    a new spec default in esbench changes every cell id, and must not silently move an old release's grid.
    """

    def __init__(self, release: dict[str, Any]):
        from esbench.spec import Cell

        self.exact: dict[str, Any] = {}  # spec without seed -> cell (extra seeds are welcome)
        self.points: dict[str, Any] = {}  # trained spec without method and seed -> cell (plug-in slot)
        self.kinds: set[str] = set()
        self.cells = []
        frozen = json.loads((release["dir"] / release["cells"]).read_text())
        for suite_cells in frozen.values():
            for c in suite_cells:
                cell = Cell(c["spec"], c["labels"])
                self.cells.append(cell)
                self.exact[_strip(cell.spec, "seed")] = cell
                self.kinds.add(cell.spec["method"]["kind"])
                if cell.spec["dataset"] is not None:
                    self.points[_strip(cell.spec, "seed", "method")] = cell

    def place(self, spec: dict[str, Any]) -> tuple[str | None, Any]:
        """("release" | "plug-in", the release cell it stands on) when `spec` is on the grid, else (None, why)."""
        if _strip(spec, "seed") in self.exact:
            return "release", self.exact[_strip(spec, "seed")]
        kind = (spec.get("method") or {}).get("kind")
        if kind not in self.kinds and kind != "sequence" and _strip(spec, "seed", "method") in self.points:
            return "plug-in", self.points[_strip(spec, "seed", "method")]
        same_kind = [c for c in self.cells if c.spec["method"]["kind"] == kind] or self.cells
        nearest = min(same_kind, key=lambda c: len(_diff_paths(c.spec, spec)))
        diffs = [d for d in _diff_paths(nearest.spec, spec) if d != "seed"]
        return None, f"differs from release cell {nearest.name} at {', '.join(diffs[:6]) or 'unknown fields'}"


def verify(path: Path, root: Path, release_id: str = CURRENT) -> Report:
    """Verify the submission at `path` against release `release_id` of the leaderboard at `root`."""
    path = Path(path)
    report = Report(path, release_id)
    try:
        release = load_release(root, release_id)
    except (FileNotFoundError, ValueError) as e:
        report.add(f"release: {e}")
        return report
    if not path.is_dir():
        report.add(f"{path}: not a submission folder")
        return report
    _guarded(report, MANIFEST, _check_manifest, path, report)
    sub = _read_json(path / SUBMISSION, report, SUBMISSION)
    if isinstance(sub, dict):
        report.submission = sub
        _guarded(report, SUBMISSION, _check_submission, sub, path, release, report)
    elif sub is not None:
        report.add(f"{SUBMISSION}: must be a JSON object")
    for p in sorted(path.iterdir()):
        if p.name not in (SUBMISSION, MANIFEST, "cells"):
            report.add(f"{p.name}: unexpected entry at the top of a submission")
    grid = ReleaseGrid(release)
    cells_dir = path / "cells"
    if cells_dir.is_dir():
        for p in sorted(cells_dir.iterdir()):
            if not p.is_dir():
                report.add(f"cells/{p.name}: unexpected file (cells/ holds one folder per cell)")
    dirs = sorted(p for p in cells_dir.iterdir() if p.is_dir()) if cells_dir.is_dir() else []
    if not dirs:
        report.add("cells/: the submission has no cells")
    for d in dirs:
        cell = _guarded(report, f"cells/{d.name}", _check_cell, d, release, grid, report)
        if cell is not None:
            report.cells.append(cell)
    _guarded(report, "across cells", _check_across_cells, report, sub if isinstance(sub, dict) else {}, dirs)
    for key, ids in sorted(report.unverified.items()):
        report.notes.append(f"{key} of {len(ids)} cells is not recomputable from samples (not shown on the board)")
    return report


def _guarded(report: Report, where: str, check, *args):
    """Run one check; input of a shape no check anticipated (a string where an object belongs, a 300-character
    file name, bytes that are not UTF-8) becomes a reason instead of a traceback that would also take down
    `leaderboard build`."""
    try:
        return check(*args)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, OSError, RecursionError) as e:
        report.add(f"{where}: malformed submission ({type(e).__name__}: {e})")
        return None


# ---------------------------------------------------------------------------------------------------------------
# submission-level checks


def _check_manifest(path: Path, report: Report) -> None:
    manifest = _read_json(path / MANIFEST, report, MANIFEST)
    if manifest is None:
        return
    listed = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(listed, dict) or manifest.get("algorithm") != "sha256":
        report.add(f"{MANIFEST}: expected {{'algorithm': 'sha256', 'files': {{path: sha256}}}}")
        return
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix()
        if p.is_symlink():
            report.add(f"{rel}: symbolic links are not allowed in a submission")
        elif p.is_file() and rel != MANIFEST and rel not in listed:
            report.add(f"{rel}: file not listed in {MANIFEST} (extra file)")
    for rel, digest in sorted(listed.items()):
        target = path / rel
        if rel.startswith("/") or ".." in Path(rel).parts:
            report.add(f"{MANIFEST}: path {rel!r} points outside the submission")
        elif not target.is_file() or target.is_symlink():
            report.add(f"{rel}: listed in {MANIFEST} but missing")
        elif sha256_file(target) != digest:
            report.add(f"{rel}: SHA-256 does not match {MANIFEST} (file edited after packaging)")


def _check_submission(sub: dict[str, Any], path: Path, release: dict[str, Any], report: Report) -> None:
    if sub.get("schema") != SUBMISSION_SCHEMA:
        report.add(f"{SUBMISSION}: schema {sub.get('schema')!r}, expected {SUBMISSION_SCHEMA!r}")
    if sub.get("release") != release["id"]:
        report.add(f"{SUBMISSION}: release {sub.get('release')!r}, but it is being verified against {release['id']}")
    name = sub.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        report.add(f"{SUBMISSION}: name {name!r} is not a valid submission name")
    elif name != path.name:
        report.add(f"{SUBMISSION}: name {name!r} does not match its folder {path.name!r}")
    if sub.get("suite") not in release["suites"]:
        report.add(
            f"{SUBMISSION}: suite {sub.get('suite')!r} is not a suite of {release['id']} ({list(release['suites'])})"
        )
    if not isinstance(sub.get("cells"), list):
        report.add(f"{SUBMISSION}: 'cells' must list the submitted cells")


def _point(c: CellResult) -> str:
    """The grid point of a cell: its spec without the seed."""
    return _strip(c.record["cell"]["spec"], "seed")


def _same_run(a: CellResult, b: CellResult) -> bool:
    """Same final weights sampled with the same seed and eval block: identical outputs are then expected."""
    sa, sb = a.record["cell"]["spec"], b.record["cell"]["spec"]
    return (
        a.record["provenance"].get("final_weights_sha256") == b.record["provenance"].get("final_weights_sha256")
        and sa["seed"] == sb["seed"]
        and _canon(sa["eval"]) == _canon(sb["eval"])
    )


def _check_across_cells(report: Report, sub: dict[str, Any], dirs: list[Path]) -> None:
    listed = sub.get("cells")
    if isinstance(listed, list):
        ids = [c.get("id") if isinstance(c, dict) else c for c in listed]
        on_disk = [d.name for d in dirs]
        for missing in sorted(set(ids) - set(on_disk)):
            report.add(f"{SUBMISSION}: lists cell {missing} but cells/{missing} is missing")
        for extra in sorted(set(on_disk) - set(ids)):
            report.add(f"cells/{extra}: not listed in {SUBMISSION}")
        if len(set(ids)) != len(ids):
            report.add(f"{SUBMISSION}: lists a cell twice")
        records = {c.id: c.record["cell"] for c in report.cells}
        for entry in listed:
            cell = records.get(entry.get("id")) if isinstance(entry, dict) else None
            if cell is None:
                continue
            for key, value in (("name", cell.get("name")), ("method", cell["labels"].get("method"))):
                if entry.get(key) != value:
                    report.add(
                        f"{SUBMISSION}: cell {entry['id']} is listed with {key} {entry.get(key)!r}, "
                        f"its record says {value!r}"
                    )
    groups: dict[str, list[CellResult]] = {}
    suites = set()
    for c in report.cells:
        groups.setdefault(_point(c), []).append(c)
        suites.add(c.record["cell"].get("labels", {}).get("suite"))
    if sub.get("suite") and suites - {sub.get("suite")}:
        report.add(f"cells come from suites {sorted(map(str, suites))}, the submission declares {sub.get('suite')!r}")
    for members in groups.values():
        seen: dict[Any, str] = {}
        for c in members:
            seed = c.record["cell"]["spec"]["seed"]
            if seed in seen:
                report.add(f"duplicated seed: cells {seen[seed]} and {c.id} are the same grid point with seed {seed}")
            seen[seed] = c.id
    # Copied evidence. Two seeds of one grid point never sample the same outputs (T > 0: the eval seed drives the
    # sampler) and never train to the same moved weights. Across grid points, identical outputs come only from
    # identical weights sampled with the same seed and eval block (a run that left the weights untouched samples
    # exactly like base), and two trained cells never reach the same moved weights. Samples copied from another
    # cell fail one of these even when the record was rewritten to match.
    by_output: dict[str, list[CellResult]] = {}
    by_weights: dict[str, list[CellResult]] = {}
    for c in report.cells:
        spec, prov = c.record["cell"]["spec"], c.record["provenance"]
        weights = prov.get("final_weights_sha256")
        if spec["eval"].get("temperature", 0) > 0 and c.evidence:
            earlier = by_output.setdefault(c.evidence, [])
            twin = next((o for o in earlier if _point(o) == _point(c)), None)
            if twin is not None:
                report.add(
                    f"duplicated seed: cells {twin.id} and {c.id} have identical sampled outputs "
                    "(one run's evidence submitted under two seeds)"
                )
            elif earlier and not _same_run(earlier[0], c):
                report.add(
                    f"copied evidence: cells {earlier[0].id} and {c.id} have identical sampled outputs but different "
                    "weights, seeds or eval settings"
                )
            earlier.append(c)
        if spec["dataset"] is not None and weights and weights != (prov.get("model") or {}).get("state_sha256"):
            earlier = by_weights.setdefault(weights, [])
            twin = next((o for o in earlier if _point(o) == _point(c)), None)
            if twin is not None:
                report.add(f"duplicated seed: trained cells {twin.id} and {c.id} have identical final weights")
            elif earlier:
                report.add(f"copied evidence: trained cells {earlier[0].id} and {c.id} claim identical final weights")
            earlier.append(c)
    # One model spec, one starting point: every cell of the same model must start from the same weights.
    starts: dict[str, tuple[str, str]] = {}
    for c in report.cells:
        key = _canon(c.record["cell"]["spec"]["model"])
        start = (c.record["provenance"].get("model") or {}).get("state_sha256")
        if key in starts and start != starts[key][1]:
            report.add(f"cells {starts[key][0]} and {c.id} use the same model spec but start from different weights")
        starts.setdefault(key, (c.id, start))


# ---------------------------------------------------------------------------------------------------------------
# cell-level checks


def _check_cell(d: Path, release: dict[str, Any], grid: ReleaseGrid, report: Report) -> CellResult | None:
    from esbench.spec import cell_id

    where = f"cells/{d.name}"
    for p in sorted(d.iterdir()):
        if p.name not in CELL_FILES and p.name != "samples":
            report.add(f"{where}/{p.name}: unexpected file in a cell folder")
    record = _read_json(d / "record.json", report, f"{where}/record.json")
    cell_json = _read_json(d / "cell.json", report, f"{where}/cell.json")
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
    if cell_json is not None and cell_json != cell:
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
    _check_train_log(where, d, record, train_size, report)
    _recompute(where, d, record, release, result, report)
    return result


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
        if k in seeds and seeds[k] != spec["seed"]:
            report.add(f"{where}: provenance.seeds.{k} is {seeds[k]}, but the cell's seed is {spec['seed']}")
    model = prov.get("model") if isinstance(prov.get("model"), dict) else {}
    if model.get("path") not in (None, spec.get("model", {}).get("path")):
        report.add(f"{where}: provenance.model.path {model.get('path')!r} is not the cell's model")
    if not (model.get("weights_sha256") or model.get("revision")):
        report.add(f"{where}: missing provenance: provenance.model needs weights_sha256 or a pinned revision")
    if spec.get("dataset") is None and prov.get("final_weights_sha256") != model.get("state_sha256"):
        report.add(f"{where}: an untrained cell's final weights differ from its starting weights")


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


def _check_train_log(where: str, d: Path, record: dict[str, Any], train_size: int | None, report: Report) -> None:
    from esbench.records import train_summary as _train_summary

    spec = record["cell"]["spec"]
    log = d / "train.jsonl"
    used = record["budget_used"].get("updates")
    if spec.get("dataset") is None:
        if log.exists() and log.read_text().strip():
            report.add(f"{where}/train.jsonl: an untrained cell has a training log")
        if used not in (0, None):
            report.add(f"{where}: budget_used.updates is {used!r} for a cell that does not train")
        return
    if not log.exists():
        report.add(f"{where}/train.jsonl: missing (the cell trains)")
        return
    try:
        rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        report.add(f"{where}/train.jsonl: not valid JSON lines ({e})")
        return
    if not all(isinstance(r, dict) for r in rows):
        report.add(f"{where}/train.jsonl: every line must be a JSON object")
        return
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


def _expected_updates(spec: dict[str, Any], train_size: int) -> int | None:
    """Updates the cell's budget buys (None when an epoch budget's method is not installed here)."""
    from esbench.methods import registry

    budget = spec["budget"]
    if isinstance(budget, int) and not isinstance(budget, bool):
        return budget
    try:
        cls = registry.get(spec["method"]["kind"])
    except KeyError:
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


def _read_samples(path: Path, where: str, report: Report) -> list[dict[str, Any]] | None:
    if path.is_symlink():
        return None  # reported by the manifest check; never follow a link out of the submission
    if not path.is_file():
        report.add(f"{where}: missing per-sample log")
        return None
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            report.add(f"{where}:{i}: not valid JSON")
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
    # reasoning) still breaks the binding, even when the manifest was re-made.
    bound = record["samples_sha256"]
    present = sorted(p.name for p in samples_dir.glob("*.jsonl")) if samples_dir.is_dir() else []
    for name in sorted(set(bound) | set(present)):
        if name not in present:
            report.add(f"{where}/samples/{name}: removed (the record hashed it at run time)")
        elif name not in bound:
            report.add(f"{where}/samples/{name}: not produced by the run (absent from the record's samples_sha256)")
        elif (samples_dir / name).is_symlink() or sha256_file(samples_dir / name) != bound[name]:
            report.add(f"{where}/samples/{name}: edited sample (SHA-256 differs from the record's samples_sha256)")
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
        sampled = _read_samples(samples_dir / f"{t}.jsonl", f"{where}/samples/{t}.jsonl", report)
        greedy = None
        if ev["greedy"]:
            greedy = _read_samples(samples_dir / f"{t}.greedy.jsonl", f"{where}/samples/{t}.greedy.jsonl", report)
            if greedy is not None:
                greedy = _rescore(greedy, t, expected, 1, f"{where}/samples/{t}.greedy.jsonl", report)
        if sampled is None:
            continue
        raw = sorted((r for r in sampled if isinstance(r.get("doc_id"), int)), key=lambda r: r["doc_id"])
        sampled = _rescore(sampled, t, expected, ev["n"], f"{where}/samples/{t}.jsonl", report)
        if sampled is None or (ev["greedy"] and greedy is None):
            continue
        evidence.update(_canon([r["resps"] for r in raw]).encode())
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
