"""The end-of-run summary table: cell x task x Pass@1 / Pass@K / greedy, read back from the records."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from esbench.records import Record


def _cell(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def summary_table(suite: str, records: Sequence[Record]) -> Table:
    table = Table(title=f"{suite}: {len(records)} cells done")
    kmax = max((max(r.cell["spec"]["eval"]["k"]) for r in records), default=1)
    table.caption = "* held-out task (forgetting)"
    for col in ("cell", "task", "Pass@1", f"Pass@{kmax}", f"Maj@{kmax}", "greedy"):
        table.add_column(col, justify="left" if col in ("cell", "task") else "right", no_wrap=col == "task")
    for r in sorted(records, key=lambda r: r.cell["name"]):
        first = True
        for task, m in r.metrics.items():
            held = "*" if task in r.held_out else ""
            table.add_row(
                r.cell["name"] if first else "",
                task + held,
                f"{m.metric('pass@1'):.3f}",
                _cell(m.metric(f"pass@{kmax}")),
                _cell(m.metric(f"maj@{kmax}")),
                _cell(m.greedy),
            )
            first = False
    return table


VERDICT_STYLE = {"supported": "green", "contradicted": "red", "inconclusive": "yellow", "not measurable": "dim"}


def claims_table(records: Sequence[Record]) -> Table:
    """The paper's claims on these records (`esbench.claims`), one line a claim: id, statistic ± CI, verdict."""
    from esbench import claims

    data = claims.evaluate([r.as_dict() for r in records])
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
