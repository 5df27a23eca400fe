"""What every check of a submission shares: the `Report` it fills, the `CellResult` of a verified cell, the strict
readers that turn a refused file into a reason on the report, the validation of what they read into the models of
`esbench.records` (`as_model`), and the tolerance of a recomputed number.

The lowest of the verification modules: verify_samples.py (the metrics re-derived from the per-sample logs),
verify_cell.py (the checks of one cell folder) and verify.py (the submission-level flow) import from here, never
the reverse.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from esbench.records import TrainRow
from esbench.untrusted import UntrustedInputError, load_jsonl, loads, read_text

TOL = 1e-9
MAX_FIELD_REASONS = 5  # per refused document: a file with a million wrong values gets a few lines, not a million
Model = TypeVar("Model", bound=BaseModel)


@dataclass
class CellResult:
    """A verified cell: its record and what was recomputed from its samples."""

    id: str
    record: dict[str, Any]
    recomputed: dict[str, dict[str, Any]] = field(default_factory=dict)
    per_problem: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # task -> metric -> values
    grid: str = ""  # "release" or "plug-in"
    evidence: str = ""  # hash of every sampled response, to spot one run submitted under two seeds
    train: list[TrainRow] | None = None  # train.jsonl as verified (the board reads it from here, not from disk)


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


def as_model(model: type[Model], doc: Any) -> Model:
    """`doc`, as the strict reader parsed it, validated into `model` with no coercion: a JSON string is not a number
    and a float is not an integer, as in the JSON esbench writes (JSON mode: an integer is a float, an array a
    tuple). Raises `ValidationError`."""
    return model.model_validate_json(json.dumps(doc), strict=True)


def field_reasons(err: ValidationError, what: str) -> list[str]:
    """One line per wrong field of `what`: `what: field.path: message` (the path as pydantic's loc), at most
    `MAX_FIELD_REASONS` of them."""
    errors = err.errors(include_url=False)
    out = []
    for e in errors[:MAX_FIELD_REASONS]:
        got = e.get("input")
        shown = f" (got {got!r:.60})" if got is None or isinstance(got, str | int | float) else ""
        out.append(f"{what}: {'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}{shown}")
    if len(errors) > MAX_FIELD_REASONS:
        out.append(f"{what}: {len(errors) - MAX_FIELD_REASONS} more wrong fields")
    return out


def _validated(model: type[Model], doc: Any, what: str, report: Report) -> Model | None:
    """`as_model(model, doc)`; None, with each wrong field a reason on the report (`field_reasons`), when `doc` is
    not one."""
    try:
        return as_model(model, doc)
    except ValidationError as e:
        for reason in field_reasons(e, what):
            report.add(reason)
    return None


def _read_jsonl(path: Path, report: Report, what: str) -> list[dict[str, Any]] | None:
    try:
        return load_jsonl(path)
    except UntrustedInputError as e:
        report.add(_refused(e, path, what))
    return None


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        try:
            return math.isclose(a, b, rel_tol=0, abs_tol=TOL)
        except OverflowError:  # a JSON integer too large for a float
            return False
    return a == b
