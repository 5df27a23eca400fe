"""`esbench report RUN_DIR`: the paper's tables and plots for one run, from its records and per-sample logs.

Tables follow the paper's layout (arXiv 2608.27351): Pass@k per task with an Average column (Table 2), Maj@k
(Table 7), held-out change against base with paired-bootstrap CIs (Table 10), relative drift and the ES/GRPO ratio
(Table 4, with per-group shares and where the top-100 |Δθ| fall), thresholded ES (Tables 11-12), entropy
(Fig. 2), population JS diversity, the bf16 rounding share of paired fp32-master / paper-bf16 cells, and the
verdicts on the paper's headline claims (`esbench.claims`). Everything is recomputed from what the records and
samples hold; nothing is re-run.

The numbers are gathered here (`build`) from the typed cells of report_cells.py; report_render.py draws them as
Markdown tables and plots, report_compute.py its compute view, and `render_markdown` and `plots` here join the two.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from esbench import claims, report_compute, report_experiments, report_render
from esbench.es import BF16_MODES
from esbench.metrics.bootstrap import paired_bootstrap
from esbench.metrics.passk import majority_correct, pass_at_k
from esbench.records import atomic_write_text
from esbench.report_cells import ReportCell, load_run


def label(cell: ReportCell, many_budgets: bool, many_seeds: bool) -> str:
    lab = cell.record.cell["labels"]
    s = cell.spec
    out = f"{lab['model']}/{lab['method']}"
    if many_budgets and lab["method"] != "base":
        out += f"/b{s['budget']}"
    if many_seeds:
        out += f"/s{s['seed']}"
    return out


def per_problem(cell: ReportCell, task: str, metric: str) -> list[float]:
    """Per-problem values of `pass@k` (from [n, c]) or `maj@k` (from the logged answers) for the bootstrap."""
    kind, k = metric.split("@")
    if kind == "pass":
        return [pass_at_k(n, c, int(k)) for n, c in cell.record.metrics[task].per_problem]
    return [float(majority_correct(r.answers, r.correct, int(k))) for r in cell.samples(task)]


# ---------------------------------------------------------------------------------------------------------------
# tables


def report_ks(cells: list[ReportCell]) -> list[int]:
    """The paper's K columns (1, 16, 32) that this run measured; else 1 and its largest k."""
    common = set.intersection(*(set(c.spec["eval"]["k"]) for c in cells))
    ks = [k for k in (1, 16, 32) if k in common]
    return ks if len(ks) > 1 else sorted({1, max(common)})


def accuracy(cells: list[ReportCell], ks: list[int]) -> dict[str, Any]:
    tasks = list(cells[0].record.metrics)
    rows = []
    for cell in cells:
        metrics = cell.record.metrics
        vals = {t: {f"pass@{k}": metrics[t].metric(f"pass@{k}") for k in ks} for t in tasks}
        for t in tasks:
            for k in ks:
                if k > 1:
                    vals[t][f"maj@{k}"] = metrics[t].metric(f"maj@{k}")
            vals[t]["greedy"] = metrics[t].greedy
        # one eval spec for every task: a metric is measured on all of them or on none
        first = vals[tasks[0]]
        avg = {m: sum(cast(float, vals[t][m]) for t in tasks) / len(tasks) for m in first if first[m] is not None}
        rows.append({"cell": cell.label, "tasks": vals, "average": avg})
    return {"tasks": tasks, "held_out": cells[0].record.held_out, "ks": ks, "rows": rows}


