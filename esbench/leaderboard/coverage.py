"""The numbers behind the leaderboard's paper sections: which entry metric meets which paper value, and the
coverage of the paper (every value of Tables 2-13 with its status), including the training-side values read from
the submissions' cell folders (Table 6's reward EMA from train.jsonl, Table 13's subtraction rows).

Separate from the renderers, which only format what this module computes; it imports none of them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from esbench.leaderboard.board import Board, _no_seed
from esbench.leaderboard.verify_report import CellResult, as_model
from esbench.metrics.subtraction import PAPER_TABLE_13
from esbench.records import TrainRow, method_key
from esbench.report_experiments import reward_curve
from esbench.untrusted import UntrustedInputError, load_jsonl


def paper_hits(board: Board) -> dict[tuple, dict[str, Any]]:
    """(table metric family, model, method, paper task, metric) -> the entry metric compared to it."""
    hits: dict[tuple, dict[str, Any]] = {}
    for e in board.entries:
        for t in e.tasks.values():
            for m, row in t["metrics"].items():
                if "ref" in row and e.paper_model and e.paper_method:
                    hits.setdefault((e.paper_model, e.paper_method, t["paper_task"], m), {**row, "entry": e.key})
    return hits


def ref_index(board: Board) -> dict[tuple, float]:
    return {(v["table"], v["model"], v["method"], v["column"], v["metric"]): v["value"] for v in board.reference}


def table_models(board: Board, table: int) -> list[str]:
    seen: list[str] = []
    for v in board.reference:
        if v["table"] == table and v["model"] not in seen:
            seen.append(v["model"])
    return seen


# coverage: every paper value of the release's reference (Tables 2-13), reproduced or awaiting reproduction
#
# Shown only for a release whose paper map carries `coverage` (v1.0 to v1.3 do not, and render as before):
#     "coverage": {"population": ["paper-population"], "subtraction": ["paper-subtraction"]}
# Tables of the paper map's `tables` take their cells' verdicts under the rule (the paper sections). Table 6 is read
# from ES cells of the `population` suites (exactly as frozen, any seed): the debiased EMA of train.jsonl's
# per-update reward at the paper's updates, by model and population N. Table 13 from `subtraction` cells of the
# `subtraction` suites: their record's `train.subtraction` rows, by σ and objective. Both are the submission's own
# training-side logs, which verify cannot recompute from samples: they are shown beside the paper's number as
# *reported*, never judged. Table 13's targets are the release's reference values of table 13 when it has them,
# else `esbench.metrics.subtraction.PAPER_TABLE_13`. Any other paper value awaits reproduction.

AWAITING = "awaiting reproduction"
REPORTED = "reported"
COUNTED = ["reproduced", "warn", "fail", REPORTED, AWAITING]
T13_STATS = {
    "corr_plus_zero": "Corr(X₊,X₀)",
    "kappa_base": "κ_base",
    "corr_plus_minus": "Corr(X₊,X₋)",
    "kappa_pair": "κ_pair",
}
T13_MODEL = "Qwen2.5-1.5B-Instruct"
T13_METHOD = "Subtraction"
T13_TITLE = "Subtraction diagnostic (Qwen2.5-1.5B-Instruct base, GSM8K): correlation and κ per σ and objective"
EXPERIMENTS = {6: "population", 13: "subtraction"}  # tables read from training-side logs, not from samples


@dataclass
class Covered:
    """One paper value and what the board holds for it."""

    ref: dict[str, Any]
    status: str = AWAITING
    value: float | None = None  # the submission's value (pp for judged metrics), None while awaiting or undefined
    delta: float | None = None
    where: str = ""  # the submission (and cells) it comes from


@dataclass
class TableCoverage:
    table: int
    title: str
    values: list[Covered] = field(default_factory=list)
    note: str = ""  # where the targets come from, when not from the release's reference

    def rows(self) -> dict[tuple[str, str], list[Covered]]:
        out: dict[tuple[str, str], list[Covered]] = {}
        for c in self.values:
            out.setdefault((c.ref["model"], c.ref["method"]), []).append(c)
        return out

    def awaiting(self) -> int:
        return sum(c.status == AWAITING for c in self.values)


def coverage_config(release: dict[str, Any]) -> dict[str, Any] | None:
    return (release.get("paper_map") or {}).get("coverage")


def table13_reference() -> list[dict[str, Any]]:
    """Table 13 in the reference's shape (one value per σ, objective and statistic), from PAPER_TABLE_13."""
    return [
        {
            "table": 13,
            "model": T13_MODEL,
            "method": T13_METHOD,
            "column": objective,
            "metric": metric,
            "value": stats[metric],
            "unit": "ratio",
            "sigma": sigma,
            "source": {"table": "Table 13", "row": f"σ = {_sigma(sigma)} / {objective}", "column": label},
        }
        for (sigma, objective), stats in PAPER_TABLE_13.items()
        for metric, label in T13_STATS.items()
    ]


