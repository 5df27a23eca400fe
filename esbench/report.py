"""`esbench report RUN_DIR`: the paper's tables and plots for one run, from its records and per-sample logs.

Tables follow the paper's layout (arXiv 2608.27351): Pass@k per task with an Average column (Table 2), Maj@k
(Table 7), held-out change against base with paired-bootstrap CIs (Table 10), relative drift and the ES/GRPO ratio
(Table 4, with per-group shares and where the top-100 |Δθ| fall), thresholded ES (Tables 11-12), entropy
(Fig. 2), population JS diversity, and the bf16 rounding share of paired fp32-master / paper-bf16 cells.
Everything is recomputed from what the records and samples hold; nothing is re-run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from esbench.metrics.bootstrap import paired_bootstrap
from esbench.metrics.passk import majority_correct, pass_at_k
from esbench.records import atomic_write_text

# ---------------------------------------------------------------------------------------------------------------
# loading


def load_run(run_dir: Path) -> list[dict[str, Any]]:
    """Every finished cell under `run_dir` (a suite folder or a folder of suites), with its folder."""
    records = []
    for path in sorted(Path(run_dir).glob("**/record.json")):
        if "submissions" in path.parts:
            continue
        rec = json.loads(path.read_text())
        rec["_dir"] = path.parent
        records.append(rec)
    if not records:
        raise FileNotFoundError(f"no record.json under {run_dir}: nothing to report (run `esbench run` first)")
    return records


def label(rec: dict[str, Any], many_budgets: bool, many_seeds: bool) -> str:
    lab = rec["cell"]["labels"]
    s = rec["cell"]["spec"]
    out = f"{lab['model']}/{lab['method']}"
    if many_budgets and lab["method"] != "base":
        out += f"/b{s['budget']}"
    if many_seeds:
        out += f"/s{s['seed']}"
    return out


def _samples(rec: dict[str, Any], task: str) -> list[dict[str, Any]]:
    path = rec["_dir"] / "samples" / f"{task}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def per_problem(rec: dict[str, Any], task: str, metric: str) -> list[float]:
    """Per-problem values of `pass@k` (from [n, c]) or `maj@k` (from the logged answers) for the bootstrap."""
    kind, k = metric.split("@")
    if kind == "pass":
        return [pass_at_k(n, c, int(k)) for n, c in rec["metrics"][task]["per_problem"]]
    return [float(majority_correct(r["answers"], r["correct"], int(k))) for r in _samples(rec, task)]


# ---------------------------------------------------------------------------------------------------------------
# tables


def _fmt(x: float | None, scale: float = 100.0, digits: int = 1, sign: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x * scale:+.{digits}f}" if sign else f"{x * scale:.{digits}f}"


def _md(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def report_ks(records: list[dict[str, Any]]) -> list[int]:
    """The paper's K columns (1, 16, 32) that this run measured; else 1 and its largest k."""
    common = set.intersection(*(set(r["cell"]["spec"]["eval"]["k"]) for r in records))
    ks = [k for k in (1, 16, 32) if k in common]
    return ks if len(ks) > 1 else sorted({1, max(common)})


def accuracy(records, labels, ks) -> dict[str, Any]:
    tasks = list(records[0]["metrics"])
    rows = []
    for rec in records:
        vals = {t: {f"pass@{k}": rec["metrics"][t].get(f"pass@{k}") for k in ks} for t in tasks}
        for t in tasks:
            for k in ks:
                if k > 1:
                    vals[t][f"maj@{k}"] = rec["metrics"][t].get(f"maj@{k}")
            vals[t]["greedy"] = rec["metrics"][t].get("greedy")
        avg = {m: sum(vals[t][m] for t in tasks) / len(tasks) for m in vals[tasks[0]] if vals[tasks[0]][m] is not None}
        rows.append({"cell": labels[id(rec)], "tasks": vals, "average": avg})
    return {"tasks": tasks, "held_out": records[0].get("held_out", []), "ks": ks, "rows": rows}


