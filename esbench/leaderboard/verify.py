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
malformed input into reasons rather than tracebacks. Two exceptions end the work early: the manifest comes first, and
a submission whose files do not match it (or whose samples do not match their record's hashes) is rejected at the
first failed hash, with nothing further read or recomputed. Every file is read by `esbench.untrusted` (regular files
only, no link followed, a size cap, strict JSON), so no file, FIFO or device can hang or exhaust verify.

Evidence, not names, identifies a submission: one whose cells' sampled outputs are all those of another submission
(on the board, or accepted in the submissions folder) is rejected as a copy, whatever it is called.

What it cannot detect is a consistent forgery of the model's outputs themselves (docs/leaderboard.md says which);
re-running a cell is the check for that.

The checks of a single cell folder live in verify_cell.py, and the `Report` and `CellResult` they fill in
verify_report.py; this module holds the submission-level flow: the manifest, submission.json, the release grid and the
cross-cell checks.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path
from typing import Any

from esbench.leaderboard.grid import ReleaseGrid, _canon, _strip
from esbench.leaderboard.release import CURRENT, load_release
from esbench.leaderboard.verify_cell import _check_cell
from esbench.leaderboard.verify_report import (
    CellResult,
    Report,
    _read_json,
    _refused,
)
from esbench.leaderboard.verify_samples import response_evidence
from esbench.records import sha256_file
from esbench.untrusted import UntrustedInputError, load_json_object, load_jsonl, read_bytes

SUBMISSION_SCHEMA = "esbench.submission/1"
MANIFEST = "MANIFEST.json"
SUBMISSION = "submission.json"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
BOARD_LEDGER = Path("site") / "board.json"  # under the leaderboard root: the evidence of each listed submission
MAX_ENTRIES = 100_000  # files and folders in one submission (a paper-scale one has a few thousand)


def manifest_for(directory: Path) -> dict[str, Any]:
    """The manifest of every regular file under `directory` except the manifest itself."""
    files = {
        p.relative_to(directory).as_posix(): sha256_file(p)
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.relative_to(directory).as_posix() != MANIFEST
    }
    return {"algorithm": "sha256", "files": files}


def verify(path: Path, root: Path, release_id: str = CURRENT, peers: dict[Path, str | None] | None = None) -> Report:
    """Verify the submission at `path` against release `release_id` of the leaderboard at `root`.

    `peers` maps the other submission folders to their `submission_evidence` (computed here from
    `root/submissions` when None; `{}` skips the check for copies)."""
    path = Path(path)
    report = Report(path, release_id)
    try:
        release = load_release(root, release_id)
    except (FileNotFoundError, ValueError) as e:
        report.add(f"release: {e}")
        return report
    if path.is_symlink() or not path.is_dir():
        report.add(f"{path.name}: not a submission folder" + (" (a symbolic link)" if path.is_symlink() else ""))
        return report
    _guarded(report, MANIFEST, _check_manifest, path, report)
    if report.reasons:  # files that are not the packaged ones: nothing in them is read, nothing recomputed
        report.stopped = True
        return report
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
        n_before = len(report.reasons)
        cell = _guarded(report, f"cells/{d.name}", _check_cell, d, release, grid, report)
        if report.stopped:
            return report
        if cell is not None:
            report.cells.append(cell)
        elif len(report.reasons) == n_before:  # never drop a cell silently: a dropped cell is a rejected one
            report.add(f"cells/{d.name}: could not be verified")
    _guarded(report, "across cells", _check_across_cells, report, sub if isinstance(sub, dict) else {}, dirs)
    if not report.cells and not report.reasons:
        report.add("no cell was verified (an empty verification is never accepted)")
    for key, ids in sorted(report.unverified.items()):
        report.notes.append(f"{key} of {len(ids)} cells is not recomputable from samples (not shown on the board)")
    if report.ok:
        _guarded(report, "copies", _check_copies, report, path, Path(root), release_id, peers)
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


def _walk(path: Path, report: Report) -> dict[str, str]:
    """Every entry under `path` by relative name -> "file" or "dir", looked at with lstat (never followed); links,
    FIFOs, sockets and devices are reasons. Iterative and capped, so no tree shape can exhaust it."""
    out: dict[str, str] = {}
    todo = [path]
    while todo:
        d = todo.pop()
        try:
            names = sorted(os.listdir(d))
        except OSError as e:
            report.add(f"{d.relative_to(path).as_posix()}: cannot be listed ({e.strerror})")
            continue
        for name in names:
            p = d / name
            rel = p.relative_to(path).as_posix()
            if len(out) >= MAX_ENTRIES:
                report.add(f"more than {MAX_ENTRIES} files and folders: not a submission esbench packaged")
                return out
            try:
                mode = os.lstat(p).st_mode
            except OSError as e:
                report.add(f"{rel}: cannot be read ({e.strerror})")
                continue
            if stat.S_ISLNK(mode):
                report.add(f"{rel}: symbolic links are not allowed in a submission")
            elif stat.S_ISDIR(mode):
                out[rel] = "dir"
                todo.append(p)
            elif stat.S_ISREG(mode):
                out[rel] = "file"
            else:
                report.add(f"{rel}: not a regular file (a FIFO, socket or device is not allowed in a submission)")
    return out


def _check_manifest(path: Path, report: Report) -> None:
    """Structure first (lstat only, nothing read), then each listed file hashed by the strict reader; the first
    hash that fails ends the check."""
    entries = _walk(path, report)
    if entries.get(MANIFEST) != "file":
        if MANIFEST not in entries and not os.path.lexists(path / MANIFEST):
            report.add(f"{MANIFEST}: missing")
        return
    manifest = _read_json(path / MANIFEST, report, MANIFEST)
    if manifest is None:
        return
    listed = manifest.get("files") if isinstance(manifest, dict) else None
    if (
        not isinstance(listed, dict)
        or manifest.get("algorithm") != "sha256"
        or not all(isinstance(v, str) for v in listed.values())
    ):
        report.add(f"{MANIFEST}: expected {{'algorithm': 'sha256', 'files': {{path: sha256}}}}")
        return
    for rel, kind in sorted(entries.items()):
        if kind == "file" and rel != MANIFEST and rel not in listed:
            report.add(f"{rel}: file not listed in {MANIFEST} (extra file)")
    for rel in sorted(listed):
        if rel.startswith("/") or ".." in Path(rel).parts:
            report.add(f"{MANIFEST}: path {rel!r} points outside the submission")
        elif entries.get(rel) != "file":
            report.add(f"{rel}: listed in {MANIFEST} but missing")
    if report.reasons:
        return
    for rel, digest in sorted(listed.items()):
        try:
            data = read_bytes(path / rel)
        except UntrustedInputError as e:
            report.stop(_refused(e, path / rel, rel))
            return
        if hashlib.sha256(data).hexdigest() != digest:
            report.stop(f"{rel}: SHA-256 does not match {MANIFEST} (file edited after packaging)")
            return


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
        ids: list[Any] = [c.get("id") if isinstance(c, dict) else c for c in listed]  # untrusted: any JSON value
        on_disk = [d.name for d in dirs]
        for missing in sorted(set(ids) - set(on_disk)):
            report.add(f"{SUBMISSION}: lists cell {missing} but cells/{missing} is missing")
        for extra in sorted(set(on_disk) - set(ids)):
            report.add(f"cells/{extra}: not listed in {SUBMISSION}")
        if len(set(ids)) != len(ids):
            report.add(f"{SUBMISSION}: lists a cell twice")
        records: dict[Any, dict[str, Any]] = {c.id: c.record["cell"] for c in report.cells}  # read with untrusted ids
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
    starts: dict[str, tuple[str, str | None]] = {}  # model spec -> (first cell, its start weights, if recorded)
    for c in report.cells:
        key = _canon(c.record["cell"]["spec"]["model"])
        start = (c.record["provenance"].get("model") or {}).get("state_sha256")
        if key in starts and start != starts[key][1]:
            report.add(f"cells {starts[key][0]} and {c.id} use the same model spec but start from different weights")
        starts.setdefault(key, (c.id, start))


# ---------------------------------------------------------------------------------------------------------------
# copies: the same evidence under another name


def submission_evidence(path: Path) -> str | None:
    """A submission's evidence fingerprint: the sorted per-cell hashes of every sampled response (the same hash as
    `CellResult.evidence`: formatting, row order and names play no part). None when it cannot be read.

    Read with the strict reader and without verifying (cheap: no verifier runs), so the fingerprints of every
    submission in a folder can be set side by side; a match is then confirmed by verifying the other one."""
    path = Path(path)
    cells: list[str] = []
    try:
        if path.is_symlink() or not (path / "cells").is_dir() or (path / "cells").is_symlink():
            return None
        for d in sorted((path / "cells").iterdir()):
            if d.is_symlink() or not d.is_dir():
                continue
            spec = load_json_object(d / "record.json").get("cell", {}).get("spec", {})
            h = hashlib.sha256()
            for t in spec.get("eval", {}).get("tasks", []):
                h.update(response_evidence(load_jsonl(d / "samples" / f"{t}.jsonl")))
            cells.append(h.hexdigest())
    except (UntrustedInputError, OSError, AttributeError, TypeError):
        return None
    return hashlib.sha256("\n".join(sorted(cells)).encode()).hexdigest() if cells else None


def board_ledger(root: Path) -> dict[str, str]:
    """Submission name -> evidence fingerprint of the submissions the built board lists (`BOARD_LEDGER`, written by
    `leaderboard build`); empty when there is none or it cannot be read."""
    try:
        listed = load_json_object(Path(root) / BOARD_LEDGER).get("submissions")
    except UntrustedInputError:
        return {}
    if not isinstance(listed, dict):
        return {}
    return {k: v for k, v in listed.items() if isinstance(v, str)}


def submission_folders(root: Path) -> list[Path]:
    """The entries of `root/submissions` that are (or pretend to be, through a link) submission folders."""
    subs = Path(root) / "submissions"
    if subs.is_symlink() or not subs.is_dir():
        return []
    return sorted(p for p in subs.iterdir() if not p.name.startswith(".") and (p.is_symlink() or p.is_dir()))


def _check_copies(
    report: Report, path: Path, root: Path, release_id: str, peers: dict[Path, str | None] | None
) -> None:
    """Reject a submission whose evidence is another's. The one the built board already lists keeps its place; while
    neither is on the board, both are rejected (so a copy can never push the original off)."""
    evidence = submission_evidence(path)
    if evidence is None:
        report.add("the submission's evidence cannot be read back (files changed while it was verified?)")
        return
    report.evidence = evidence
    ledger = board_ledger(root)
    for name, fp in sorted(ledger.items()):
        if fp == evidence and name != path.name:
            report.add(
                f"copied evidence: every sampled output equals submission {name!r}'s, already on the board "
                "(a submission is identified by its evidence, not its name)"
            )
            return
    if ledger.get(path.name) == evidence or peers == {}:
        return
    if peers is None:
        peers = {p: submission_evidence(p) for p in submission_folders(root)}
    here = path.resolve()
    for other, other_fp in sorted(peers.items()):
        if other_fp != evidence or Path(other).resolve() == here:
            continue
        if verify(Path(other), root, release_id, peers={}).ok:
            report.add(
                f"copied evidence: every sampled output equals submission {Path(other).name!r}'s "
                "(a submission is identified by its evidence, not its name); neither is on the board yet, so "
                "neither is accepted until one is withdrawn"
            )
            return
