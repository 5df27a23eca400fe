"""Report sections for the paper's experiments beyond its main grid (arXiv 2608.27351): Table 6's population sweep
(debiased-EMA training reward, the within-0.01 rule), Fig. 1(c)'s ablation curves, Table 13's subtraction
diagnostic, Fig. 2's probe curves and Pass@K profiles for every K up to n, from the report's cells
(report_cells.py). Plain data; `report_render` draws it. Reference values sit beside each number: Table 6 from
leaderboard/reference/paper_tables.json, Table 13 from `esbench.metrics.subtraction.PAPER_TABLE_13`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esbench.metrics.curves import debiased_ema, local_sd, matches
from esbench.metrics.passk import mean_pass_at_k
from esbench.metrics.subtraction import PAPER_TABLE_13
from esbench.records import TrainRow
from esbench.report_cells import ReportCell

PAPER_TABLES = Path(__file__).resolve().parent.parent / "leaderboard" / "reference" / "paper_tables.json"


def _points(last: int) -> list[int]:
    """Table 6 reads updates 100, 200, 300; shorter runs (the tiny twins) are read at thirds of their length."""
    return [100, 200, 300] if last >= 300 else sorted({max(1, round(last * f)) for f in (1 / 3, 2 / 3, 1)})


def reward_curve(rows: Sequence[TrainRow]) -> dict[str, list[Any]] | None:
    """Raw mean training reward per update, its debiased EMA (β = 0.99) and local SD; None without reward rows."""
    series = [(r.update, r.reward_mean) for r in rows if r.reward_mean is not None]
    if not series:
        return None
    xs = [x for _, x in series]
    return {"updates": [u + 1 for u, _ in series], "raw": xs, "ema": debiased_ema(xs), "sd": local_sd(xs)}


def reward_curves(cells: Sequence[ReportCell]) -> dict[str, dict[str, list[Any]]]:
    """Per trained cell (by label): its `reward_curve`."""
    out = {}
    for cell in cells:
        curve = reward_curve(cell.train)
        if curve:
            out[cell.label] = curve
    return out


def _paper_table6() -> dict[tuple[str, int, int], float]:
    if not PAPER_TABLES.exists():
        return {}
    data = json.loads(PAPER_TABLES.read_text())
    return {(v["model"], v["population"], v["update"]): v["value"] for v in data["values"] if v["table"] == 6}


def population_table(cells: Sequence[ReportCell], curves: dict[str, dict[str, list[Any]]]) -> list[dict[str, Any]]:
    """Table 6's layout: ES cells of one model that differ only in `population`, EMA reward at the read points,
    each marked as matching the largest N (within 0.01) or not, beside the paper's value for that model and N."""
    groups: dict[tuple[str], list[ReportCell]] = {}
    for cell in cells:
        spec = cell.spec
        if spec["method"]["kind"] != "es" or cell.label not in curves:
            continue
        rest = {k: v for k, v in spec["method"]["config"].items() if k != "population"}
        key = (json.dumps({**spec, "method": rest, "seed": spec["seed"]}, sort_keys=True),)
        groups.setdefault(key, []).append(cell)
    paper = _paper_table6()
    out = []
    for recs in groups.values():
        if len({r.spec["method"]["config"]["population"] for r in recs}) < 2:
            continue
        recs.sort(key=lambda r: r.spec["method"]["config"]["population"])
        ref = curves[recs[-1].label]
        points = _points(min(curves[r.label]["updates"][-1] for r in recs))
        model = recs[0].spec["model"]["path"].rsplit("/", 1)[-1]
        ref_at = {u: ref["ema"][ref["updates"].index(u)] for u in points}
        cols = []
        for r in recs:
            c = curves[r.label]
            n = r.spec["method"]["config"]["population"]
            vals = {u: c["ema"][c["updates"].index(u)] for u in points}
            cols.append(
                {
                    "cell": r.label,
                    "population": n,
                    "values": vals,
                    "matches": {u: matches(vals[u], ref_at[u]) for u in points},
                    "paper": {u: paper.get((model, n, u)) for u in points},
                }
            )
        out.append({"model": model, "points": points, "reference_population": cols[-1]["population"], "cols": cols})
    return out


def subtraction_table(cells: Sequence[ReportCell]) -> list[dict[str, Any]]:
    """Table 13's layout: per σ and objective, Corr(X₊,X₀), κ_base, Corr(X₊,X₋), κ_pair beside the paper's."""
    out = []
    for cell in cells:
        rows = cell.record.train.get("subtraction")
        if rows:
            out.append(
                {
                    "cell": cell.label,
                    "rows": [{**r, "paper": PAPER_TABLE_13.get((r["sigma"], r["objective"]))} for r in rows],
                }
            )
    return out


def probe_curves(cells: Sequence[ReportCell]) -> dict[str, dict[str, list[Any]]]:
    """Fig. 2: the training probe's token entropy and Pass@k (every logged k) over updates."""
    out: dict[str, dict[str, list[Any]]] = {}
    for cell in cells:
        probes = [(r.update, r.probe) for r in cell.train if r.probe is not None]
        if probes:
            ks = sorted({k for _, p in probes for k in p.pass_at_k}, key=int)
            out[cell.label] = {
                "updates": [u for u, _ in probes],
                "entropy": [p.entropy for _, p in probes],
                **{f"pass@{k}": [p.pass_at_k.get(k) for _, p in probes] for k in ks},
            }
    return out


def passk_profiles(cells: Sequence[ReportCell]) -> dict[str, dict[str, list[float]]]:
    """Pass@K for every K = 1..n from the records' per-problem [n, c] counts (Figs. 2(c-d), 3, 4, 6)."""
    out: dict[str, dict[str, list[float]]] = {}
    for cell in cells:
        for task, m in cell.record.metrics.items():
            counts = m.per_problem
            if counts:
                n = min(c[0] for c in counts)
                out.setdefault(cell.label, {})[task] = [mean_pass_at_k(counts, k) for k in range(1, n + 1)]
    return out


def build(cells: Sequence[ReportCell]) -> dict[str, Any]:
    curves = reward_curves(cells)
    return {
        "reward_curves": curves,
        "population": population_table(cells, curves),
        "subtraction": subtraction_table(cells),
        "probe": probe_curves(cells),
        "passk_profiles": passk_profiles(cells),
    }