def _sigma(s: float) -> str:
    """1e-3, 3e-4: σ as the paper prints it."""
    mantissa, exponent = f"{s:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def _sig(x: Any) -> float | None:
    """A σ as a lookup key (1e-3 and 0.001 alike), None for anything that is not a number."""
    return float(f"{x:.6g}") if _number(x) else None


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def paper_titles(board: Board) -> dict[int, str]:
    doc = json.loads((board.release["dir"] / board.release["reference"]["paper"]).read_text())
    return {int(k): v for k, v in doc["tables"].items()}


def coverage(board: Board) -> list[TableCoverage] | None:
    """Per paper table (2-13), each value with its status; None for a release without `paper_map.coverage`."""
    cfg = coverage_config(board.release)
    if cfg is None:
        return None
    compared = set(board.release["paper_map"]["tables"])
    hits = paper_hits(board)
    logged = _experiment_values(board, cfg)
    values = list(board.reference)
    frozen13 = any(v["table"] == 13 for v in values)
    if not frozen13:
        values += table13_reference()
    titles = {13: T13_TITLE, **paper_titles(board)}
    tables: dict[int, TableCoverage] = {}
    for v in sorted(values, key=lambda v: v["table"]):  # stable: the reference's own order within a table
        t = v["table"]
        c = Covered(v)
        if t in compared:
            hit = hits.get((v["model"], v["method"], v["column"], v["metric"]))
            if hit is not None:
                c.status, c.value, c.delta = hit["status"], hit["mean"], hit["delta"]
                c.where = hit["entry"].rsplit(":", 1)[0]
        elif t in EXPERIMENTS:
            key: tuple[Any, ...] = (t, v["model"], v.get("population"), v.get("update"))
            if t == 13:
                key = (t, v["model"], _sig(v.get("sigma")), v["column"], v["metric"])
            if key in logged:
                c.value, c.where = logged[key]
                c.status = REPORTED
                c.delta = None if c.value is None else c.value - v["value"]
        tables.setdefault(t, TableCoverage(t, titles.get(t, ""))).values.append(c)
    if 13 in tables and not frozen13:
        source = "`esbench.metrics.subtraction.PAPER_TABLE_13`"
        tables[13].note = f"Targets from {source} (the release's reference has no Table 13)."
    return list(tables.values())


