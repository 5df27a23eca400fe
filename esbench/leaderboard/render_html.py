"""The static page `leaderboard/site/index.html`: one self-contained HTML file (no network: no CDN, no fonts), its
results table, claims, coverage and rule, with every submission string escaped for HTML.

Separate from the Markdown (`render`), which writes the README from the same shared text (`render_text`).
"""

from __future__ import annotations

import json
from typing import Any

from esbench.leaderboard.artifact import describe, summary
from esbench.leaderboard.board import METRICS, NO_REF, Board
from esbench.leaderboard.coverage import (
    AWAITING,
    COUNTED,
    EXPERIMENTS,
    REPORTED,
    Covered,
    TableCoverage,
    coverage,
    grid_layout,
    status_counts,
)
from esbench.leaderboard.escape import for_html
from esbench.leaderboard.render_text import (
    CLAIMS_NOTE,
    claim_rows,
    covered_text,
    rule_text,
    seeds_text,
    signed,
    status_line,
)
from esbench.metrics.compute import format_flops

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
    total = status_counts(everything)
    labels = ["table", "model", "method", "paper values", "reproduced", "warn", "fail", REPORTED, AWAITING]
    head = "".join(f"<th class='txt'>{e(h)}</th>" if h in ("model", "method") else f"<th>{e(h)}</th>" for h in labels)
    rows = []
    for tc in tables:
        for (model, method), values in tc.rows().items():
            k = status_counts(values)
            cells = [_td(str(tc.table), tc.table), _td(model, model, "txt"), _td(method, method, "txt")]
            cells.append(_td(str(len(values)), len(values)))
            cells += [_td(str(k[s]), k[s], _coverage_class(s) if k[s] else "") for s in COUNTED]
            rows.append("<tr>" + "".join(cells) + "</tr>")
    folded = []
    for tc in tables:
        header, grid_rows = grid_layout(tc)
        lead = 2 if tc.table in EXPERIMENTS else 1
        th = "".join(f"<th class='txt'>{e(h)}</th>" if i < lead else f"<th>{e(h)}</th>" for i, h in enumerate(header))
        body = []
        for row in grid_rows:
            tds = []
            for x in row:
                if isinstance(x, Covered):
                    value = x.value if x.value is not None else x.ref["value"]
                    tds.append(_td(covered_text(x), value, _coverage_class(x.status), _covered_title(x)))
                else:
                    tds.append(_td(str(x), str(x), "txt" if x != "—" else ""))
            body.append("<tr>" + "".join(tds) + "</tr>")
        n, waiting = len(tc.values), tc.awaiting()
        summary = f"Table {tc.table}: {tc.title} ({waiting} of {n} values {AWAITING})"
        folded.append(
            f"<details><summary>{e(summary)}</summary><p class='muted'>{e(_plain(status_line(tc)))}</p>"
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


def claims_html(board: Board) -> str:
    e = for_html
    parts = []
    for sub in board.claims:
        rows = []
        for r in claim_rows(board, sub):
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


def _covered_title(c: Covered) -> str:
    s = c.ref["source"]
    text = f"{s['table']}, {s['row']}, {s['column']}: paper {c.ref['value']}"
    if c.status == AWAITING:
        return f"{text}; {AWAITING} (no verified submission carries this cell)"
    if c.status == REPORTED:
        return f"{text}; reported by {c.where} (training-side log, not recomputed, not judged)"
    return f"{text}; {c.status} ({c.where})"


def _result_rows(board: Board, artifact: bool) -> tuple[list[str], dict[str, Any]]:
    """The results table's rows (one per entry and task) and the provenance drawer's data per entry."""
    rel = board.release
    e = for_html
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
                _td(seeds_text(en.seeds), len(en.seeds)),
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
    return rows, drawer_data


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
    rows, drawer_data = _result_rows(board, artifact)
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
