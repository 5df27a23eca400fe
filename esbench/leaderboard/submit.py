"""`esbench submit RUN_DIR --name NAME`: package a finished run as `leaderboard/submissions/NAME/`.

A submission holds, per cell, the frozen spec, the record, the training log and the per-sample logs (everything
`verify` needs to recompute every number), plus `submission.json` (name, release, suite, cells) and
`MANIFEST.json` (SHA-256 of every file). It is assembled in a temporary folder, verified, and only then renamed
into place, so a rejected or interrupted submission leaves nothing behind. A duplicate name is an error.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from esbench.leaderboard.release import CURRENT
from esbench.leaderboard.verify import MANIFEST, NAME, SUBMISSION, SUBMISSION_SCHEMA, Report, manifest_for, verify
from esbench.leaderboard.verify_report import as_model, field_reasons
from esbench.records import Record, atomic_write_json
from esbench.untrusted import UntrustedInputError, load_json_object, read_bytes


class SubmitError(Exception):
    """Bad input to `esbench submit`; `report` is set when the packaged submission failed verification."""

    def __init__(self, message: str, report: Report | None = None):
        super().__init__(message)
        self.report = report


def find_cells(run_dir: Path) -> list[Path]:
    """Cell folders of a run: RUN_DIR is a suite folder (runs/<suite>) or an output root holding one suite."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise SubmitError(f"{run_dir}: no such run folder")
    cells = sorted(p.parent for p in run_dir.glob("*/cell.json"))
    if not cells:
        suites = sorted({p.parent.parent for p in run_dir.glob("*/*/cell.json")})
        if len(suites) > 1:
            raise SubmitError(f"{run_dir} holds several suites ({', '.join(s.name for s in suites)}); pass one of them")
        cells = sorted(p.parent for p in run_dir.glob("*/*/cell.json"))
    if not cells:
        raise SubmitError(f"{run_dir}: no cells found (expected <suite>/<cell-id>/cell.json)")
    unfinished = [c.name for c in cells if not (c / "record.json").exists()]
    if unfinished:
        raise SubmitError(f"cells not done (no record.json): {', '.join(unfinished)}; finish the run first")
    return cells


def submit(
    run_dir: Path, name: str, root: Path, release_id: str = CURRENT, created: str | None = None
) -> tuple[Path, Report]:
    """Package, verify and publish; returns the submission folder and its verification report."""
    if not NAME.match(name):
        raise SubmitError(f"invalid submission name {name!r}: letters, digits, '.', '_' and '-' only")
    dest = Path(root) / "submissions" / name
    if dest.exists():
        raise SubmitError(f"submission {name!r} already exists at {dest}; choose another name")
    cells = find_cells(run_dir)
    # A run folder is read like a submission: no link followed, no FIFO or device read, strict JSON, and each record
    # validated as verify validates it (`Record`, no coercion).
    records: list[Record] = []
    try:
        for c in cells:
            path = c / "record.json"
            try:
                records.append(as_model(Record, load_json_object(path)))
            except ValidationError as e:
                raise UntrustedInputError("; ".join(field_reasons(e, str(path)))) from None
        for r in records:
            if not isinstance(r.cell.get("labels"), dict):
                raise UntrustedInputError("a record without cell labels")
        for c, r in zip(cells, records, strict=True):  # its id names the folder it is copied to
            if r.cell.get("id") != c.name:
                raise UntrustedInputError(f"{c / 'record.json'}: cell id {r.cell.get('id')!r} is not its folder's")
    except UntrustedInputError as e:
        raise SubmitError(f"cannot package the run: {e}") from None
    suites = sorted({r.cell["labels"]["suite"] for r in records})
    if len(suites) != 1:
        raise SubmitError(f"a submission covers one suite; these cells come from {suites}")
    stale = sorted({r.release for r in records} - {release_id})
    if stale:
        raise SubmitError(f"the run was made under release {', '.join(stale)}; release {release_id} needs a fresh run")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest.parent))
    try:
        staged = tmp / name  # verify checks that the folder name is the submission name
        for c, r in zip(cells, records, strict=True):
            out = staged / "cells" / r.cell["id"]
            (out / "samples").mkdir(parents=True)
            files = [f for f in ("cell.json", "record.json", "train.jsonl") if (c / f).exists()]
            try:
                for f in files:
                    (out / f).write_bytes(read_bytes(c / f))
                for sample in sorted((c / "samples").glob("*.jsonl")):
                    (out / "samples" / sample.name).write_bytes(read_bytes(sample))
            except UntrustedInputError as e:
                raise SubmitError(f"cannot package the run: {e}") from None
        meta: dict[str, Any] = {
            "schema": SUBMISSION_SCHEMA,
            "name": name,
            "release": release_id,
            "suite": suites[0],
            "created": created or dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "cells": [
                {"id": r.cell["id"], "name": r.cell["name"], "method": r.cell["labels"]["method"]} for r in records
            ],
        }
        atomic_write_json(staged / SUBMISSION, meta)
        atomic_write_json(staged / MANIFEST, manifest_for(staged))
        report = verify(staged, root, release_id)
        if not report.ok:
            raise SubmitError(f"the packaged run fails verification ({len(report.reasons)} reasons)", report)
        staged.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.path = dest
    return dest, report