def _experiment_values(board: Board, cfg: dict[str, Any]) -> dict[tuple, tuple[float | None, str]]:
    """(6, model, N, update) -> the debiased-EMA training reward, and (13, model, σ, objective, statistic) -> the
    diagnostic's value, each a mean over the seeds that have it, with the submission and cells it comes from. The
    first submission (by name) to carry a value gives it, as in the tables above."""
    rel = board.release
    frozen = json.loads((rel["dir"] / rel["cells"]).read_text())

    def grid(kind: str) -> set[str]:
        return {_no_seed(c["spec"]) for suite in cfg.get(kind, []) for c in frozen.get(suite, [])}

    population, subtraction = grid("population"), grid("subtraction")
    out: dict[tuple, tuple[float | None, str]] = {}
    for report in board.accepted:
        name = report.submission.get("name", report.path.name)
        groups: dict[str, list] = {}
        for c in report.cells:
            groups.setdefault(_no_seed(c.record["cell"]["spec"]), []).append(c)
        for key, cells in groups.items():
            cells.sort(key=lambda c: c.record["cell"]["spec"]["seed"])
            spec = cells[0].record["cell"]["spec"]
            path = spec["model"]["path"]
            model = rel["paper_map"]["models"].get(path) or path.rsplit("/", 1)[-1]
            where = f"{name} ({', '.join(c.id for c in cells)})"
            found: dict[tuple, list[float | None]] = {}
            if key in population and method_key(spec) == "es":
                n = spec["method"]["config"].get("population")
                for c in cells:
                    for u, ema in _ema_by_update(report.path / "cells" / c.id, c).items():
                        found.setdefault((6, model, n, u), []).append(ema)
            elif key in subtraction and method_key(spec) == "subtraction":
                for c in cells:
                    rows = (c.record.get("train") or {}).get("subtraction")
                    for row in rows if isinstance(rows, list) else []:
                        if not isinstance(row, dict) or _sig(row.get("sigma")) is None:
                            continue
                        if not isinstance(row.get("objective"), str):
                            continue
                        for stat in T13_STATS:
                            x = row.get(stat)
                            k = (13, model, _sig(row["sigma"]), row.get("objective"), stat)
                            found.setdefault(k, []).append(x if _number(x) else None)
            for k, xs in found.items():
                numbers = [x for x in xs if x is not None]
                out.setdefault(k, (_mean(numbers) if numbers else None, where))
    return out


def _ema_by_update(cell_dir: Path, cell: CellResult) -> dict[int, float]:
    """update (1-based, as Table 6 counts) -> the debiased EMA of the cell's per-update training reward, as the
    report's population table reads it (`esbench.report_experiments.reward_curve`)."""
    rows = cell.train  # the log as verified, not re-read from disk
    if rows is None:
        try:
            log = cell_dir / "train.jsonl"
            rows = [as_model(TrainRow, r) for r in load_jsonl(log)] if log.exists() else []
        except (UntrustedInputError, ValidationError):
            return {}
    curve = reward_curve(rows)
    if curve is None:
        return {}
    return {u: x for u, x in zip(curve["updates"], curve["ema"], strict=True) if _number(x)}


def status_counts(values: list[Covered]) -> dict[str, int]:
    return {s: sum(c.status == s for c in values) for s in COUNTED}


def grid_layout(tc: TableCoverage) -> tuple[list[str], list[list[Any]]]:
    """(header, rows of cells: str or Covered) in the table's own layout. Table 6: per model, update × N; Table 13:
    σ × objective → the four statistics; any other table: the printed rows × the printed columns."""
    if tc.table == 6:
        ns = sorted({c.ref["population"] for c in tc.values})
        cells: dict[tuple[Any, ...], Covered] = {
            (c.ref["model"], c.ref["update"], c.ref["population"]): c for c in tc.values
        }
        models = list(dict.fromkeys(c.ref["model"] for c in tc.values))
        updates = sorted({c.ref["update"] for c in tc.values})
        return ["model", "update", *[f"N={n}" for n in ns]], [
            [m, str(u), *[cells.get((m, u, n), "—") for n in ns]] for m in models for u in updates
        ]
    if tc.table == 13:
        cells = {(_sig(c.ref["sigma"]), c.ref["column"], c.ref["metric"]): c for c in tc.values}
        # the reference's σ are numbers (its schema), so none of these keys is None
        keys: list[tuple[Any, Any]] = list(dict.fromkeys((_sig(c.ref["sigma"]), c.ref["column"]) for c in tc.values))
        return ["σ", "objective", *T13_STATS.values()], [
            [_sigma(s), o, *[cells.get((s, o, m), "—") for m in T13_STATS]] for s, o in keys
        ]
    columns = list(dict.fromkeys(c.ref["source"]["column"] for c in tc.values))
    printed = list(dict.fromkeys(c.ref["source"]["row"] for c in tc.values))
    cells = {(c.ref["source"]["row"], c.ref["source"]["column"]): c for c in tc.values}
    return ["row", *columns], [[r, *[cells.get((r, col), "—") for col in columns]] for r in printed]


def table_sources(tc: TableCoverage) -> list[str]:
    return list(dict.fromkeys(c.where for c in tc.values if c.where))
