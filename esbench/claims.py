"""The paper's headline claims, stated once, and their verdicts on a run's records.

Ba et al., "Understanding Evolution Strategies for LLM Reasoning: Broader Reasoning Coverage than GRPO"
(arXiv 2608.27351). Each claim is a statistic with a direction and a test, computed from the records' per-problem
evidence only (`metrics[task].per_problem`, `metrics[task].entropy_per_problem`, `drift`), so `esbench report`, the
leaderboard and the demo's summary give the same verdict for the same records.

Cells. A *group* is one model × train dataset × budget (the report's labels). Within a group, cells are matched by
seed and method (`records.method_key`): `es`, `grpo` and `sequence:es,grpo` (ES→GRPO); the `base` cell is the same
model's base of the same seed, else any base of that model (as the forgetting table does). A group with no trained
GRPO takes the model's `checkpoint` cell the same way (the hard setting's GRPO row is a released checkpoint).
Where a group has two cells of one method (say fp32-master and paper-bf16 ES), the one labelled like the method
(`es`, `grpo`, `es-grpo`) is used, else the first by name; the others are listed as `unused`.

Per problem. Pass@k of a problem is the unbiased estimator (`metrics.passk.pass_at_k`) on its `[n, c]`; its token
entropy is the token-weighted mean over its n sampled responses. A difference is paired: the same problem under
the two cells (same seed). `Pass@k(A) − Pass@k(B)` below is the mean over problems of those per-problem differences.

The statistics (Pass@k differences as fractions; the tables print percentage points):

- C1, GRPO raises Pass@1 over base more than ES does: ΔPass@1(GRPO − base) − ΔPass@1(ES − base) > 0 on the
  training task's eval (the train dataset's task; if it is not evaluated, every non-held-out task). Per problem the
  base cancels exactly, so this is Pass@1(GRPO) − Pass@1(ES); the two gains over base are given as context.
- C2@K, ES keeps Pass@K at or above GRPO's, K = 16 and 32 where measured, each its own row: Pass@K(ES) −
  Pass@K(GRPO) ≥ −1 pp (non-inferiority margin `C2_MARGIN`) on the training task's eval.
- C3, GRPO's token entropy falls below base and ES's does not, on the held-out tasks (paper Fig. 2 reads held-out
  GPQA; all eval tasks if none is held out), two parts: H(GRPO) − H(base) < 0, and H(ES) − H(base) ≥ −m with m =
  `C3_MARGIN` (10 %) of base's mean entropy over the same problems. Records from before per-problem entropy give
  the scalar difference with no CI and the verdict "inconclusive" (no per-problem evidence).
- C4, ES's parameter drift is many times GRPO's: relative L2 ‖θ−θ₀‖/‖θ₀‖ of the saved weights (`drift`), ES / GRPO
  > `C4_THRESHOLD` (10×; the paper's Table 4 has 40.7–44.1×). It is one number per seed, not per problem: with
  several seeds the CI resamples seeds; with one it is the point value, "no CI (one seed)".
- C5, ES→GRPO reaches about GRPO's Pass@1 and about ES's Pass@K, parts: Pass@1(ES→GRPO) − Pass@1(GRPO) ≥ −2 pp and
  Pass@K(ES→GRPO) − Pass@K(ES) ≥ −2 pp for K = 16, 32 where measured (margin `C5_MARGIN`; the paper's own gaps are
  −1.7 to +0.8 pp), on the training task's eval.
- C6@K, held-out forgetting is smaller for ES than for GRPO: the mean over held-out tasks (each task weighs the
  same) of ΔPass@K(ES − base) − ΔPass@K(GRPO − base) > 0, K = 16 and 32 where measured; again the base cancels per
  problem. Read at Pass@K, not Pass@1, because that is where the paper shows it: Table 10's Δ@1 has GRPO ahead
  for all three models (ES − GRPO −0.7, −0.9, −1.4 pp) and its Δ@16 and Δ@32 have ES ahead (+0.6 to +3.5 pp).

The test. A 95 % percentile CI from `BOOTSTRAP_ITERS` paired resamples with the fixed seed `BOOTSTRAP_SEED`
(`metrics.bootstrap`, so the same records always give the same CI). With one seed the problems are resampled
(`paired_bootstrap`); with several, seeds and then problems within each drawn seed (`hierarchical_bootstrap`), and
tasks are strata of equal weight. Verdicts, against the claim's threshold t (0, or the margin):

- supported: the CI lies on the claimed side of t, excluding it (lower bound > t for "≥"/">", upper < t for "<");
- contradicted: the CI lies entirely on the other side of t;
- inconclusive: the CI contains t (or there is no per-problem evidence to form one);
- not measurable: a cell, a task or a K the statistic needs is missing.

A claim with parts is contradicted if any part is, not measurable if any part is, supported if all are, else
inconclusive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from esbench.claims_compute import C2_MARGIN, C3_MARGIN, C4_THRESHOLD, C5_MARGIN, KS, measure
from esbench.claims_stats import BOOTSTRAP_ITERS, BOOTSTRAP_SEED, LEVEL, NOT_MEASURABLE, Group, combine, groups


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    statistic: str
    test: str
    paper: str  # where the paper shows it


CLAIMS = [
    Claim(
        "C1",
        "GRPO raises Pass@1 over base more than ES does",
        "ΔPass@1(GRPO−base) − ΔPass@1(ES−base), training task",
        "> 0",
        "Table 2 GSM8K @1; Table 3 Average @1",
    ),
    *[
        Claim(
            f"C2@{k}",
            f"ES keeps Pass@{k} at or above GRPO's",
            f"Pass@{k}(ES) − Pass@{k}(GRPO), training task",
            f"≥ −{C2_MARGIN * 100:g} pp",
            f"Table 2 GSM8K @{k}; Table 3 Average @{k}",
        )
        for k in KS
    ],
    Claim(
        "C3",
        "GRPO's token entropy falls below base; ES's does not",
        "H(GRPO) − H(base) and H(ES) − H(base), nats, held-out tasks",
        f"< 0 and ≥ −{C3_MARGIN * 100:g} % of H(base)",
        "Fig. 2 (curves only, no numbers)",
    ),
    Claim(
        "C4",
        "ES's parameter drift is many times GRPO's",
        "relative L2 drift ES / GRPO, saved weights",
        f"> {C4_THRESHOLD:g}×",
        "Table 4",
    ),
    Claim(
        "C5",
        "ES→GRPO reaches about GRPO's Pass@1 and about ES's Pass@K",
        "Pass@1(ES→GRPO) − Pass@1(GRPO); Pass@K(ES→GRPO) − Pass@K(ES), training task",
        f"each ≥ −{C5_MARGIN * 100:g} pp",
        "Table 2 GSM8K; Table 3 Average",
    ),
    *[
        Claim(
            f"C6@{k}",
            f"held-out forgetting at Pass@{k} is smaller for ES than for GRPO",
            f"mean over held-out tasks of ΔPass@{k}(ES−base) − ΔPass@{k}(GRPO−base)",
            "> 0",
            f"Table 10 d@{k}; Table 5 Average @{k}",
        )
        for k in KS
    ],
]
BY_ID = {c.id: c for c in CLAIMS}
# Claims resting on record fields that `esbench leaderboard verify` cannot recompute from the samples (token entropy,
# drift): the board shows them as reported, the others as verified.
RECORD_ONLY = {"C3", "C4"}


# ---------------------------------------------------------------------------------------------------------------
# a run's verdicts


def _evaluate_group(g: Group, iters: int) -> list[dict[str, Any]]:
    results = []
    for claim in CLAIMS:
        cid = claim.id
        r = measure(cid, g, iters)
        parts = r["parts"]
        head = parts[0]
        results.append(
            {
                "id": cid,
                "claim": claim.text,
                "statistic": claim.statistic,
                "test": claim.test,
                "paper": claim.paper,
                "group": {"model": g.model, "dataset": g.dataset, "budget": g.budget},
                "verdict": combine([p["verdict"] for p in parts]),
                "value": head.get("value"),
                "lo": head.get("lo"),
                "hi": head.get("hi"),
                "n_problems": head.get("n_problems"),
                "n_seeds": head.get("n_seeds", 0),
                "where": r.get("where"),
                "parts": parts,
                "context": r.get("context", []),
                "cells": r.get("cells", {}),
                "unused": g.unused,
            }
        )
    return results


def evaluate(records: Sequence[dict[str, Any]], iters: int = BOOTSTRAP_ITERS) -> dict[str, Any]:
    """Every claim's verdict for every trained group of `records` (what `esbench report --json` carries as
    `claims`). A run with no ES or GRPO cell gets each claim once, not measurable."""
    gs = groups(records)
    results = [r for g in gs for r in _evaluate_group(g, iters)]
    if not gs:
        empty = Group("-", "-", None, {}, [])
        results = [
            {**r, "verdict": NOT_MEASURABLE, "note": "no ES or GRPO cell in the run"}
            for r in _evaluate_group(empty, iters)
        ]
    return {
        "paper": "arXiv 2608.27351",
        "bootstrap": {"iters": iters, "seed": BOOTSTRAP_SEED, "level": LEVEL},
        "margins": {"C2": C2_MARGIN, "C3": C3_MARGIN, "C4": C4_THRESHOLD, "C5": C5_MARGIN},
        "results": results,
    }


# ---------------------------------------------------------------------------------------------------------------
# the paper's own numbers for each statistic (the leaderboard shows them beside the verdicts)


def paper_values(values: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each claim's statistic on the paper's own tables (point values, pp or ×), per paper model, from the
    release's `paper_tables.json` values. Easy setting: Table 2's GSM8K (Table 10's held-out means for C6); hard
    setting: Table 3's Average (Table 5's for C6); C4 from Table 4. C3 has no numbers (Fig. 2 only)."""
    idx = {(v["table"], v["model"], v["method"], v["column"], v["metric"]): v["value"] for v in values}
    easy = sorted({v["model"] for v in values if v["table"] == 2})
    hard = sorted({v["model"] for v in values if v["table"] == 3})
    spots = [(2, m, "GSM8K") for m in easy] + [(3, m, "Average") for m in hard]

    def diff(table, model, col, metric, a, b):
        x, y = idx.get((table, model, a, col, metric)), idx.get((table, model, b, col, metric))
        return None if x is None or y is None else round(x - y, 2)

    def rows(fn) -> list[dict[str, Any]]:
        out = []
        for table, model, col in spots:
            v = fn(table, model, col)
            if v is not None:
                out.append({"model": model, "value": v, "source": f"Table {table} {col}"})
        return out

    out: dict[str, list[dict[str, Any]]] = {"C3": []}
    out["C1"] = rows(lambda t, m, c: diff(t, m, c, "pass@1", "GRPO", "ES"))
    for k in KS:
        out[f"C2@{k}"] = rows(lambda t, m, c, k=k: diff(t, m, c, f"pass@{k}", "ES", "GRPO"))
        c6 = []
        for m in easy:
            es, grpo = (idx.get((10, m, x, "held-out mean change", f"delta_pass@{k}")) for x in ("ES", "GRPO"))
            if es is not None and grpo is not None:
                c6.append({"model": m, "value": round(es - grpo, 2), "source": "Table 10"})
        for m in hard:
            v = diff(5, m, "Average", f"pass@{k}", "ES", "GRPO")
            if v is not None:
                c6.append({"model": m, "value": v, "source": "Table 5 Average"})
        out[f"C6@{k}"] = c6
    out["C4"] = [
        {"model": v["model"], "value": v["value"], "source": "Table 4", "unit": "x"}
        for v in values
        if v["table"] == 4 and v["metric"] == "drift_ratio_es_grpo"
    ]
    c5 = []
    for table, model, col in spots:
        parts = {"@1": diff(table, model, col, "pass@1", "ES->GRPO", "GRPO")}
        parts |= {f"@{k}": diff(table, model, col, f"pass@{k}", "ES->GRPO", "ES") for k in KS}
        if all(v is not None for v in parts.values()):
            c5.append({"model": model, "value": parts, "source": f"Table {table} {col}"})
    out["C5"] = c5
    return out


