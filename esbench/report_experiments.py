"""Report sections for the paper's experiments beyond its main grid (arXiv 2608.27351): Table 6's population sweep
(debiased-EMA training reward, the within-0.01 rule), Fig. 1(c)'s ablation curves, Table 13's subtraction
diagnostic, Fig. 2's probe curves and Pass@K profiles for every K up to n. Plain data; `report_render` draws it.
Reference values sit beside each number: Table 6 from leaderboard/reference/paper_tables.json, Table 13 from
`esbench.metrics.subtraction.PAPER_TABLE_13`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from esbench.metrics.curves import debiased_ema, local_sd, matches
from esbench.metrics.passk import mean_pass_at_k
from esbench.metrics.subtraction import PAPER_TABLE_13

PAPER_TABLES = Path(__file__).resolve().parent.parent / "leaderboard" / "reference" / "paper_tables.json"


def train_rows(rec) -> list[dict]:
    """The cell's train.jsonl rows, read once per record and kept on it (every section reads the same log)."""
    if "_train" not in rec:
        path = rec["_dir"] / "train.jsonl"
        rec["_train"] = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    return rec["_train"]


def _points(last: int) -> list[int]:
    """Table 6 reads updates 100, 200, 300; shorter runs (the tiny twins) are read at thirds of their length."""
    return [100, 200, 300] if last >= 300 else sorted({max(1, round(last * f)) for f in (1 / 3, 2 / 3, 1)})


def reward_curves(records, labels) -> dict[str, dict[str, Any]]:
    """Per trained cell: raw mean training reward per update, its debiased EMA (β = 0.99) and local SD."""
    out = {}
    for rec in records:
        series = [(r["update"], r["reward_mean"]) for r in train_rows(rec) if "reward_mean" in r]
        if series:
            xs = [x for _, x in series]
            out[labels[id(rec)]] = {
                "updates": [u + 1 for u, _ in series],
                "raw": xs,
                "ema": debiased_ema(xs),
                "sd": local_sd(xs),
            }
    return out


def _paper_table6() -> dict[tuple[str, int, int], float]:
    if not PAPER_TABLES.exists():
        return {}
    data = json.loads(PAPER_TABLES.read_text())
    return {(v["model"], v["population"], v["update"]): v["value"] for v in data["values"] if v["table"] == 6}


def population_table(records, labels, curves) -> list[dict[str, Any]]:
    """Table 6's layout: ES cells of one model that differ only in `population`, EMA reward at the read points,
    each marked as matching the largest N (within 0.01) or not, beside the paper's value for that model and N."""
    groups: dict[tuple, list] = {}
    for rec in records:
        spec = rec["cell"]["spec"]
        if spec["method"]["kind"] != "es" or labels[id(rec)] not in curves:
            continue
        rest = {k: v for k, v in spec["method"]["config"].items() if k != "population"}
        key = (json.dumps({**spec, "method": rest, "seed": spec["seed"]}, sort_keys=True),)
        groups.setdefault(key, []).append(rec)
    paper = _paper_table6()
    out = []
    for recs in groups.values():
        if len({r["cell"]["spec"]["method"]["config"]["population"] for r in recs}) < 2:
            continue
        recs.sort(key=lambda r: r["cell"]["spec"]["method"]["config"]["population"])
        ref = curves[labels[id(recs[-1])]]
        points = _points(min(curves[labels[id(r)]]["updates"][-1] for r in recs))
        model = recs[0]["cell"]["spec"]["model"]["path"].rsplit("/", 1)[-1]
        ref_at = {u: ref["ema"][ref["updates"].index(u)] for u in points}
        cols = []
        for r in recs:
            c = curves[labels[id(r)]]
            n = r["cell"]["spec"]["method"]["config"]["population"]
            vals = {u: c["ema"][c["updates"].index(u)] for u in points}
            cols.append(
                {
                    "cell": labels[id(r)],
                    "population": n,
                    "values": vals,
                    "matches": {u: matches(vals[u], ref_at[u]) for u in points},
                    "paper": {u: paper.get((model, n, u)) for u in points},
                }
            )
        out.append({"model": model, "points": points, "reference_population": cols[-1]["population"], "cols": cols})
    return out


def subtraction_table(records, labels) -> list[dict[str, Any]]:
    """Table 13's layout: per σ and objective, Corr(X₊,X₀), κ_base, Corr(X₊,X₋), κ_pair beside the paper's."""
    out = []
    for rec in records:
        rows = (rec.get("train") or {}).get("subtraction")
        if rows:
            out.append(
                {
                    "cell": labels[id(rec)],
                    "rows": [{**r, "paper": PAPER_TABLE_13.get((r["sigma"], r["objective"]))} for r in rows],
                }
            )
    return out


def probe_curves(records, labels) -> dict[str, dict[str, list]]:
    """Fig. 2: the training probe's token entropy and Pass@k (every logged k) over updates."""
    out = {}
    for rec in records:
        probes = [r for r in train_rows(rec) if "probe" in r]
        if probes:
            ks = sorted({k for r in probes for k in r["probe"].get("pass@k", {})}, key=int)
            out[labels[id(rec)]] = {
                "updates": [r["update"] for r in probes],
                "entropy": [r["probe"]["entropy"] for r in probes],
                **{f"pass@{k}": [r["probe"].get("pass@k", {}).get(k) for r in probes] for k in ks},
            }
    return out


def passk_profiles(records, labels) -> dict[str, dict[str, list[float]]]:
    """Pass@K for every K = 1..n from the records' per-problem [n, c] counts (Figs. 2(c-d), 3, 4, 6)."""
    out: dict[str, dict[str, list[float]]] = {}
    for rec in records:
        for task, m in rec["metrics"].items():
            counts = m.get("per_problem")
            if counts:
                n = min(c[0] for c in counts)
                out.setdefault(labels[id(rec)], {})[task] = [mean_pass_at_k(counts, k) for k in range(1, n + 1)]
    return out


def build(records, labels) -> dict[str, Any]:
    curves = reward_curves(records, labels)
    return {
        "reward_curves": curves,
        "population": population_table(records, labels, curves),
        "subtraction": subtraction_table(records, labels),
        "probe": probe_curves(records, labels),
        "passk_profiles": passk_profiles(records, labels),
    }
