"""The report's compute view: each trained cell's metrics beside its App. G.2 FLOPs, and ES against GRPO at matched
FLOPs (arXiv 2608.27351 v2 compares them so; the formulas and token counting are in `esbench.metrics.compute`).

Every number comes from a record's `compute` section and its train.jsonl probe rows. A cell's final Pass@1 and
Pass@K are measured at its own FLOPs only, so ES and GRPO are matched on the training probe, which each run measures
at several points along training: at the FLOPs one run spent in all, the other run's probe curve is interpolated
linearly (in FLOPs) when it spans that value, and the two are set side by side. Where neither run's curve reaches
the other's total, the pair is "not comparable: curves do not overlap". `build` gathers the data (what `--json`
prints); `markdown` and `plot` draw it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from esbench.metrics.compute import format_flops, interpolate
from esbench.report_cells import ReportCell
from esbench.report_render import _md, _save

NO_OVERLAP = "not comparable: curves do not overlap"
NO_CURVE = "not comparable: no probe curve against FLOPs"


def probe_curve(cell: ReportCell) -> dict[str, list[Any]] | None:
    """The cell's probe metrics against cumulative FLOPs: {"flops": [...], "pass@1": [...], ...}; None without one."""
    comp = cell.record.compute
    at = {p["update"]: p["flops"] for p in (comp.curve if comp else [])}
    probes = [(r.update, r.probe) for r in cell.train if r.probe is not None and r.update in at]
    if not probes:
        return None
    ks = sorted({k for _, p in probes for k in p.pass_at_k}, key=int)
    return {
        "updates": [u for u, _ in probes],
        "flops": [at[u] for u, _ in probes],
        **{f"pass@{k}": [p.pass_at_k.get(k) for _, p in probes] for k in ks},
    }


def _metrics(cell: ReportCell, ks: list[int]) -> dict[str, Any]:
    per_task = {t: {f"pass@{k}": m.metric(f"pass@{k}") for k in ks} for t, m in cell.record.metrics.items()}
    avg = {}
    for k in ks:
        vals = [v[f"pass@{k}"] for v in per_task.values()]
        known = [v for v in vals if v is not None]
        avg[f"pass@{k}"] = sum(known) / len(known) if vals and len(known) == len(vals) else None
    return {"tasks": per_task, "average": avg}


def match(a: dict[str, list[Any]], b: dict[str, list[Any]], metric: str) -> dict[str, Any]:
    """Curves `a` (ES) and `b` (GRPO) compared on `metric` at each one's total FLOPs where the other spans it."""
    pa = [(x, y) for x, y in zip(a["flops"], a.get(metric, []), strict=False) if y is not None]
    pb = [(x, y) for x, y in zip(b["flops"], b.get(metric, []), strict=False) if y is not None]
    if not pa or not pb:
        return {"metric": metric, "points": [], "status": NO_CURVE}
    points: list[dict[str, Any]] = []
    for at, whose in ((max(a["flops"]), "es"), (max(b["flops"]), "grpo")):
        va, vb = interpolate(pa, at), interpolate(pb, at)
        if va is not None and vb is not None and all(p["flops"] != at for p in points):
            points.append({"flops": at, "budget_of": whose, "es": va, "grpo": vb, "delta": va - vb})
    return {"metric": metric, "points": points, "status": "compared" if points else NO_OVERLAP}


def build(cells: list[ReportCell], ks: list[int]) -> dict[str, Any]:
    """Per trained cell: FLOPs, device-seconds and Pass@1 / Pass@K; then every ES/GRPO pair of one model and seed
    at matched FLOPs on the probe's Pass@1 and largest common Pass@k."""
    k_hi = max(ks)
    shown = sorted({1, k_hi})
    rows, curves = [], {}
    # a record older than the compute section is a trained one when it has drift (a checkpoint's is against its base)
    trained = [
        c for c in cells if c.record.compute is not None or (c.record.drift is not None and c.family != "checkpoint")
    ]
    for cell in trained:
        comp = cell.record.compute
        rows.append(
            {
                "cell": cell.label,
                "method": cell.family,
                "formula": comp and comp.formula,
                "parameters": comp and comp.parameters,
                "tokens": comp and comp.tokens.get("total"),
                "flops": comp and comp.flops,
                "train_seconds": comp and comp.train_seconds,
                "devices": comp and comp.devices,
                "device": comp and comp.device,
                "device_seconds": comp and comp.device_seconds,
                **_metrics(cell, shown),
            }
        )
        curve = probe_curve(cell)
        if curve is not None:
            curves[cell.label] = curve
    matched = []
    for es in (c for c in trained if c.family == "es"):
        for grpo in (c for c in trained if c.family == "grpo"):
            if (es.model, es.spec["seed"]) != (grpo.model, grpo.spec["seed"]):
                continue
            a, b = curves.get(es.label), curves.get(grpo.label)
            entry: dict[str, Any] = {"es": es.label, "grpo": grpo.label, "metrics": []}
            if a is None or b is None:
                entry["status"] = NO_CURVE
            else:
                common = sorted(_pass_keys(a) & _pass_keys(b), key=_k)
                for m in dict.fromkeys(m for m in common if m in ("pass@1", common[-1])):
                    entry["metrics"].append(match(a, b, m))
                compared = any(m["status"] == "compared" for m in entry["metrics"])
                entry["status"] = "compared" if compared else NO_OVERLAP
            matched.append(entry)
    return {"ks": shown, "rows": rows, "curves": curves, "matched": matched}