def paper_text(entries: Sequence[dict[str, Any]], claim_id: str) -> str:
    """One line of the paper's values for a claim, e.g. "Qwen2.5-1.5B-Instruct +4.9; ... (Table 2 GSM8K)"."""
    if not entries:
        return BY_ID[claim_id].paper if claim_id in BY_ID else "–"
    parts = []
    for e in entries:
        v = e["value"]
        if isinstance(v, dict):
            text = ", ".join(f"{k} {x:+.1f}" for k, x in v.items())
        elif e.get("unit") == "x":
            text = f"{v:.1f}×"
        else:
            text = f"{v:+.1f}"
        parts.append(f"{e['model']} {text} ({e['source']})")
    return "; ".join(parts) + (" pp" if claim_id != "C4" else "")


# ---------------------------------------------------------------------------------------------------------------
# one line per claim, for the demo, the report and the board


def format_value(part: dict[str, Any]) -> str:
    """`+3.1 pp [+0.4, +5.8]`, `−0.012 nats [...]`, `41.2× (no CI, one seed)`, or `–`."""
    v, unit = part.get("value"), part.get("unit", "fraction")
    if v is None:
        return "–"
    if unit == "ratio":
        text = f"{v:.1f}×"
        if part.get("lo") is None:
            return text + (" (no CI, one seed)" if part.get("n_seeds") == 1 else " (no CI)")
        return text + f" [{part['lo']:.1f}, {part['hi']:.1f}]"
    scale, suffix, fmt = (100.0, " pp", "+.1f") if unit == "fraction" else (1.0, " nats", "+.4f")
    text = f"{v * scale:{fmt}}{suffix}"
    if part.get("lo") is None:
        return text + " (no CI)"
    return text + f" [{part['lo'] * scale:{fmt}}, {part['hi'] * scale:{fmt}}]"