def forgetting(records, labels, ks, iters: int = 2000) -> dict[str, Any]:
    """Held-out change against the same model's base cell (same seed when there is one), in Table 10's columns."""
    metrics = [f"pass@{k}" for k in ks] + [f"maj@{k}" for k in ks if k > 1]
    bases = {(r["cell"]["labels"]["model"], r["cell"]["spec"]["seed"]): r for r in records if _is_base(r)}
    any_base = {k[0]: v for k, v in bases.items()}
    rows = []
    for rec in records:
        if _is_base(rec):
            continue
        model = rec["cell"]["labels"]["model"]
        base = bases.get((model, rec["cell"]["spec"]["seed"])) or any_base.get(model)
        if base is None:
            continue
        held = rec.get("held_out", [])
        per_task: dict[str, dict[str, dict[str, float]]] = {}
        for t in held:
            per_task[t] = {
                m: paired_bootstrap(per_problem(base, t, m), per_problem(rec, t, m), iters=iters) for m in metrics
            }
        mean = {}
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
        rows.append({"cell": labels[id(rec)], "base": labels[id(base)], "tasks": per_task, "mean": mean})
    return {"metrics": metrics, "rows": rows}


def _is_base(rec: dict[str, Any]) -> bool:
    return rec["cell"]["spec"]["method"]["kind"] == "base"


def _method_family(rec: dict[str, Any]) -> str:
    m = rec["cell"]["spec"]["method"]
    if m["kind"] == "sequence":
        return "→".join(s["kind"] for s in m["config"]["stages"])
    return m["kind"]


def drift_table(records, labels) -> dict[str, Any]:
    rows = []
    for rec in records:
        if "drift" not in rec:
            continue
        d = rec["drift"]
        rows.append(
            {
                "cell": labels[id(rec)],
                "model": rec["cell"]["labels"]["model"],
                "method": _method_family(rec),
                "precision": _precision(rec) if rec["cell"]["spec"]["method"]["kind"] == "es" else None,
                "relative_l2": d["relative_l2"],
                "max_abs_delta": d["max_abs_delta"],
                "changed_fraction": d["changed_fraction"],
                "rounding_share": d.get("rounding_share"),
                "top_bf16_step_share": d["top_bf16_step_share"],
                "groups": d["groups"],
            }
        )
    ratios = []
    by_model = defaultdict(dict)
    for r in rows:
        if r["method"] in ("es", "grpo") and r["precision"] in (None, "fp32-master"):
            by_model[r["model"]].setdefault(r["method"], []).append(r["relative_l2"])
    for model, d in by_model.items():
        if "es" in d and "grpo" in d:
            es, grpo = sum(d["es"]) / len(d["es"]), sum(d["grpo"]) / len(d["grpo"])
            ratios.append({"model": model, "es": es, "grpo": grpo, "ratio": es / grpo if grpo else None})
    return {"rows": rows, "es_over_grpo": ratios}


def bf16_pairs(records, labels) -> list[dict[str, Any]]:
    """ES cells identical but for `precision`: how much of paper-bf16's drift exact arithmetic does not make."""
    out = []
    es = [r for r in records if r["cell"]["spec"]["method"]["kind"] == "es" and "drift" in r]
    for b in es:
        cfg_b = b["cell"]["spec"]["method"]["config"]
        if _precision(b) != "paper-bf16":
            continue
        for f in es:
            cfg_f = f["cell"]["spec"]["method"]["config"]
            ignore = {"precision": None, "checkpoint_every": None}  # operational, not part of the configuration
            same = {**cfg_f, **ignore} == {**cfg_b, **ignore}
            if _precision(f) == "fp32-master" and same and _same_but_method(f, b):
                db, df = b["drift"], f["drift"]
                out.append(
                    {
                        "fp32": labels[id(f)],
                        "bf16": labels[id(b)],
                        "relative_l2_fp32": df["relative_l2"],
                        "relative_l2_bf16": db["relative_l2"],
                        "excess_share": 1 - (df["l2"] / db["l2"]) ** 2 if db["l2"] else None,
                        "rounding_share_bf16": db.get("rounding_share"),
                        "top_step_share_fp32": df["top_bf16_step_share"],
                        "top_step_share_bf16": db["top_bf16_step_share"],
                    }
                )
    return out


def _precision(rec) -> str:
    return rec["cell"]["spec"]["method"]["config"].get("precision", "fp32-master")


def _same_but_method(a, b) -> bool:
    sa, sb = dict(a["cell"]["spec"]), dict(b["cell"]["spec"])
    sa.pop("method"), sb.pop("method")
    return sa == sb


def sparsity_table(records, labels) -> list[dict[str, Any]]:
    return [{"cell": labels[id(r)], "full": _full(r), "rows": r["sparsity"]} for r in records if r.get("sparsity")]


