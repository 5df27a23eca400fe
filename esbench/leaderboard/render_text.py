"""Text both renderings of the board share (the Markdown README and the HTML page): the comparison rule in words,
the claims rows, a coverage value as printed, a coverage table's status line, and the number formats.

Separate so that the Markdown and the page each import it, and not each other.
"""

from __future__ import annotations

import json
from typing import Any

from esbench import claims as paper_claims
from esbench.leaderboard.board import NO_REF, Board
from esbench.leaderboard.coverage import AWAITING, EXPERIMENTS, REPORTED, Covered, TableCoverage, table_sources

# the paper's main-grid tables as the Markdown lays them out: (table, metrics, columns)
LAYOUT = [
    (2, ["pass@1", "pass@16", "pass@32"], ["GSM8K", "CSQA", "HotpotQA", "Countdown", "GPQA", "MBPP", "Average"]),
    (3, ["pass@1", "pass@16", "pass@32"], ["AIME24", "AIME25", "AMC23", "MATH500", "Average"]),
    (5, ["pass@1", "pass@16", "pass@32"], ["GPQA", "MBPP", "CSQA", "Countdown", "Average"]),
    (7, ["maj@16", "maj@32"], ["GSM8K", "CSQA", "HotpotQA", "Countdown", "GPQA", "MBPP", "Average"]),
    (8, ["maj@16", "maj@32"], ["AIME24", "AIME25", "AMC23", "MATH500", "Average"]),
    (9, ["maj@16", "maj@32"], ["GPQA", "MBPP", "CSQA", "Countdown", "Average"]),
]
MARK = {"reproduced": "✓", "warn": "⚠", "fail": "✗"}


def seeds_text(seeds: list[int]) -> str:
    """How many seeds, then which: "1 (0)" rather than a bare "0" that reads as a count."""
    return f"{len(seeds)} ({','.join(map(str, seeds))})"


def fmt(x: float | None, nd: int = 1) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def signed(x: float) -> str:
    return f"{x:+.1f}"


def rule_text(rule: dict[str, Any]) -> str:
    """The rule as the release freezes it. A release without the ADR 0011 keys reads exactly as before them."""
    deltas = ", ".join(f"{m} {d:g} pp" for m, d in rule["delta_pp"].items())
    seeded = "seed_sd_pp" in rule
    terms = "SE_run² + SE_ref² + s_seed²" if seeded else "SE_run² + SE_ref²"
    text = f"""A metric is compared over a run's seeds with the two-sided rule

    reproduced   when |mean − ref| ≤ band,  band = max(δ, t · √({terms}))
    warn         when band < |mean − ref| ≤ {rule["warn_factor"]:g} × band
    fail         beyond that (too high is as suspicious as too low)

- All quantities are in percentage points, as the paper prints them.
- δ is pre-registered per metric in the release: {deltas}; any other metric {rule["delta_pp_default"]:g} pp.
- SE_run is the standard error of the mean over seeds, with t = t₀.₉₇₅ at seeds − 1 degrees of freedom. With one
  seed it is the per-problem bootstrap standard error √(var₀(x)/P) of the per-problem values x (the closed form of
  the bootstrap distribution's spread, so no resampling seed is involved), with t = 1.96.
- SE_ref is {rule["se_ref_pp_default"]:g} unless the paper gives one (it gives none).
- The rule's parameters live in the release (`releases/<id>/release.json`, key `rule`) and change only with a new
  release. Cells with no paper counterpart (the tiny suite, a plug-in off the paper's grid) are shown with the
  status *{NO_REF}* and are never coloured as reproduced."""
    if seeded:
        text += "\n" + seed_text(rule["seed_sd_pp"])
        if rule.get("seed_sd_source"):
            text += f" Source: {rule['seed_sd_source']}."
    if rule.get("artifact"):
        text += "\n\n" + artifact_text(rule["artifact"])
    return text


def seed_text(seed_sd: dict[str, Any]) -> str:
    given = ", ".join(f"{k} {v:g} pp" for k, v in seed_sd.items() if v is not None)
    return f"""- s_seed is the seed-to-seed SD of a single seed's result (ddof 1 over per-seed values), in pp. It is
  added only for a single-seed run, whose per-problem bootstrap SE cannot see training-seed variance; with two or
  more seeds the SE over seeds already holds it. It is the SD of one seed, not the SE of a k-seed mean: the run
  judged is one draw. Per key (METRIC, TASK/METRIC or METHOD/TASK/METRIC; a reference value's own `seed_sd`
  first): {given or "none in this release, so s_seed = 0"}."""


