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

The checks of a single cell folder, and the `Report` and `CellResult` they fill, live in verify_cell.py; this
module holds the submission-level flow: the manifest, submission.json, the release grid and the cross-cell checks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from esbench.leaderboard.grid import ReleaseGrid, _canon, _strip
from esbench.leaderboard.release import CURRENT, load_release
from esbench.leaderboard.verify_cell import (
    CELL_FILES,  # noqa: F401  (CELL_FILES, RECORD_KEYS, TOL: moved, still importable from here)
    RECORD_KEYS,  # noqa: F401
    TOL,  # noqa: F401
    CellResult,
    Report,
    _check_cell,
    _read_json,
)
from esbench.records import sha256_file

SUBMISSION_SCHEMA = "esbench.submission/1"
MANIFEST = "MANIFEST.json"
SUBMISSION = "submission.json"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")


def manifest_for(directory: Path) -> dict[str, Any]:
    """The manifest of every regular file under `directory` except the manifest itself."""
    files = {
        p.relative_to(directory).as_posix(): sha256_file(p)
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.relative_to(directory).as_posix() != MANIFEST
    }
    return {"algorithm": "sha256", "files": files}


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
    # Copied evidence. Two seeds of one grid point never sample the same outputs (T > 0: the eval seed, derived from
    # the cell seed and the final weights since release v1.2, drives the sampler) and never train to the same moved
    # weights. Across grid points, identical outputs come only from
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