def forgetting(cells: list[ReportCell], ks: list[int], iters: int = 2000) -> dict[str, Any]:
    """Held-out change against the same model's base cell (same seed when there is one), in Table 10's columns."""
    metrics = [f"pass@{k}" for k in ks] + [f"maj@{k}" for k in ks if k > 1]
    bases = {(c.model, c.spec["seed"]): c for c in cells if c.is_base}
    any_base = {k[0]: v for k, v in bases.items()}
    rows = []
    for rec in cells:
        if rec.is_base:
            continue
        model = rec.model
        base = bases.get((model, rec.spec["seed"])) or any_base.get(model)
        if base is None:
            continue
        held = rec.record.held_out
        per_task: dict[str, dict[str, dict[str, float]]] = {}
        for t in held:
            per_task[t] = {
                m: paired_bootstrap(per_problem(base, t, m), per_problem(rec, t, m), iters=iters) for m in metrics
            }
        mean: dict[str, Mapping[str, float | None]] = {}
        for m in metrics:  # mean over held-out tasks: bootstrap the per-problem mean of the task means
            a = [per_problem(base, t, m) for t in held]
            b = [per_problem(rec, t, m) for t in held]
            if held and len({len(x) for x in a}) == 1:
                mean[m] = paired_bootstrap(
                    [sum(x) / len(x) for x in zip(*a, strict=True)],
                    [sum(x) / len(x) for x in zip(*b, strict=True)],
                    iters=iters,
                )
            elif held:
                d = sum(per_task[t][m]["delta"] for t in held) / len(held)
                mean[m] = {"delta": d, "lo": None, "hi": None, "se": None}
        rows.append({"cell": rec.label, "base": base.label, "tasks": per_task, "mean": mean})
    return {"metrics": metrics, "rows": rows}


# Table 4's max |Δθ| (paper text beside the table; not in paper_tables.json): exact bf16 steps.
_PAPER_MAX_DELTA = {
    ("Llama-3.2-3B-Instruct", "GRPO"): 2.0**-12,  # top-100 all token embeddings
    ("DeepSeek-R1-Distill-Qwen-1.5B", "GRPO"): 2.0**-10,  # top-100 all LM head
    ("Llama-3.2-3B-Instruct", "ES"): 0.01171875,  # 3 bf16 steps in [0.5, 1): input LayerNorm
    ("DeepSeek-R1-Distill-Qwen-1.5B", "ES"): 2.0**-6,
}


def _paper_table4() -> dict[tuple[str, str], dict[str, float]]:
    """(model, "ES" | "GRPO") -> Table 4's relative L2 (as a fraction), ES/GRPO ratio and max |Δθ| where stated."""
    out: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    if report_experiments.PAPER_TABLES.exists():
        for v in json.loads(report_experiments.PAPER_TABLES.read_text())["values"]:
            if v["table"] == 4 and v["column"] in ("GRPO", "Full ES"):
                key = "relative_l2" if v["metric"] == "l2_drift_rel" else "ratio"
                out[v["model"], v["method"]][key] = v["value"] * (1e-2 if key == "relative_l2" else 1)
    for model_method, value in _PAPER_MAX_DELTA.items():
        out[model_method]["max_abs_delta"] = value
    return dict(out)


def _paper_method(family: str) -> str | None:
    """The Table 4 column a cell is set beside: the hard GRPO row is a released checkpoint against its base."""
    return {"es": "ES", "grpo": "GRPO", "checkpoint": "GRPO"}.get(family)