def _full(rec) -> dict[str, Any]:
    task = rec["sparsity"][0]["task"]
    return {"task": task, "pass@1": rec["metrics"][task]["pass@1"], "relative_l2": rec["drift"]["relative_l2"]}


def entropy_table(records, labels) -> list[dict[str, Any]]:
    rows = []
    for rec in records:
        rows.append(
            {
                "cell": labels[id(rec)],
                "eval": {t: m.get("entropy") for t, m in rec["metrics"].items()},
                "answer_entropy": {t: m.get("answer_entropy") for t, m in rec["metrics"].items()},
                "probe": rec.get("train", {}).get("probe"),
                "diversity": rec.get("diversity"),
            }
        )
    return rows


def build(run_dir: Path, iters: int = 2000) -> dict[str, Any]:
    """All of the report's numbers, as plain data (what `--json` prints)."""
    records = load_run(run_dir)
    many_budgets = len({r["cell"]["spec"]["budget"] for r in records if not _is_base(r)}) > 1
    many_seeds = len({r["cell"]["spec"]["seed"] for r in records}) > 1
    records.sort(key=lambda r: (r["cell"]["labels"]["model"], not _is_base(r), r["cell"]["name"]))
    labels = {id(r): label(r, many_budgets, many_seeds) for r in records}
    ks = report_ks(records)
    data = {
        "run_dir": str(run_dir),
        "cells": len(records),
        "accuracy": accuracy(records, labels, ks),
        "forgetting": forgetting(records, labels, ks, iters),
        "drift": drift_table(records, labels),
        "bf16": bf16_pairs(records, labels),
        "sparsity": sparsity_table(records, labels),
        "entropy": entropy_table(records, labels),
        "curves": _curves(records, labels),
    }
    return data


def _curves(records, labels) -> dict[str, Any]:
    out: dict[str, Any] = {"passk": {}, "training": {}}
    for rec in records:
        out["passk"][labels[id(rec)]] = {
            t: {k: m[f"pass@{k}"] for k in rec["cell"]["spec"]["eval"]["k"]} for t, m in rec["metrics"].items()
        }
        path = rec["_dir"] / "train.jsonl"
        if path.exists():
            rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            out["training"][labels[id(rec)]] = {
                "reward": [(r["update"], r["reward_mean"]) for r in rows if "reward_mean" in r],
                "probe_entropy": [(r["update"], r["probe"]["entropy"]) for r in rows if "probe" in r],
                "probe_success": [(r["update"], r["probe"]["success"]) for r in rows if "probe" in r],
            }
    return out


# ---------------------------------------------------------------------------------------------------------------
# markdown


def _ci(b: dict[str, float | None]) -> str:
    if b.get("lo") is None:
        return _fmt(b["delta"], sign=True)
    return f"{_fmt(b['delta'], sign=True)} [{_fmt(b['lo'], sign=True)}, {_fmt(b['hi'], sign=True)}]"