def artifact_text(artifact: dict[str, Any]) -> str:
    """The artifact rule in words, from its rule data (what it matches, its criteria and where each holds)."""

    def pairs(d: dict[str, Any]) -> str:
        return ", ".join(f"{k} = {json.dumps(v)}" for k, v in d.items())

    runs = [
        f"{name}: {pairs(run['match'])}, {run['updates']} updates; "
        + ", ".join(f"{c} {ref:g}" for c, ref in run["reference"].items())
        for name, run in artifact["runs"].items()
    ]
    lines = [
        "Artifact rule, judged beside the rule above and leaving its verdicts as they are (source: "
        f"{artifact.get('source', 'not recorded')}):",
        "",
        f"- It judges a cell with {pairs(artifact['match'])} that evaluates all {artifact['problems']} problems of "
        f"{artifact['task']} and is one of the artifact's runs:",
        *[f"  - {r}" for r in runs],
    ]
    for name, c in artifact["criteria"].items():
        tol = f"within ±{c['tolerance']:g} {c['unit']}" if c["tolerance"] else "exact"
        where = (
            "in any environment"
            if c.get("environment", "any") == "any"
            else "only where the record's provenance shows the artifact's environment, else *not applicable* "
            "(with the keys that differ)"
        )
        lines.append(f"- {name} ({c['metric']}): {tol}, {where}.")
    env = artifact.get("environment", {})
    pins = [f"{k} {v}" for k, v in env.get("versions", {}).items()]
    pins += [f"{k} = {json.dumps(v)}" for k, v in env.get("equal", {}).items()]
    lines += [
        f"- The artifact's environment: {', '.join(pins)} (versions match by release prefix).",
        "- A cell passes when every applicable criterion holds and fails when one does not.",
    ]
    if "identity" in artifact:  # issue 23: like with like (rule data of the releases after v1.4)
        lines.append(
            f"- A cell with the same {', '.join(artifact['identity'])} and a run's "
            "identity fields that differs from that run in any other field above, its updates or its problem count "
            "is *not judged*, with the fields that differ."
        )
        for name, run in artifact["runs"].items():
            training = run.get("training")
            if training is None:
                continue
            sds = training.get("seed_sd_pp") or {}
            how = (
                f"judged with band max(tolerance, 1.96 · √(SE_run² + s_seed²)), s_seed {sds} from "
                f"{training.get('seed_sd_source')}"
                if sds and training.get("seed_sd_source")
                else f"*reported*, never pass or fail: {training['why']}"
            )
            lines.append(f"- {name} is an independent training run: {how}.")
    return "\n".join(lines)


CLAIMS_NOTE = (
    "Each statistic with its 95 % paired-bootstrap CI over problems (over seeds, then problems, with several "
    "seeds), from the verified per-problem evidence; supported / contradicted: the CI lies on the claimed / the "
    "other side of the test's threshold; inconclusive: it crosses. C3 (entropy) and C4 (drift) rest on record fields "
    "verify cannot recompute: reported. Paper: the same statistic on the paper's tables (point values). "
    "Definitions: `esbench/claims.py`."
)


def claim_rows(board: Board, sub: str) -> list[dict[str, str]]:
    """One row per claim and group of a submission, with its evidence and the paper's own values."""
    paper = paper_claims.paper_values(board.reference)
    out = []
    for r in paper_claims.rows(board.claims.get(sub)):
        evidence = "reported (record)" if r["id"] in paper_claims.RECORD_ONLY else "verified (samples)"
        out.append({**r, "evidence": evidence, "paper": paper_claims.paper_text(paper.get(r["id"], []), r["id"])})
    return out


def _target(v: dict[str, Any]) -> str:
    """The paper's number as printed: 4 decimals for Tables 6 and 13, 1 for the main grid, as transcribed else."""
    if v["table"] in EXPERIMENTS:
        return f"{v['value']:.4f}"
    if v["table"] in {t for t, _, _ in LAYOUT}:
        return fmt(v["value"])
    return str(float(v["value"]))


def covered_text(c: Covered) -> str:
    """The target alone while awaiting; else target → value (delta, and the verdict's mark where one is given)."""
    target = _target(c.ref)
    if c.status == AWAITING:
        return target
    if c.status == REPORTED:
        if c.value is None:
            return f"{target} → undefined"
        return f"{target} → {c.value:.4f} ({c.delta:+.4f})"
    assert c.delta is not None  # a judged value always has its delta (compare.Verdict)
    return f"{target} → {c.value:.1f} ({signed(c.delta)} {MARK[c.status]})"


def status_line(tc: TableCoverage) -> str:
    n, waiting = len(tc.values), tc.awaiting()
    if waiting == n:
        line = f"**{AWAITING}**: no verified submission carries these cells yet; the paper's {n} numbers are targets."
    else:
        line = (
            f"{n - waiting} of {n} values carried by a submission (paper → submission, delta); the other {waiting}, "
            f"bare paper numbers, are **{AWAITING}**."
        )
    note = {
        6: " The debiased EMA (β = 0.99) of the per-update mean training reward at the paper's updates, from ES "
        "cells of the release's population-sweep suite by model and N (train.jsonl).",
        13: " Pooled over prompts, seeds and directions, from the `subtraction` cells of the release's diagnostic "
        "suite (their record's `train.subtraction`). The paper's cross-entropy row is SST-2's; esbench's uses the "
        "task's gold answers.",
    }.get(tc.table, "")
    if tc.table in EXPERIMENTS:
        note += " Training-side logs: bound by the manifest, not recomputed from samples, so never judged."
    if tc.note:
        note += " " + tc.note
    sources = table_sources(tc)
    if sources:
        note += " Values from " + "; ".join(f"`{s}`" for s in sources) + "."
    return line + note
