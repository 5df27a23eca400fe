"""The release's grid: its frozen cells indexed so a submitted cell can be placed on it, and the spec comparisons
(canonical form, stripped keys, differing paths) that placing and the cross-cell checks share.

Separate from `verify.py` (the submission-level flow) and `verify_cell.py` (the checks on one cell folder), which
both use it, so neither imports the other's internals.
"""

from __future__ import annotations

import json
from typing import Any


def _canon(obj: Any) -> str:
    from esbench.spec import canonical_json

    return canonical_json(obj)


def _diff_paths(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two JSON values differ (for naming what an edited spec changed)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff_paths(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else k)
        return out
    return [] if a == b else [prefix or "(root)"]


def _strip(spec: dict[str, Any], *keys: str) -> str:
    return _canon({k: v for k, v in spec.items() if k not in keys})


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