def _pass_keys(curve: dict[str, list[Any]]) -> set[str]:
    return {m for m in curve if m.startswith("pass@")}


def _k(metric: str) -> int:
    return int(metric.split("@")[1])


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}"


def _secs(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def markdown(view: dict[str, Any] | None) -> list[str]:
    """The compute section of report.md (empty without trained cells)."""
    if not view or not view["rows"]:
        return []
    ks = view["ks"]
    cols = " ".join(f"@{k}" for k in ks)
    out = ["## Compute (paper App. G.2: FLOPs_GRPO = 8·T·B·G·P·L, FLOPs_ES = 2·T·N·D·P·L)", ""]
    out += [
        "FLOPs from the tokens each run processed: 8·P·tokens for GRPO, 2·P·tokens for ES (prompt + generated tokens "
        "of every rollout; a sequence sums its stages). P counts every parameter, tied tensors once. Device-seconds "
        f"= training wall-clock × devices. Pass@k in percent ({cols}).",
        "",
    ]
    tasks = list(view["rows"][0]["tasks"])
    header = ["cell", "P", "tokens", "FLOPs", "train s", "device-s", *tasks, "Average"]
    rows = []
    for r in view["rows"]:
        dev = "–" if r["device_seconds"] is None else f"{r['device_seconds']:.1f} ({r['devices']}× {r['device']})"
        rows.append(
            [
                r["cell"],
                format_flops(r["parameters"]),
                format_flops(r["tokens"]),
                format_flops(r["flops"]),
                _secs(r["train_seconds"]),
                dev,
                *[" ".join(_pct(r["tasks"].get(t, {}).get(f"pass@{k}")) for k in ks) for t in tasks],
                " ".join(_pct(r["average"][f"pass@{k}"]) for k in ks),
            ]
        )
    out += [_md(header, rows), ""]
    if view["matched"]:
        out += ["### ES vs GRPO at matched FLOPs (training probe)", ""]
        out += [
            "At each run's total FLOPs, the other run's probe curve interpolated linearly in FLOPs (when it spans "
            "that value); probe Pass@k in percent.",
            "",
        ]
        lines = []
        for m in view["matched"]:
            for metric in m["metrics"]:
                for p in metric["points"]:
                    budget = "ES" if p["budget_of"] == "es" else "GRPO"
                    lines.append(
                        [
                            m["es"],
                            m["grpo"],
                            f"probe {metric['metric']}",
                            f"{format_flops(p['flops'])} ({budget}'s total)",
                            _pct(p["es"]),
                            _pct(p["grpo"]),
                            f"{p['delta'] * 100:+.1f}",
                        ]
                    )
            if m["status"] != "compared":
                lines.append([m["es"], m["grpo"], m["status"], "", "", "", ""])
        out += [_md(["ES cell", "GRPO cell", "metric", "at FLOPs", "ES", "GRPO", "ES − GRPO"], lines), ""]
    return out


def plot(view: dict[str, Any] | None, out_dir: Path) -> list[Path]:
    """compute.png: each trained cell's probe Pass@1 against cumulative FLOPs (nothing without probe curves)."""
    if not view or not view["curves"]:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    for cell, c in view["curves"].items():
        if "pass@1" in c:
            ax.plot(c["flops"], c["pass@1"], marker=".", label=cell)
    ax.set_xlabel("training FLOPs (App. G.2)")
    ax.set_ylabel("probe Pass@1")
    ax.set_title("probe Pass@1 against compute")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return [_save(fig, Path(out_dir) / "compute.png")]
