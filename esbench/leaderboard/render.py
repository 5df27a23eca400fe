"""`esbench leaderboard build`: render `leaderboard/README.md` and the static page `leaderboard/site/index.html`.

Both are generated from verified submissions only and are deterministic (no timestamps), so a rebuild with no new
submission changes nothing. The page is one self-contained HTML file (no network: no CDN, no fonts) with the pass@k
plots beside it as PNGs. Every string taken from a submission is escaped: a submission is untrusted input.
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esbench import claims as paper_claims
from esbench.leaderboard.artifact import describe, summary
from esbench.leaderboard.board import METRICS, NO_REF, Board, Entry
from esbench.metrics.compute import format_flops
from esbench.records import atomic_write_text
from esbench.untrusted import UntrustedInputError, load_jsonl

LAYOUT = [
    (2, ["pass@1", "pass@16", "pass@32"], ["GSM8K", "CSQA", "HotpotQA", "Countdown", "GPQA", "MBPP", "Average"]),
    (3, ["pass@1", "pass@16", "pass@32"], ["AIME24", "AIME25", "AMC23", "MATH500", "Average"]),
    (5, ["pass@1", "pass@16", "pass@32"], ["GPQA", "MBPP", "CSQA", "Countdown", "Average"]),
    (7, ["maj@16", "maj@32"], ["GSM8K", "CSQA", "HotpotQA", "Countdown", "GPQA", "MBPP", "Average"]),
    (8, ["maj@16", "maj@32"], ["AIME24", "AIME25", "AMC23", "MATH500", "Average"]),
    (9, ["maj@16", "maj@32"], ["GPQA", "MBPP", "CSQA", "Countdown", "Average"]),
]
METHODS = ["Base", "GRPO", "ES", "ES->GRPO", "GRPO->ES"]
SHORT = {"pass@1": "@1", "pass@16": "@16", "pass@32": "@32", "maj@16": "M@16", "maj@32": "M@32"}
MARK = {"reproduced": "✓", "warn": "⚠", "fail": "✗"}


def _seeds(seeds: list[int]) -> str:
    """How many seeds, then which: "1 (0)" rather than a bare "0" that reads as a count."""
    return f"{len(seeds)} ({','.join(map(str, seeds))})"


def render(board: Board, root: Path) -> list[Path]:
    """Write README.md, site/index.html and site/plots/*.png under `root`; returns the files written."""
    root = Path(root)
    site = root / "site"
    plots_dir = site / "plots"
    _isolate_unrenderable(board)
    shutil.rmtree(plots_dir, ignore_errors=True)
    plots = write_plots(board, plots_dir)
    atomic_write_text(root / "README.md", markdown(board))
    atomic_write_text(site / "index.html", page(board, {k: p.relative_to(site).as_posix() for k, p in plots.items()}))
    write_ledger(board, root)
    return [root / "README.md", site / "index.html", *plots.values()]


# ---------------------------------------------------------------------------------------------------------------
# untrusted text: one helper per target. Every string a submission can choose (folder names, labels, provenance,
# reasons that quote them) goes through the helper of the place it is written to.

# C0 and C1 controls (ANSI escapes start with ESC) and the Unicode bidi controls (embeddings, overrides, isolates,
# marks) that reorder what a reader sees.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]|~$!#])")


def plain(text: Any, keep: str = "") -> str:
    """The text with every control character (but those in `keep`) shown as a visible escape (ESC as backslash-x1b),
    never acted on."""
    return _CONTROLS.sub(lambda m: m.group() if m.group() in keep else ascii(m.group())[1:-1], str(text))


def for_terminal(text: Any) -> str:
    """For a rich console: controls made visible, and rich markup (`[bold]`, `[/x]`) escaped."""
    from rich.markup import escape

    return escape(plain(text))


def for_markdown(text: Any, code: bool = False, table: bool = True) -> str:
    """For a Markdown table cell or list item: controls made visible, HTML and Markdown syntax escaped (a `|` would
    end the cell, `<` start a tag, `[`/`]` a link, a backtick a code span). `code=True`: as a code span, whose
    `|` is escaped only in a table (`table=False` for a heading: there the backslash would show)."""
    text = plain(text)
    if code:
        text = text.replace("`", "'")
        return "`" + (text.replace("|", "\\|") if table else text) + "`"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def for_html(text: Any) -> str:
    """For HTML text or an attribute value: controls made visible (line breaks and tabs are only whitespace to
    HTML, and kept for `<pre>`), then `html.escape` (quotes included)."""
    return html.escape(plain(text, keep="\n\t"))


def _isolate_unrenderable(board: Board) -> None:
    """Move to the rejected list any accepted submission whose part of the board cannot be rendered (a value no
    check foresaw): rendered alone first, so one submission never takes the board down for the others."""
    for report in list(board.accepted):
        name = report.submission.get("name", report.path.name)
        alone = Board(
            board.release,
            [e for e in board.entries if e.submission == name],
            [report],
            [],
            board.reference,
            board.expected,
            {k: v for k, v in board.claims.items() if k == name},
        )
        try:
            markdown(alone)
            page(alone, {})
        except Exception as e:  # noqa: BLE001  (the point: nothing a submission holds may take the board down)
            report.add(f"cannot be rendered ({type(e).__name__}: {str(e)[:200]})")
            board.accepted.remove(report)
            board.rejected.append(report)
            board.entries = [x for x in board.entries if x.submission != name]
            board.claims.pop(name, None)


def write_ledger(board: Board, root: Path) -> Path:
    """`site/board.json`: the evidence fingerprint of each submission the board lists, so that `verify` can tell a
    copy from the original it copies (the listed one keeps its place)."""
    from esbench.leaderboard.verify import BOARD_LEDGER

    doc = {
        "release": board.release["id"],
        "submissions": {r.submission.get("name", r.path.name): r.evidence for r in board.accepted if r.evidence},
    }
    path = Path(root) / BOARD_LEDGER
    atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return path


# ---------------------------------------------------------------------------------------------------------------
# shared helpers


def fmt(x: float | None, nd: int = 1) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def signed(x: float) -> str:
    return f"{x:+.1f}"


def _paper_hits(board: Board) -> dict[tuple, dict[str, Any]]:
    """(table metric family, model, method, paper task, metric) -> the entry metric compared to it."""
    hits: dict[tuple, dict[str, Any]] = {}
    for e in board.entries:
        for t in e.tasks.values():
            for m, row in t["metrics"].items():
                if "ref" in row and e.paper_model and e.paper_method:
                    hits.setdefault((e.paper_model, e.paper_method, t["paper_task"], m), {**row, "entry": e.key})
    return hits


def _ref_index(board: Board) -> dict[tuple, float]:
    return {(v["table"], v["model"], v["method"], v["column"], v["metric"]): v["value"] for v in board.reference}


def _table_models(board: Board, table: int) -> list[str]:
    seen: list[str] = []
    for v in board.reference:
        if v["table"] == table and v["model"] not in seen:
            seen.append(v["model"])
    return seen


# ---------------------------------------------------------------------------------------------------------------
# Markdown


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


def markdown(board: Board) -> str:
    rel = board.release
    cov = coverage(board)
    lines = [
        f"# esbench leaderboard — release {rel['id']}",
        "",
        "<!-- Generated by `esbench leaderboard build` from the verified submissions; do not edit by hand. -->",
        "",
        f"Release **{rel['id']}** ({rel['date']}): {rel.get('notes', '')}",
        f"Record schema `{rel['record_schema']}`; suites: {', '.join(f'`{s}`' for s in rel['suites'])}. "
        "See [CHANGELOG.md](CHANGELOG.md), the static page [site/index.html](site/index.html) and "
        "[how to submit](../docs/leaderboard.md).",
        "",
        "Every number below was recomputed from the submission's per-sample logs by `esbench leaderboard verify`, "
        "with the release's task verifiers; the records' own numbers are never shown"
        + (" (except the training-side values of Tables 6 and 13 in the coverage section)." if cov else "."),
        "",
        "## Submissions",
        "",
    ]
    if board.accepted:
        lines += [
            "| submission | suite | cells | created | esbench commit | hardware | container | notes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in board.accepted:
            prov = r.cells[0].record["provenance"] if r.cells else {}
            commit = str(prov.get("git_commit") or "?")[:10] + (" (dirty tree)" if prov.get("git_dirty") else "")
            gpus = prov.get("gpus") if isinstance(prov.get("gpus"), list) else []
            hw = ", ".join(map(str, gpus)) or f"CPU ({prov.get('cpu_count', '?')} cores)"
            md = for_markdown
            lines.append(
                f"| {md(r.submission.get('name'))} | {md(r.submission.get('suite'))} | {len(r.cells)} | "
                f"{md(r.submission.get('created', ''))} | {md(commit, code=True)} | {md(hw)} | "
                f"{md(prov.get('container_image_digest') or 'none (local)')} | "
                f"{len(r.notes)} notes |"
            )
    else:
        lines.append("No verified submission yet.")
    lines += ["", *suite_sections(board), *claims_sections(board), "", "## Against the paper (arXiv 2608.27351)", ""]
    lines += [
        "Paper value, then the verified mean of the submission that maps to that row, its delta and status "
        f"(✓ reproduced, ⚠ warn, ✗ fail). Cells without a submission show the paper value only. Reference numbers: "
        f"`releases/{rel['id']}/reference/` (every value with its table, row and column).",
        "",
    ]
    lines += paper_sections(board)
    if cov:
        lines += coverage_markdown(cov)
    lines += ["", "## Comparison rule", "", rule_text(rel["rule"]), ""]
    lines += [
        "## Submitting",
        "",
        "1. Run a suite of this release: `esbench run leaderboard/releases/"
        f"{rel['id']}/suites/tiny.yaml --out runs` (or the same grid with your plug-in method added).",
        "2. Package it: `esbench submit runs/tiny --name YOUR-NAME` (verifies before writing).",
        "3. Check it: `esbench leaderboard verify leaderboard/submissions/YOUR-NAME`.",
        "4. Render: `esbench leaderboard build`, and open a pull request with the submission folder.",
        "",
        "The walk-through with a plug-in method is in [docs/leaderboard.md](../docs/leaderboard.md).",
    ]
    if board.rejected:
        lines += ["", "## Rejected submissions", ""]
        for r in board.rejected:
            shown = "; ".join(for_markdown(x) for x in r.reasons[:5]) + (" …" if len(r.reasons) > 5 else "")
            lines.append(f"- **{for_markdown(r.path.name)}**: {shown}")
    return "\n".join(lines) + "\n"


def suite_sections(board: Board) -> list[str]:
    out: list[str] = []
    by_suite: dict[tuple[str, str], list[Entry]] = {}
    for e in board.entries:
        by_suite.setdefault((e.submission, e.suite), []).append(e)
    for (sub, suite), entries in by_suite.items():
        mapped = any(e.paper_model for e in entries)
        out += [f"## Results: submission {for_markdown(sub, code=True)}, suite {for_markdown(suite, code=True)}", ""]
        if not mapped:
            out += [
                f"Status: **{NO_REF}**: this suite is not part of the paper's grid, so its numbers are shown as they "
                "are (mean ± SE over seeds, or ± the per-problem bootstrap SE with one seed), uncoloured.",
                "",
            ]
        tasks = list(entries[0].tasks)
        metrics = [m for m in METRICS if any(m in e.tasks[t]["metrics"] for e in entries for t in tasks)]
        for t in tasks:
            held = " (held out)" if entries[0].tasks[t]["held_out"] else ""
            out += [f"**{t}**{held}", ""]
            artifact = any("artifact" in e.tasks[t] for e in entries)  # the column only where the rule applies
            extra = " artifact rule |" if artifact else ""
            out.append("| model | method | budget | seeds | " + " | ".join(metrics) + " | status | FLOPs |" + extra)
            out.append("|---|---|---|---|" + "---:|" * len(metrics) + "---|---:|" + ("---|" if artifact else ""))
            for e in entries:
                cells = []
                for m in metrics:
                    row = e.tasks[t]["metrics"].get(m)
                    if row is None:
                        cells.append("—")
                        continue
                    s = f"{row['mean']:.1f} ± {row['se']:.1f}"
                    if "ref" in row:
                        s += f" (paper {row['ref']:.1f}, {signed(row['delta'])} {MARK[row['status']]})"
                    cells.append(s)
                plug = " (plug-in)" if e.grid == "plug-in" else ""
                statuses = [r.get("status") for r in e.tasks[t]["metrics"].values() if r.get("status")]
                status = (
                    min(statuses, key=lambda s: ["fail", "warn", "reproduced", NO_REF].index(s)) if statuses else "—"
                )
                out.append(
                    f"| {for_markdown(e.model)} | {for_markdown(e.method)}{plug} | {for_markdown(e.budget)} | "
                    f"{_seeds(e.seeds)} | "
                    + " | ".join(cells)
                    + f" | {status} | {format_flops(e.flops)} |"
                    + (
                        f" {artifact_cell(e.tasks[t].get('artifact'), board.release, len(e.seeds))} |"
                        if artifact
                        else ""
                    )
                )
            out.append("")
    return out


CLAIMS_NOTE = (
    "Each statistic with its 95 % paired-bootstrap CI over problems (over seeds, then problems, with several "
    "seeds), from the verified per-problem evidence; supported / contradicted: the CI lies on the claimed / the "
    "other side of the test's threshold; inconclusive: it crosses. C3 (entropy) and C4 (drift) rest on record fields "
    "verify cannot recompute: reported. Paper: the same statistic on the paper's tables (point values). "
    "Definitions: `esbench/claims.py`."
)


def _claim_rows(board: Board, sub: str) -> list[dict[str, str]]:
    """One row per claim and group of a submission, with its evidence and the paper's own values."""
    paper = paper_claims.paper_values(board.reference)
    out = []
    for r in paper_claims.rows(board.claims.get(sub)):
        evidence = "reported (record)" if r["id"] in paper_claims.RECORD_ONLY else "verified (samples)"
        out.append({**r, "evidence": evidence, "paper": paper_claims.paper_text(paper.get(r["id"], []), r["id"])})
    return out


def claims_sections(board: Board) -> list[str]:
    """The paper's claims (C1-C6) per submission, beside the paper's own numbers for each statistic."""
    out: list[str] = []
    for sub in board.claims:
        rows = _claim_rows(board, sub)
        out += ["", f"## Paper claims: submission {for_markdown(sub, code=True, table=False)}", "", CLAIMS_NOTE, ""]
        out.append("| group | claim | statistic [95 % CI] | test | n | verdict | evidence | paper (arXiv 2608.27351) |")
        out.append("|---|---|---|---|---|---|---|---|")
        for r in rows:
            cells = [for_markdown(r["group"]), *map(_md_cell, [f"{r['id']}: {r['claim']}", r["statistic"], r["test"]])]
            cells += map(_md_cell, [r["n"], f"**{r['verdict']}**", r["evidence"], r["paper"]])
            out.append("| " + " | ".join(cells) + " |")
    return out


def claims_html(board: Board) -> str:
    e = for_html
    parts = []
    for sub in board.claims:
        rows = []
        for r in _claim_rows(board, sub):
            cls = {"supported": "reproduced", "contradicted": "fail", "inconclusive": "warn"}.get(r["verdict"], "noref")
            rows.append(
                "<tr>"
                + "".join(_td(x, cls="txt") for x in (r["group"], f"{r['id']}: {r['claim']}", r["statistic"]))
                + _td(r["test"], cls="txt")
                + _td(r["n"], cls="txt")
                + f"<td class='txt'><span class='badge {cls}'>{e(r['verdict'])}</span></td>"
                + _td(r["evidence"], cls="txt")
                + _td(r["paper"], cls="txt")
                + "</tr>"
            )
        head = "".join(
            f"<th class='txt'>{e(h)}</th>"
            for h in ("group", "claim", "statistic [95 % CI]", "test", "n", "verdict", "evidence", "paper")
        )
        parts.append(
            f"<h3>Submission {e(sub)}</h3><div class='wrap'><table class='claims'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>"
        )
    if not parts:
        return ""
    return f"<h2>Paper claims</h2><p class='muted'>{e(_plain(CLAIMS_NOTE))}</p>" + "".join(parts)


def artifact_cell(verdicts: list[dict[str, Any]] | None, release: dict[str, Any], seeds: int = 1) -> str:
    """The artifact verdict of an entry: one line per matched seed (named when the entry has several), `—` where
    the rule does not apply."""
    if not verdicts:
        return "—"
    problems = release["rule"]["artifact"].get("problems")
    lines = [(f"s{v['seed']}: " if seeds > 1 else "") + describe(v, problems) for v in verdicts]
    return "<br>".join(x.replace("|", "\\|") for x in lines)


def paper_sections(board: Board) -> list[str]:
    ref = _ref_index(board)
    hits = _paper_hits(board)
    titles = {
        int(k): v
        for k, v in json.loads((board.release["dir"] / board.release["reference"]["paper"]).read_text())[
            "tables"
        ].items()
    }
    out: list[str] = []
    for table, metrics, columns in LAYOUT:
        out += [f"### Table {table}: {titles.get(table, '')}", ""]
        header = "| model | method | " + " | ".join(f"{c} {SHORT[m]}" for c in columns for m in metrics) + " |"
        out += [header, "|---|---|" + "---:|" * (len(columns) * len(metrics))]
        for model in _table_models(board, table):
            for method in METHODS:
                cells = []
                for c in columns:
                    for m in metrics:
                        v = ref.get((table, model, method, c, m))
                        hit = hits.get((model, method, c, m))
                        if hit is None:
                            cells.append(fmt(v))
                        else:
                            cells.append(f"{fmt(v)} → {hit['mean']:.1f} ({signed(hit['delta'])} {MARK[hit['status']]})")
                out.append(f"| {model} | {method} | " + " | ".join(cells) + " |")
        out.append("")
    exp = board.expected
    out += [
        f"### The authors' expected_results.json ({exp['model']}, {exp['task']} {exp['split']}, "
        f"{exp['problems']} problems)",
        "",
        "| run | greedy correct | mean@32 (= Pass@1) | Pass@16 | Pass@32 |",
        "|---|---:|---:|---:|---:|",
    ]
    for run, f in exp["runs"].items():
        out.append(f"| {run} | {f['greedy_correct']} | {f['mean@32']:.6f} | {f['pass@16']:.5f} | {f['pass@32']:.5f} |")
    out += ["", f"Their tolerance: mean@32 within {exp['tolerance']['mean@32']} absolute; greedy counts exact.", ""]
    return out


# ---------------------------------------------------------------------------------------------------------------
# coverage: every paper value of the release's reference (Tables 2-13), reproduced or awaiting reproduction
#
# Shown only for a release whose paper map carries `coverage` (v1.0 to v1.3 do not, and render as before):
#     "coverage": {"population": ["paper-population"], "subtraction": ["paper-subtraction"]}
# Tables of the paper map's `tables` take their cells' verdicts under the rule (the tables above). Table 6 is read
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
    from esbench.metrics.subtraction import PAPER_TABLE_13

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


def _titles(board: Board) -> dict[int, str]:
    doc = json.loads((board.release["dir"] / board.release["reference"]["paper"]).read_text())
    return {int(k): v for k, v in doc["tables"].items()}


def coverage(board: Board) -> list[TableCoverage] | None:
    """Per paper table (2-13), each value with its status; None for a release without `paper_map.coverage`."""
    cfg = coverage_config(board.release)
    if cfg is None:
        return None
    compared = set(board.release["paper_map"]["tables"])
    hits = _paper_hits(board)
    logged = _experiment_values(board, cfg)
    values = list(board.reference)
    frozen13 = any(v["table"] == 13 for v in values)
    if not frozen13:
        values += table13_reference()
    titles = {13: T13_TITLE, **_titles(board)}
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
            key = (t, v["model"], v.get("population"), v.get("update"))
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
    from esbench.leaderboard.board import _no_seed
    from esbench.leaderboard.grid import method_key

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
                    for u, x in _ema_by_update(report.path / "cells" / c.id, c).items():
                        found.setdefault((6, model, n, u), []).append(x)
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


def _ema_by_update(cell_dir: Path, cell: Any) -> dict[int, float]:
    """update (1-based, as Table 6 counts) -> the debiased EMA of the cell's per-update training reward."""
    from esbench.report_experiments import reward_curves

    rows = cell.train  # the log as verified, not re-read from disk
    if rows is None:
        try:
            rows = load_jsonl(cell_dir / "train.jsonl") if (cell_dir / "train.jsonl").exists() else []
        except UntrustedInputError:
            return {}
    rec = {**cell.record, "_dir": cell_dir, "_train": rows}
    try:
        curve = reward_curves([rec], {id(rec): cell.id}).get(cell.id)
    except (KeyError, TypeError, ValueError, AttributeError):  # a log verify accepted but this reading cannot use
        return {}
    if not curve:
        return {}
    return {u: x for u, x in zip(curve["updates"], curve["ema"], strict=True) if isinstance(u, int) and _number(x)}


def _target(v: dict[str, Any]) -> str:
    """The paper's number as printed: 4 decimals for Tables 6 and 13, 1 for the main grid, as transcribed else."""
    if v["table"] in EXPERIMENTS:
        return f"{v['value']:.4f}"
    if v["table"] in {t for t, _, _ in LAYOUT}:
        return fmt(v["value"])
    return str(float(v["value"]))


def _covered_text(c: Covered) -> str:
    """The target alone while awaiting; else target → value (delta, and the verdict's mark where one is given)."""
    target = _target(c.ref)
    if c.status == AWAITING:
        return target
    if c.status == REPORTED:
        if c.value is None:
            return f"{target} → undefined"
        return f"{target} → {c.value:.4f} ({c.delta:+.4f})"
    return f"{target} → {c.value:.1f} ({signed(c.delta)} {MARK[c.status]})"


def _covered_title(c: Covered) -> str:
    s = c.ref["source"]
    text = f"{s['table']}, {s['row']}, {s['column']}: paper {c.ref['value']}"
    if c.status == AWAITING:
        return f"{text}; {AWAITING} (no verified submission carries this cell)"
    if c.status == REPORTED:
        return f"{text}; reported by {c.where} (training-side log, not recomputed, not judged)"
    return f"{text}; {c.status} ({c.where})"


def _counts(values: list[Covered]) -> dict[str, int]:
    return {s: sum(c.status == s for c in values) for s in COUNTED}


def _grid_layout(tc: TableCoverage) -> tuple[list[str], list[list[Any]]]:
    """(header, rows of cells: str or Covered) in the table's own layout. Table 6: per model, update × N; Table 13:
    σ × objective → the four statistics; any other table: the printed rows × the printed columns."""
    if tc.table == 6:
        ns = sorted({c.ref["population"] for c in tc.values})
        cells = {(c.ref["model"], c.ref["update"], c.ref["population"]): c for c in tc.values}
        models = list(dict.fromkeys(c.ref["model"] for c in tc.values))
        updates = sorted({c.ref["update"] for c in tc.values})
        return ["model", "update", *[f"N={n}" for n in ns]], [
            [m, str(u), *[cells.get((m, u, n), "—") for n in ns]] for m in models for u in updates
        ]
    if tc.table == 13:
        cells = {(_sig(c.ref["sigma"]), c.ref["column"], c.ref["metric"]): c for c in tc.values}
        keys = list(dict.fromkeys((_sig(c.ref["sigma"]), c.ref["column"]) for c in tc.values))
        return ["σ", "objective", *T13_STATS.values()], [
            [_sigma(s), o, *[cells.get((s, o, m), "—") for m in T13_STATS]] for s, o in keys
        ]
    columns = list(dict.fromkeys(c.ref["source"]["column"] for c in tc.values))
    printed = list(dict.fromkeys(c.ref["source"]["row"] for c in tc.values))
    cells = {(c.ref["source"]["row"], c.ref["source"]["column"]): c for c in tc.values}
    return ["row", *columns], [[r, *[cells.get((r, col), "—") for col in columns]] for r in printed]


def _sources(tc: TableCoverage) -> list[str]:
    return list(dict.fromkeys(c.where for c in tc.values if c.where))


def coverage_markdown(tables: list[TableCoverage]) -> list[str]:
    """The coverage section: a row per (table, model, method) with its counts, then the tables not laid out above
    in the paper's layout, each value either beside the submission's or bare, awaiting reproduction."""
    laid_out = {t for t, _, _ in LAYOUT}
    everything = [c for tc in tables for c in tc.values]
    total = _counts(everything)
    out = [
        "## Coverage of the paper",
        "",
        f"Every value of the paper's Tables {tables[0].table}–{tables[-1].table} ({len(everything)} values) and what "
        "the verified submissions hold for it: ✓ reproduced, ⚠ warn or ✗ fail under the comparison rule; "
        f"*{REPORTED}*: a submission's training-side value (Tables 6 and 13), shown beside the paper's, not judged; "
        f"*{AWAITING}*: no verified submission carries the cell yet, and the paper's number is the target. "
        f"Now: {total['reproduced']} reproduced, {total['warn']} warn, {total['fail']} fail, {total[REPORTED]} "
        f"reported, {total[AWAITING]} {AWAITING}. An Average column has no cell of its own and stays awaiting; "
        "Fig. 1(c) prints no numbers and has no row.",
        "",
        "| table | model | method | paper values | ✓ reproduced | ⚠ warn | ✗ fail | reported | awaiting reproduction |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for tc in tables:
        for (model, method), values in tc.rows().items():
            k = _counts(values)
            out.append(
                f"| {tc.table} | {model} | {method} | {len(values)} | " + " | ".join(str(k[s]) for s in COUNTED) + " |"
            )
    shown = [str(tc.table) for tc in tables if tc.table in laid_out]
    out += [
        "",
        f"Tables {', '.join(shown)} are laid out above: a bare paper number there is {AWAITING}. The others, in "
        "the paper's layout:",
        "",
    ]
    for tc in tables:
        if tc.table in laid_out:
            continue
        header, rows = _grid_layout(tc)
        lead = 2 if tc.table in EXPERIMENTS else 1
        out += [f"### Table {tc.table}: {tc.title}", "", _status_line(tc), ""]
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "---|" * lead + "---:|" * (len(header) - lead))
        for row in rows:
            out.append("| " + " | ".join(_md_cell(x) for x in row) + " |")
        out.append("")
    return out


def _md_cell(x: Any) -> str:
    return _covered_text(x) if isinstance(x, Covered) else str(x).replace("|", "\\|")


def _status_line(tc: TableCoverage) -> str:
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
    sources = _sources(tc)
    if sources:
        note += " Values from " + "; ".join(f"`{s}`" for s in sources) + "."
    return line + note


# ---------------------------------------------------------------------------------------------------------------
# plots


def write_plots(board: Board, plots_dir: Path) -> dict[str, Path]:
    """One pass@k curve per (submission, task): Pass@k against k on a log2 axis, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, Path] = {}
    groups: dict[tuple[str, str], list[Entry]] = {}
    for e in board.entries:
        for t in e.tasks:
            groups.setdefault((e.submission, t), []).append(e)
    for (sub, task), entries in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(5.2, 3.4), dpi=100)
        for e in entries:
            curve = e.tasks[task]["curve"]
            ks = sorted(int(k) for k in curve)
            # a label is mathtext to matplotlib: an unbalanced `$` in a plug-in's name would raise while drawing
            ax.plot(ks, [curve[str(k)] for k in ks], marker="o", ms=3, label=plain(e.method).replace("$", r"\$"))
            refs = [
                (int(m.split("@")[1]), r["ref"])
                for m, r in e.tasks[task]["metrics"].items()
                if m.startswith("pass@") and "ref" in r
            ]
            if refs:
                ax.scatter(*zip(*refs, strict=True), marker="x", color="black", zorder=3)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k (samples)")
        ax.set_ylabel("Pass@k (%)")
        held = " (held out)" if entries[0].tasks[task]["held_out"] else ""
        ax.set_title(f"{sub}: {task}{held}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        path = plots_dir / sub / f"{task}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, metadata={"Software": None})
        plt.close(fig)
        out[f"{sub}/{task}"] = path
    return out


# ---------------------------------------------------------------------------------------------------------------
# HTML

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#fafbfc}
header{background:#1d2330;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#c8d0dc;font-size:13px}main{padding:16px 24px}
h2{font-size:16px;margin:22px 0 8px}table{border-collapse:collapse;font-size:12.5px;background:#fff}
th,td{border:1px solid #dde2ea;padding:4px 7px;text-align:right;white-space:nowrap}
th{background:#eef1f6;cursor:pointer;user-select:none;position:sticky;top:0}
th.txt,td.txt{text-align:left}th[aria-sort=ascending]::after{content:" ▲"}th[aria-sort=descending]::after{content:" ▼"}
td.reproduced{background:#d6f5dd}td.warn{background:#fff1c2}td.fail{background:#ffd5d2}
td.noref{background:repeating-linear-gradient(45deg,#f3f4f6,#f3f4f6 6px,#eceef1 6px,#eceef1 12px);color:#555}
.badge{display:inline-block;border-radius:9px;padding:1px 8px;font-size:11.5px}
.badge.reproduced{background:#2e9d4a;color:#fff}.badge.warn{background:#d99a00;color:#fff}
.badge.fail{background:#c8362d;color:#fff}.badge.noref{background:#8a93a3;color:#fff}
.legend span{margin-right:14px;font-size:12.5px}button.prov{font-size:11.5px;cursor:pointer}
#drawer{position:fixed;top:0;right:0;width:min(560px,92vw);height:100%;overflow:auto;background:#fff;
box-shadow:-4px 0 18px rgba(0,0,0,.18);padding:14px 18px;box-sizing:border-box;font-size:12.5px}
#drawer[hidden]{display:none}#drawer dl{display:grid;grid-template-columns:max-content 1fr;gap:3px 12px}
#drawer dt{color:#5b6678}#drawer dd{margin:0;word-break:break-all;font-family:ui-monospace,monospace}
#drawer h3{margin:14px 0 6px;font-size:14px}.plots{display:flex;flex-wrap:wrap;gap:12px}
.plots figure{margin:0;background:#fff;border:1px solid #dde2ea;padding:6px}.plots img{width:420px;display:block}
.wrap{overflow:auto;max-width:100%}.muted{color:#5b6678;font-size:12.5px}
pre.rule{background:#fff;border:1px solid #dde2ea;padding:8px;font-size:12px;white-space:pre-wrap}
"""

JS = r"""
const data = JSON.parse(document.getElementById('board-data').textContent);
function cellValue(td){const v=td.dataset.value;if(v===undefined||v==='')return null;
  const n=Number(v);return isNaN(n)?v.toLowerCase():n;}
document.querySelectorAll('table.sortable').forEach(table=>{
  table.querySelectorAll('th').forEach((th,idx)=>{
    th.addEventListener('click',()=>{
      const asc=th.getAttribute('aria-sort')!=='ascending';
      table.querySelectorAll('th').forEach(h=>h.removeAttribute('aria-sort'));
      th.setAttribute('aria-sort',asc?'ascending':'descending');
      const body=table.tBodies[0];const rows=[...body.rows];
      rows.sort((a,b)=>{const x=cellValue(a.cells[idx]),y=cellValue(b.cells[idx]);
        if(x===null&&y===null)return 0;if(x===null)return 1;if(y===null)return -1;
        const c=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y));return asc?c:-c;});
      rows.forEach(r=>body.appendChild(r));
    });
  });
});
const drawer=document.getElementById('drawer');
function add(dl,k,v){const dt=document.createElement('dt');dt.textContent=k;const dd=document.createElement('dd');
  dd.textContent=(v===null||v===undefined)?'null':(typeof v==='object'?JSON.stringify(v):String(v));dl.append(dt,dd);}
function openDrawer(key){
  const e=data.entries[key];const body=document.getElementById('drawer-body');body.replaceChildren();
  const h=document.createElement('h2');h.textContent=e.title;body.append(h);
  for(const p of e.provenance){const h3=document.createElement('h3');h3.textContent='cell '+p.cell+' (seed '+p.seed+')';
    const dl=document.createElement('dl');for(const [k,v] of Object.entries(p)){add(dl,k,v);}body.append(h3,dl);}
  drawer.hidden=false;drawer.focus();
}
document.querySelectorAll('button.prov').forEach(b=>b.addEventListener('click',()=>openDrawer(b.dataset.key)));
document.getElementById('drawer-close').addEventListener('click',()=>{drawer.hidden=true;});
document.addEventListener('keydown',ev=>{if(ev.key==='Escape')drawer.hidden=true;});
"""


def _td(text: str, value: Any = None, cls: str = "", title: str = "") -> str:
    attrs = ""
    if value is not None:
        attrs += f' data-value="{for_html(value)}"'
    if cls:
        attrs += f' class="{cls}"'
    if title:
        attrs += f' title="{for_html(title)}"'
    return f"<td{attrs}>{for_html(text)}</td>"


def _paper_row(td: dict[str, Any]) -> str:
    """Where this task's numbers sit in the paper (e.g. Table 2, Qwen2.5-1.5B-Instruct / ES, GSM8K), or why not."""
    sources = [r["source"] for r in td["metrics"].values() if "source" in r]
    tables = sorted({s["table"] for s in sources}, key=lambda t: (not t.startswith("Table"), t))
    if not sources:
        return _td(NO_REF, NO_REF, "txt noref")
    row = next(s["row"] for s in sources if s["table"] == tables[0])
    return _td(f"{' + '.join(tables)}: {row}, {td['paper_task']}", f"{tables[0]} {row}", "txt")


def _artifact_td(verdicts: list[dict[str, Any]] | None, release: dict[str, Any]) -> str:
    """The artifact verdict as a badge (worst over seeds), its criteria in the tooltip."""
    if not verdicts:
        return _td("—")
    status = summary(verdicts)
    problems = release["rule"]["artifact"].get("problems")
    title = " | ".join(f"seed {v['seed']}, {v['run']}: {describe(v, problems)}" for v in verdicts)
    cls = {"pass": "reproduced", "fail": "fail"}.get(status, "noref")
    return (
        f"<td class='txt' data-value='{for_html(status)}' title=\"{for_html(title)}\">"
        f"<span class='badge {cls}'>{for_html(status)}</span></td>"
    )


COVERAGE_CSS = """
td.awaiting{color:#5b6678;font-style:italic}td.reported{background:#dde7f7}
.badge.awaiting{background:#d5dae2;color:#1d2330}.badge.reported{background:#3f6db3;color:#fff}
details{margin:6px 0}summary{cursor:pointer;font-size:13px;margin:4px 0}
"""


def _coverage_class(status: str) -> str:
    return {REPORTED: "reported", AWAITING: "awaiting"}.get(status) or _status_class(status)


def coverage_html(tables: list[TableCoverage]) -> str:
    """The coverage section of the page: the counts per (table, model, method), sortable, then each table in the
    paper's layout (folded), every value coloured by its status, the target and its source in the tooltip."""
    e = for_html
    everything = [c for tc in tables for c in tc.values]
    total = _counts(everything)
    labels = ["table", "model", "method", "paper values", "reproduced", "warn", "fail", REPORTED, AWAITING]
    head = "".join(f"<th class='txt'>{e(h)}</th>" if h in ("model", "method") else f"<th>{e(h)}</th>" for h in labels)
    rows = []
    for tc in tables:
        for (model, method), values in tc.rows().items():
            k = _counts(values)
            cells = [_td(str(tc.table), tc.table), _td(model, model, "txt"), _td(method, method, "txt")]
            cells.append(_td(str(len(values)), len(values)))
            cells += [_td(str(k[s]), k[s], _coverage_class(s) if k[s] else "") for s in COUNTED]
            rows.append("<tr>" + "".join(cells) + "</tr>")
    folded = []
    for tc in tables:
        header, grid_rows = _grid_layout(tc)
        lead = 2 if tc.table in EXPERIMENTS else 1
        th = "".join(f"<th class='txt'>{e(h)}</th>" if i < lead else f"<th>{e(h)}</th>" for i, h in enumerate(header))
        body = []
        for row in grid_rows:
            tds = []
            for x in row:
                if isinstance(x, Covered):
                    value = x.value if x.value is not None else x.ref["value"]
                    tds.append(_td(_covered_text(x), value, _coverage_class(x.status), _covered_title(x)))
                else:
                    tds.append(_td(str(x), str(x), "txt" if x != "—" else ""))
            body.append("<tr>" + "".join(tds) + "</tr>")
        n, waiting = len(tc.values), tc.awaiting()
        summary = f"Table {tc.table}: {tc.title} ({waiting} of {n} values {AWAITING})"
        folded.append(
            f"<details><summary>{e(summary)}</summary><p class='muted'>{e(_plain(_status_line(tc)))}</p>"
            f"<div class='wrap'><table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
            "</details>"
        )
    return (
        "\n<h2>Coverage of the paper</h2>\n"
        f"<p class='muted'>Every value of the paper's Tables {tables[0].table}–{tables[-1].table} "
        f"({len(everything)} values) and what the verified submissions hold for it. Now: {total['reproduced']} "
        f"reproduced, {total['warn']} warn, {total['fail']} fail, {total[REPORTED]} reported, {total[AWAITING]} "
        f"{AWAITING}. An Average column has no cell of its own and stays awaiting; Fig. 1(c) prints no numbers.</p>\n"
        "<p class='legend'><span><span class='badge reproduced'>reproduced</span> / "
        "<span class='badge warn'>warn</span> / <span class='badge fail'>fail</span> under the rule</span>"
        f"<span><span class='badge reported'>{REPORTED}</span> a submission's training-side value (Tables 6 and "
        "13: its own logs, not recomputed), beside the paper's, not judged</span>"
        f"<span><span class='badge awaiting'>{AWAITING}</span> no verified submission carries the cell: the "
        "paper's number is the target</span></p>\n"
        f"<div class='wrap'><table id='coverage' class='sortable'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>\n" + "\n".join(folded)
    )


def _plain(markdown_text: str) -> str:
    """Markdown emphasis and code marks dropped, for a line the page shows as text."""
    return markdown_text.replace("**", "").replace("`", "")


def _status_class(status: str | None) -> str:
    return {"reproduced": "reproduced", "warn": "warn", "fail": "fail", NO_REF: "noref"}.get(status or "", "")


def page(board: Board, plots: dict[str, str]) -> str:
    rel = board.release
    e = for_html
    cov = coverage(board)
    head = [
        "<th class='txt'>submission</th>",
        "<th class='txt'>suite</th>",
        "<th class='txt'>model</th>",
        "<th class='txt'>method</th>",
        "<th>budget</th>",
        "<th>seeds</th>",
        "<th class='txt'>task</th>",
        "<th class='txt'>paper row</th>",
        *[f"<th>{m}</th>" for m in METRICS],
        "<th class='txt'>status</th>",
        "<th>FLOPs</th>",
    ]
    artifact = any("artifact" in td for en in board.entries for td in en.tasks.values())
    if artifact:  # the column only on a board where the artifact rule judged some cell
        head.append("<th class='txt'>artifact rule</th>")
    head.append("<th class='txt'>provenance</th>")
    rows = []
    drawer_data: dict[str, Any] = {}
    for en in board.entries:
        drawer_data[en.key] = {
            "title": f"{en.submission}: {en.model} / {en.method} / b{en.budget}",
            "provenance": en.provenance,
        }
        for t, td in en.tasks.items():
            cells = [
                _td(en.submission, en.submission, "txt"),
                _td(en.suite, en.suite, "txt"),
                _td(en.model, en.model, "txt", en.model_path),
                _td(en.method + (" (plug-in)" if en.grid == "plug-in" else ""), en.method, "txt", en.kind),
                _td(str(en.budget), en.budget if isinstance(en.budget, int) else str(en.budget)),
                _td(_seeds(en.seeds), len(en.seeds)),
                _td(t + (" (held out)" if td["held_out"] else ""), t, "txt"),
                _paper_row(td),
            ]
            statuses = []
            for m in METRICS:
                row = td["metrics"].get(m)
                if row is None:
                    cells.append(_td("—"))
                    continue
                text = f"{row['mean']:.1f} ± {row['se']:.1f}"
                title = f"SE from {row['se_source']}; per seed: {', '.join(f'{v:.2f}' for v in row['per_seed'])}"
                if "ref" in row:
                    text += f" ({signed(row['delta'])})"
                    src = row["source"]
                    title += (
                        f"; paper {row['ref']:.2f} ({src['table']}, {src['row']}, {src['column']}); "
                        f"band ±{row['band']:.2f}, warn ±{row['warn_band']:.2f}"
                    )
                    if row.get("seed_sd"):
                        title += f" (with seed SD {row['seed_sd']:.2f})"
                cls = _status_class(row.get("status"))
                if row.get("status"):
                    statuses.append(row["status"])
                cells.append(_td(text, f"{row['mean']:.6f}", cls, title))
            order = ["fail", "warn", "reproduced", NO_REF]
            status = min(statuses, key=order.index) if statuses else NO_REF
            cells.append(
                f"<td class='txt' data-value='{order.index(status)}'><span class='badge {_status_class(status)}'>"
                f"{e(status)}</span></td>"
            )
            cells.append(_td(format_flops(en.flops), en.flops, title="training FLOPs, App. G.2 (the record's)"))
            if artifact:
                cells.append(_artifact_td(td.get("artifact"), rel))
            cells.append(f"<td class='txt'><button class='prov' data-key='{e(en.key)}'>details</button></td>")
            rows.append("<tr>" + "".join(cells) + "</tr>")
    figures = "".join(
        f"<figure><img src='{e(src)}' alt='Pass@k curves, {e(k)}'>"
        f"<figcaption class='muted'>{e(k)}</figcaption></figure>"
        for k, src in sorted(plots.items())
    )
    rejected = "".join(f"<li><b>{e(r.path.name)}</b>: {e('; '.join(r.reasons[:5]))}</li>" for r in board.rejected)
    # ASCII JSON in which no value can end the script element (`</`) or open a comment in it (`<!--`); no NaN, which
    # the browser's JSON.parse refuses (the strict reader keeps it out of records; a failure here isolates the entry)
    data = json.dumps({"release": rel["id"], "entries": drawer_data}, sort_keys=True, allow_nan=False)
    data = data.replace("</", "<\\/").replace("<!--", "\\u003c!--")
    table = (
        "<div class='wrap'><table id='results' class='sortable'><thead><tr>"
        + "".join(head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
        if rows
        else "<p>No verified submission yet.</p>"
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>esbench leaderboard {e(rel["id"])}</title><style>{CSS + (COVERAGE_CSS if cov else "")}</style></head>
<body>
<header><h1>esbench leaderboard — release {e(rel["id"])}</h1>
<p>ES vs GRPO for LLM reasoning (arXiv 2608.27351). Every number is recomputed from per-sample logs by
<code>esbench leaderboard verify</code>.
Release {e(rel["id"])} ({e(rel["date"])}); record schema {e(rel["record_schema"])}.</p></header>
<main>
<p class="legend"><span><span class="badge reproduced">reproduced</span> within the band</span>
<span><span class="badge warn">warn</span> within {rel["rule"]["warn_factor"]:g}× the band</span>
<span><span class="badge fail">fail</span> beyond</span>
<span><span class="badge noref">{NO_REF}</span> not on the paper's grid (e.g. the tiny suite)</span></p>
<h2>Results</h2>
<p class="muted">Mean ± SE in percent over seeds (one seed: per-problem bootstrap SE). In brackets: the delta to the
paper. Click a column header to sort; hover a number for its source and band; "details" opens the provenance.</p>
{table}
{claims_html(board)}
<h2>Pass@k curves</h2>
<div class="plots">{figures or "<p>No plots yet.</p>"}</div>{coverage_html(cov) if cov else ""}
<h2>Comparison rule</h2>
<pre class="rule">{e(rule_text(rel["rule"]))}</pre>
{f"<h2>Rejected submissions</h2><ul>{rejected}</ul>" if rejected else ""}
</main>
<aside id="drawer" hidden tabindex="-1" aria-label="provenance"><button id="drawer-close">close</button>
<div id="drawer-body"></div></aside>
<script type="application/json" id="board-data">{data}</script>
<script>{JS}</script>
</body></html>
"""