def render_markdown(data: dict[str, Any]) -> str:
    acc = data["accuracy"]
    ks, tasks = acc["ks"], acc["tasks"]
    held = set(acc["held_out"])
    out = [f"# esbench report: {data['run_dir']}", "", f"{data['cells']} cells. Percentages; * = held-out task.", ""]

    cols = [f"@{k}" for k in ks]
    out += [f"## Pass@k per task (paper Table 2 layout: {' '.join(cols)})", ""]
    header = ["cell", *[t + ("*" if t in held else "") for t in tasks], "Average"]
    rows = []
    for r in acc["rows"]:
        cells = [" ".join(_fmt(r["tasks"][t][f"pass@{k}"]) for k in ks) for t in tasks]
        rows.append([r["cell"], *cells, " ".join(_fmt(r["average"].get(f"pass@{k}")) for k in ks)])
    out += [_md(header, rows), ""]

    mk = [k for k in ks if k > 1]
    out += [f"## Maj@k and greedy (paper Table 7 layout: {' '.join(f'M@{k}' for k in mk)} | greedy)", ""]
    rows = []
    for r in acc["rows"]:
        cells = [
            " ".join(_fmt(r["tasks"][t].get(f"maj@{k}")) for k in mk) + f" \\| {_fmt(r['tasks'][t]['greedy'])}"
            for t in tasks
        ]
        rows.append([r["cell"], *cells])
    out += [_md(header[:-1], rows), ""]

    fg = data["forgetting"]
    if fg["rows"]:
        names = [m.replace("pass@", "Δ@").replace("maj@", "ΔM@") for m in fg["metrics"]]
        out += ["## Held-out change against base, pp (paper Table 10 layout)", ""]
        out += ["Mean over held-out tasks, with a 95 % paired-bootstrap CI over problems.", ""]
        out += [_md(["cell", *names], [[r["cell"], *[_ci(r["mean"][m]) for m in fg["metrics"]]] for r in fg["rows"]])]
        out += ["", "Per held-out task:", ""]
        rows = [[r["cell"], t, *[_ci(r["tasks"][t][m]) for m in fg["metrics"]]] for r in fg["rows"] for t in r["tasks"]]
        out += [_md(["cell", "task", *names], rows), ""]

    dr = data["drift"]
    if dr["rows"]:
        out += ["## Parameter drift (paper Table 4 layout)", ""]
        out += ["Relative L2 ‖θ−θ₀‖/‖θ₀‖ in fp32, ×1e-2.", ""]
        for ratio in dr["es_over_grpo"]:
            out.append(
                f"- **{ratio['model']}**: ES {ratio['es'] * 100:.4f} vs GRPO {ratio['grpo'] * 100:.4f}: "
                f"ES/GRPO = **{ratio['ratio']:.1f}×** (paper: 40.7–44.1×)"
            )
        groups = sorted({g for r in dr["rows"] for g in r["groups"]})
        header = [
            "cell",
            "rel. L2 ×1e-2",
            "max abs Δθ",
            "changed",
            "rounding",
            *[f"{g} share (top-100)" for g in groups],
        ]
        rows = []
        for r in dr["rows"]:
            gs = [
                f"{r['groups'][g]['share'] * 100:.1f}% ({r['groups'][g]['top']})" if g in r["groups"] else "–"
                for g in groups
            ]
            rnd = "–" if r["rounding_share"] is None else f"{r['rounding_share'] * 100:.2f}%"
            rows.append(
                [
                    r["cell"],
                    f"{r['relative_l2'] * 100:.4f}",
                    f"{r['max_abs_delta']:.3g}",
                    f"{r['changed_fraction'] * 100:.1f}%",
                    rnd,
                    *gs,
                ]
            )
        out += ["", _md(header, rows), ""]
        out += ["Group share = share of ‖Δθ‖²; (n) = how many of the 100 largest |Δθ| fall in the group.", ""]

    if data["bf16"]:
        out += ["## bf16 artefacts (fp32-master vs paper-bf16, same configuration)", ""]
        header = [
            "fp32-master",
            "paper-bf16",
            "rel. L2 fp32",
            "rel. L2 bf16",
            "excess drift share",
            "rounding share (bf16 run)",
            "top-100 bf16-step multiples fp32 / bf16",
        ]
        rows = [
            [
                p["fp32"],
                p["bf16"],
                f"{p['relative_l2_fp32'] * 100:.4f}",
                f"{p['relative_l2_bf16'] * 100:.4f}",
                _fmt(p["excess_share"]) + "%",
                _fmt(p["rounding_share_bf16"], digits=2) + "%",
                f"{p['top_step_share_fp32'] * 100:.0f}% / {p['top_step_share_bf16'] * 100:.0f}%",
            ]
            for p in data["bf16"]
        ]
        out += [_md(header, rows), ""]
        out += [
            "Excess drift share = 1 − ‖Δ_fp32‖²/‖Δ_bf16‖². Rounding share = ‖θ − θ_ideal‖²/‖θ − θ₀‖², θ_ideal "
            "being the fp32 trajectory of the same updates. A bf16-step multiple is a change of a whole number of "
            "bf16 steps.",
            "",
        ]

    if data["sparsity"]:
        out += ["## Functional sparsity (paper Tables 11-12 layout)", ""]
        for s in data["sparsity"]:
            full = s["full"]
            parts = [f"Full 0.00% {_fmt(full['pass@1'], digits=2)}"]
            for r in s["rows"]:
                d = "" if r["delta_vs_full"] is None else f" ({_fmt(r['delta_vs_full'], digits=2, sign=True)})"
                parts.append(f"τ={r['tau']:g}: {r['sparsity_pct']:.2f}% {_fmt(r['pass@1'], digits=2)}{d}")
            out.append(f"- **{s['cell']}** ({full['task']} Pass@1): " + " | ".join(parts))
        out.append("")

    out += ["## Entropy and diversity", ""]
    out += [
        "Token entropy: nats per response token of the full next-token distribution, teacher-forced on the sampled "
        "eval responses. Answer entropy: bits over answer clusters of each problem's samples. Probe: the fixed "
        "training probe, first → last. JS: the σ-population around the final weights.",
        "",
    ]
    header = ["cell", *[f"{t} tok / ans" for t in tasks], "probe entropy", "probe success", "JS_succ", "JS_ans"]
    rows = []
    for r in data["entropy"]:
        cells = [
            f"{_fmt(r['eval'][t], 1, 4)} / {_fmt(r['answer_entropy'][t], 1, 3)}"
            if r["eval"].get(t) is not None
            else f"– / {_fmt(r['answer_entropy'][t], 1, 3)}"
            for t in tasks
        ]
        p = r["probe"]
        pe = f"{p['entropy_first']:.4f} → {p['entropy_last']:.4f}" if p else "–"
        ps = f"{p['success_first']:.2f} → {p['success_last']:.2f}" if p else "–"
        dv = r["diversity"]
        rows.append([r["cell"], *cells, pe, ps, _fmt(dv and dv["js_succ"], 1, 4), _fmt(dv and dv["js_answers"], 1, 4)])
    out += [_md(header, rows), ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------------------
# plots


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    tasks = data["accuracy"]["tasks"]
    curves = data["curves"]["passk"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
    for ax, t in zip(axes[0], tasks, strict=True):
        for cell, per_task in curves.items():
            ks = sorted(int(k) for k in per_task[t])
            ax.plot(ks, [per_task[t][k] for k in ks], marker="o", label=cell)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel("Pass@k")
        ax.set_title(t + (" (held out)" if t in data["accuracy"]["held_out"] else ""))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    paths.append(_save(fig, out_dir / "passk.png"))

    training = data["curves"]["training"]
    if training:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
        for cell, c in training.items():
            if c["probe_entropy"]:
                a1.plot(*zip(*c["probe_entropy"], strict=True), marker=".", label=cell)
            if c["reward"]:
                a2.plot(*zip(*c["reward"], strict=True), label=cell)
        a1.set_title("probe token entropy (nats)")
        a2.set_title("train reward (mean over rollouts)")
        _style((a1, a2), "update")
        paths.append(_save(fig, out_dir / "training.png"))

    rows = data["drift"]["rows"]
    if rows:
        groups = sorted({g for r in rows for g in r["groups"]})
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2, 1]})
        bottom = [0.0] * len(rows)
        for g in groups:
            vals = [r["groups"].get(g, {}).get("share", 0.0) * 100 for r in rows]
            a1.bar([r["cell"] for r in rows], vals, bottom=bottom, label=g)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        a1.set_ylabel("share of ‖Δθ‖² (%)")
        a1.set_title("drift by parameter group")
        a1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        a1.tick_params(axis="x", labelrotation=20, labelsize=7)
        a2.bar([r["cell"] for r in rows], [r["relative_l2"] * 100 for r in rows], color="gray")
        a2.set_yscale("log")
        a2.set_title("relative L2 drift (×1e-2)")
        a2.tick_params(axis="x", labelrotation=20, labelsize=7)
        paths.append(_save(fig, out_dir / "drift.png"))

    if data["sparsity"]:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
        for s in data["sparsity"]:
            taus = [0.0] + [r["tau"] for r in s["rows"]]
            a1.plot(taus, [0.0] + [r["sparsity_pct"] for r in s["rows"]], marker="o", label=s["cell"])
            a2.plot(taus, [s["full"]["pass@1"]] + [r["pass@1"] for r in s["rows"]], marker="o", label=s["cell"])
        a1.set_title("sparsity: coordinates dropped (%)")
        a2.set_title("Pass@1 of thresholded update")
        _style((a1, a2), "τ (|Δθ| threshold)")
        paths.append(_save(fig, out_dir / "sparsity.png"))
    return paths


def _style(axes, xlabel: str) -> None:
    for a in axes:
        a.set_xlabel(xlabel)
        a.grid(alpha=0.3)
        a.legend(fontsize=7)


def _save(fig, path: Path) -> Path:
    """Render to a temp name and rename, like every other esbench output: a plot is never half-written."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path


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