def statistic_text(result: dict[str, Any]) -> str:
    """Every part of a claim as `name value [CI]`, `;`-joined."""
    out = []
    for p in result["parts"]:
        if p.get("value") is None:
            out.append(f"{p['name']}: {p.get('note', 'not measurable')}")
        else:
            out.append(f"{p['name']} {format_value(p)}")
    return "; ".join(out)


def group_text(result: dict[str, Any]) -> str:
    g = result["group"]
    return f"{g['model']}/{g['dataset']}/b{g['budget']}" if g.get("budget") is not None else "-"


def rows(claims: dict[str, Any] | None) -> list[dict[str, str]]:
    """Plain strings for a table: group, id, claim, statistic with CI, test, verdict, n (problems × seeds)."""
    out = []
    for r in (claims or {}).get("results", []):
        n = "–" if not r.get("n_problems") else f"{r['n_problems']} × {r['n_seeds']} seed(s)"
        if r["id"] == "C4" and r.get("n_seeds"):
            n = f"{r['n_seeds']} seed(s)"
        out.append(
            {
                "group": group_text(r),
                "id": r["id"],
                "claim": r["claim"],
                "statistic": statistic_text(r),
                "test": r["test"],
                "verdict": r["verdict"],
                "n": n,
            }
        )
    return out