def _drift_summary(d: dict[str, Any] | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {k: d[k] for k in ("weights", "relative_l2", "max_abs_delta", "changed_fraction") if k in d}


def _has_master(rows: list[dict[str, Any]]) -> bool:
    return any(r["master"] for r in rows)


def drift_table(cells: list[ReportCell]) -> dict[str, Any]:
    """Table 4 from the saved-weights drift (`drift`), the fp32 master's beside it (`drift.master`), and the paper's
    values for the same model. Older records have no `weights`: their drift is of the weights as trained."""
    paper = _paper_table4()
    rows = []
    for rec in cells:
        d = rec.record.drift
        if d is None:
            continue
        family = rec.family
        model_name = rec.spec["model"]["path"].rstrip("/").rsplit("/", 1)[-1]
        rows.append(
            {
                "cell": rec.label,
                "model": rec.model,
                "model_name": model_name,
                "method": family,
                "precision": rec.precision if rec.spec["method"]["kind"] == "es" else None,
                "weights": d.get("weights"),
                "relative_l2": d["relative_l2"],
                "max_abs_delta": d["max_abs_delta"],
                "changed_fraction": d["changed_fraction"],
                "rounding_share": d.get("rounding_share"),
                "top_bf16_step_share": d["top_bf16_step_share"],
                "groups": d["groups"],
                "master": _drift_summary(d.get("master")),
                "against": (d.get("against") or {}).get("path"),
                "paper": paper.get((model_name, _paper_method(family) or "")),
            }
        )
    # ES/GRPO drift per ES precision, on the saved weights (the paper's are bf16 checkpoints): the paper measured bf16
    # ES (its artifact's arithmetic), so the paper-bf16 ratio is the one to set beside its 40.7–44.1×; fp32-master
    # says how much of it exact arithmetic keeps. The GRPO side is the trained GRPO cells, else the checkpoint cells
    # with a base (the hard setting's SofT-GRPO). `ratio_master`: the same, each side's fp32 master where it has one.
    ratios = []
    es_by: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    grpo_by: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["method"] == "es":
            es_by[r["model"]][r["precision"]].append(r)
        elif r["method"] in ("grpo", "checkpoint"):
            grpo_by[r["model"]][r["method"]].append(r)

    def mean(rs: list[dict[str, Any]], master: bool = False) -> float:
        vals = [(r["master"] if master and r["master"] else r)["relative_l2"] for r in rs]
        return sum(vals) / len(vals)

    for model, by_precision in es_by.items():
        source = "grpo" if grpo_by[model]["grpo"] else "checkpoint"
        grpo_rows = grpo_by[model][source]
        if not grpo_rows:
            continue
        grpo, grpo_master = mean(grpo_rows), mean(grpo_rows, master=True)
        for precision, es_rows in sorted(by_precision.items()):
            es, es_master = mean(es_rows), mean(es_rows, master=True)
            masters = es_master / grpo_master if grpo_master and _has_master(es_rows + grpo_rows) else None
            ratios.append(
                {
                    "model": model,
                    "es_precision": precision,
                    "grpo_method": source,
                    "es": es,
                    "grpo": grpo,
                    "ratio": es / grpo if grpo else None,
                    "ratio_master": masters,
                    "paper_ratio": (paper.get((es_rows[0]["model_name"], "ES")) or {}).get("ratio"),
                }
            )
    return {"rows": rows, "es_over_grpo": ratios}


def bf16_pairs(cells: list[ReportCell]) -> list[dict[str, Any]]:
    """ES cells identical but for `precision`: how much of paper-bf16's drift exact arithmetic does not make."""
    out = []
    es = [r for r in cells if r.spec["method"]["kind"] == "es" and r.record.drift is not None]
    for b in es:
        cfg_b = b.spec["method"]["config"]
        if b.precision not in BF16_MODES:
            continue
        for f in es:
            cfg_f = f.spec["method"]["config"]
            ignore = {"precision": None, "checkpoint_every": None}  # operational, not part of the configuration
            same = {**cfg_f, **ignore} == {**cfg_b, **ignore}
            if f.precision == "fp32-master" and same and _same_but_method(f, b):
                db, df = b.record.drift or {}, f.record.drift or {}
                out.append(
                    {
                        "fp32": f.label,
                        "bf16": b.label,
                        "bf16_precision": b.precision,
                        "relative_l2_fp32": df["relative_l2"],
                        "relative_l2_bf16": db["relative_l2"],
                        "excess_share": 1 - (df["l2"] / db["l2"]) ** 2 if db["l2"] else None,
                        "rounding_share_bf16": db.get("rounding_share"),
                        "top_step_share_fp32": df["top_bf16_step_share"],
                        "top_step_share_bf16": db["top_bf16_step_share"],
                    }
                )
    return out


def _same_but_method(a: ReportCell, b: ReportCell) -> bool:
    sa, sb = dict(a.spec), dict(b.spec)
    sa.pop("method"), sb.pop("method")
    return sa == sb


def sparsity_table(cells: list[ReportCell]) -> list[dict[str, Any]]:
    return [{"cell": r.label, "full": _full(r), "rows": r.record.sparsity} for r in cells if r.record.sparsity]


def _full(cell: ReportCell) -> dict[str, Any]:
    rec = cell.record
    task = (rec.sparsity or [])[0]["task"]
    return {"task": task, "pass@1": rec.metrics[task].metric("pass@1"), "relative_l2": (rec.drift or {})["relative_l2"]}


def entropy_table(cells: list[ReportCell]) -> list[dict[str, Any]]:
    rows = []
    for rec in cells:
        metrics = rec.record.metrics
        rows.append(
            {
                "cell": rec.label,
                "eval": {t: m.entropy for t, m in metrics.items()},
                "answer_entropy": {t: m.answer_entropy for t, m in metrics.items()},
                "probe": rec.record.train.get("probe"),
                "diversity": rec.record.diversity,
            }
        )
    return rows


def build(run_dir: Path, iters: int = 2000) -> dict[str, Any]:
    """All of the report's numbers, as plain data (what `--json` prints)."""
    cells = load_run(run_dir)
    many_budgets = len({c.spec["budget"] for c in cells if not c.is_base}) > 1
    many_seeds = len({c.spec["seed"] for c in cells}) > 1
    cells.sort(key=lambda c: (c.model, not c.is_base, c.record.cell["name"]))
    for c in cells:
        c.label = label(c, many_budgets, many_seeds)
    ks = report_ks(cells)
    data = {
        "run_dir": str(run_dir),
        "cells": len(cells),
        "accuracy": accuracy(cells, ks),
        "forgetting": forgetting(cells, ks, iters),
        "drift": drift_table(cells),
        "bf16": bf16_pairs(cells),
        "sparsity": sparsity_table(cells),
        "entropy": entropy_table(cells),
        "curves": _curves(cells),
        "experiments": report_experiments.build(cells),
        "compute": report_compute.build(cells, ks),
        # the paper's claims C1-C6: fixed resamples and seed, not `iters`
        "claims": claims.evaluate([c.record.as_dict() for c in cells]),
    }
    return data


def _curves(cells: list[ReportCell]) -> dict[str, Any]:
    out: dict[str, Any] = {"passk": {}, "training": {}}
    for rec in cells:
        out["passk"][rec.label] = {
            t: {k: m.metric(f"pass@{k}") for k in rec.spec["eval"]["k"]} for t, m in rec.record.metrics.items()
        }
        if rec.train_logged:
            rows = rec.train
            out["training"][rec.label] = {
                "reward": [(r.update, r.reward_mean) for r in rows if r.reward_mean is not None],
                "probe_entropy": [(r.update, r.probe.entropy) for r in rows if r.probe is not None],
                "probe_success": [(r.update, r.probe.success) for r in rows if r.probe is not None],
            }
    return out


def render_markdown(data: dict[str, Any]) -> str:
    """report.md's tables: report_render's sections, then the compute view's."""
    return "\n".join(report_render.markdown_sections(data) + report_compute.markdown(data.get("compute")))


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    """report_render's plots, then the compute view's."""
    return report_render.plots(data, out_dir) + report_compute.plot(data.get("compute"), out_dir)


def write_report(run_dir: Path, out_dir: Path | None = None, iters: int = 2000) -> tuple[dict[str, Any], Path]:
    data = build(run_dir, iters)
    out_dir = out_dir or Path(run_dir) / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    data["plots"] = [str(p) for p in plots(data, out_dir)]
    md = render_markdown(data) + "\n" + "\n".join(f"![{Path(p).stem}]({Path(p).name})" for p in data["plots"]) + "\n"
    path = out_dir / "report.md"
    atomic_write_text(path, md)
    atomic_write_text(out_dir / "report.json", json.dumps(data, indent=1) + "\n")
    return data, path
