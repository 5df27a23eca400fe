"""The end-of-run summary table: cell x task x Pass@1 / Pass@K / greedy, read back from the records."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def summary_table(suite: str, records: list[dict[str, Any]]) -> Table:
    table = Table(title=f"{suite}: {len(records)} cells done")
    kmax = max((max(r["cell"]["spec"]["eval"]["k"]) for r in records), default=1)
    table.caption = "* held-out task (forgetting)"
    for col in ("cell", "task", "Pass@1", f"Pass@{kmax}", f"Maj@{kmax}", "greedy"):
        table.add_column(col, justify="left" if col in ("cell", "task") else "right", no_wrap=col == "task")
    for r in sorted(records, key=lambda r: r["cell"]["name"]):
        first = True
        for task, m in r["metrics"].items():
            held = "*" if task in r.get("held_out", []) else ""
            table.add_row(
                r["cell"]["name"] if first else "",
                task + held,
                f"{m['pass@1']:.3f}",
                f"{m[f'pass@{kmax}']:.3f}" if f"pass@{kmax}" in m else "-",
                f"{m[f'maj@{kmax}']:.3f}" if f"maj@{kmax}" in m else "-",
                f"{m['greedy']:.3f}" if "greedy" in m else "-",
            )
            first = False
    return table


VERDICT_STYLE = {"supported": "green", "contradicted": "red", "inconclusive": "yellow", "not measurable": "dim"}


def claims_table(records: list[dict[str, Any]]) -> Table:
    """The paper's claims on these records (`esbench.claims`), one line a claim: id, statistic ± CI, verdict."""
    from esbench import claims

    data = claims.evaluate(records)
    rows = claims.rows(data)
    table = Table(title="paper claims (arXiv 2608.27351)")
    table.caption = (
        f"95 % paired-bootstrap CI over problems (seeds, then problems, with several seeds; "
        f"{data['bootstrap']['iters']} resamples); definitions: esbench/claims.py; the same table: `esbench report`"
    )
    many = len({r["group"] for r in rows}) > 1
    for col in (["group"] if many else []) + ["claim", "statistic [95 % CI]", "test", "verdict"]:
        table.add_column(col, overflow="fold")
    for r in rows:
        verdict = f"[{VERDICT_STYLE[r['verdict']]}]{r['verdict']}[/]"
        table.add_row(*([r["group"]] if many else []), r["id"], r["statistic"], r["test"], verdict)
    return table
