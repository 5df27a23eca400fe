"""The drawing half of `esbench report`: report.md's Markdown tables and the PNG plots, from `build()`'s data.

Everything here reads only the plain data dict that report.py's `build` returns (what `--json` prints), never a
record or a per-sample log, so every number is settled before any of it is formatted. report.py holds the loading
and the numbers, and its `render_markdown` and `plots` join these with the compute view's (report_compute.py, which
draws with `_md` and `_save` from here).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from esbench import claims


def _fmt(x: float | None, scale: float = 100.0, digits: int = 1, sign: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x * scale:+.{digits}f}" if sign else f"{x * scale:.{digits}f}"


def _md(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# markdown


def _drift_md(dr: dict[str, Any]) -> list[str]:
    """Table 4's layout: the saved-weights drift per cell, the fp32 master's and the paper's values beside it."""
    if not dr["rows"]:
        return []
    out: list[str] = []
    out += ["## Parameter drift (paper Table 4 layout)", ""]
    out += [
        "Relative L2 ‖θ−θ₀‖/‖θ₀‖ in fp32, ×1e-2, of the weights as saved (the suite's dtype, against θ₀ as "
        "loaded: the paper's figures are bf16 checkpoints); the fp32 master's beside it where the cell has one.",
        "",
    ]
    for ratio in dr["es_over_grpo"]:
        bf16 = ratio["es_precision"] != "fp32-master"
        paper = "paper: 40.7–44.1×, measured on bf16 ES" if bf16 else "exact arithmetic; the paper has no such row"
        if bf16 and ratio.get("paper_ratio") is not None:
            paper = f"paper: {ratio['paper_ratio']:.1f}× for this model (40.7–44.1×), measured on bf16 ES"
        value = "–" if ratio["ratio"] is None else f"**{ratio['ratio']:.1f}×**"
        master = "" if ratio.get("ratio_master") is None else f"; fp32 masters {ratio['ratio_master']:.1f}×"
        grpo = "GRPO" if ratio.get("grpo_method", "grpo") == "grpo" else "GRPO checkpoint"
        out.append(
            f"- **{ratio['model']}**, ES {ratio['es_precision']}: ES {ratio['es'] * 100:.4f} vs {grpo} "
            f"{ratio['grpo'] * 100:.4f}: ES/GRPO = {value}{master} ({paper})"
        )
    groups = sorted({g for r in dr["rows"] for g in r["groups"]})
    header = [
        "cell",
        "weights",
        "rel. L2 ×1e-2",
        "max abs Δθ",
        "changed",
        "rounding",
        "fp32 master: rel. L2 ×1e-2, max abs Δθ, changed",
        "paper: rel. L2 ×1e-2, max abs Δθ",
        *[f"{g} share (top-100)" for g in groups],
    ]
    rows = []
    for r in dr["rows"]:
        gs = [
            f"{r['groups'][g]['share'] * 100:.1f}% ({r['groups'][g]['top']})" if g in r["groups"] else "–"
            for g in groups
        ]
        rnd = "–" if r["rounding_share"] is None else f"{r['rounding_share'] * 100:.2f}%"
        m, p = r.get("master"), r.get("paper") or {}
        master = "–"
        if m:
            master = f"{m['relative_l2'] * 100:.4f}, {_delta(m['max_abs_delta'])}, {m['changed_fraction'] * 100:.1f}%"
        ref = [f"{p['relative_l2'] * 100:.4f}" if "relative_l2" in p else "", _delta(p.get("max_abs_delta"))]
        weights = r.get("weights") or "as trained"
        if r.get("against"):
            weights += f" vs {r['against']}"
        rows.append(
            [
                r["cell"],
                weights,
                f"{r['relative_l2'] * 100:.4f}",
                _delta(r["max_abs_delta"]),
                f"{r['changed_fraction'] * 100:.1f}%",
                rnd,
                master,
                ", ".join(x for x in ref if x) or "–",
                *gs,
            ]
        )
    out += ["", _md(header, rows), ""]
    out += [
        "Group share = share of ‖Δθ‖²; (n) = how many of the 100 largest |Δθ| fall in the group (saved weights). "
        "`as trained`: a record from before saved-weights drift (GRPO's fp32 master). Paper: Table 4 and its text "
        "(max |Δθ| stated for Llama-3.2-3B and DeepSeek-R1-Distill-1.5B only).",
        "",
    ]
    return out


def _delta(x: float | None) -> str:
    """A |Δθ|, with its power of two when it is one (bf16 steps: the paper's 2⁻¹² and 2⁻¹⁰)."""
    if x is None:
        return ""
    mant, exp = math.frexp(x)
    return f"{x:.3g} (2^{exp - 1})" if x > 0 and mant == 0.5 else f"{x:.3g}"


def _ci(b: dict[str, float | None]) -> str:
    if b.get("lo") is None:
        return _fmt(b["delta"], sign=True)
    return f"{_fmt(b['delta'], sign=True)} [{_fmt(b['lo'], sign=True)}, {_fmt(b['hi'], sign=True)}]"


def markdown_sections(data: dict[str, Any]) -> list[str]:
    """report.md's lines, up to the compute view (report.py's `render_markdown` adds it)."""
    acc = data["accuracy"]
    ks, tasks = acc["ks"], acc["tasks"]
    held = set(acc["held_out"])
    out = [f"# esbench report: {data['run_dir']}", "", f"{data['cells']} cells. Percentages; * = held-out task.", ""]
    out += claims_md(data.get("claims"))

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

    out += _drift_md(data["drift"])

    if data["bf16"]:
        out += ["## bf16 artefacts (fp32-master vs a bf16 mode, same configuration)", ""]
        header = [
            "fp32-master",
            "bf16 mode",
            "rel. L2 fp32",
            "rel. L2 bf16",
            "excess drift share",
            "rounding share (bf16 run)",
            "top-100 bf16-step multiples fp32 / bf16",
        ]
        rows = [
            [
                p["fp32"],
                f"{p['bf16']} ({p['bf16_precision']})",
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
            changed = s["rows"][0].get("changed_pct")
            moved = "" if changed is None else f"; {changed:.1f}% of coordinates changed"
            out.append(f"- **{s['cell']}** ({full['task']} Pass@1{moved}): " + " | ".join(parts))
        out += [
            "",
            "Sparsity s_τ (Eq. 16): the share of changed coordinates with |Δθ| ≤ τ, which are reset to θ₀ before "
            "re-evaluating; unchanged coordinates count in neither numerator nor denominator.",
            "",
        ]

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
    if data.get("experiments"):
        out += _experiments_md(data["experiments"])
    return out


def claims_md(data: dict[str, Any] | None) -> list[str]:
    """The paper's claims C1-C6 (`esbench.claims`): each statistic with its CI and verdict, one row a claim."""
    if not data:
        return []
    b = data["bootstrap"]
    out = ["## Paper claims (arXiv 2608.27351)", ""]
    out += [
        f"Per-problem paired differences, {b['level']:.0%} percentile CI from {b['iters']} bootstrap resamples (seed "
        f"{b['seed']}; over seeds, then problems, when there are several seeds). Supported: the CI lies on the "
        "claimed side of the test's threshold; contradicted: entirely on the other side; inconclusive: it crosses. "
        "Definitions: `esbench/claims.py` and docs/analyses.md.",
        "",
    ]
    rows = claims.rows(data)
    many = len({r["group"] for r in rows}) > 1
    header = (["group"] if many else []) + ["claim", "statistic [95 % CI]", "test", "n", "verdict"]
    body = [
        ([r["group"]] if many else [])
        + [f"{r['id']}: {r['claim']}", r["statistic"], r["test"], r["n"], f"**{r['verdict']}**"]
        for r in rows
    ]
    out += [_md(header, [[c.replace("|", "\\|") for c in row] for row in body]), ""]
    return out


def _num(x: float | None, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _experiments_md(ex: dict[str, Any]) -> list[str]:
    """Table 6, training curves (Fig. 1(c)), Table 13 and Fig. 2's probe (report_experiments.py)."""
    out: list[str] = []
    for t in ex["population"]:
        out += [f"## Population sweep: {t['model']} (paper Table 6 layout)", ""]
        out += [
            "Mean training reward, debiased EMA (β = 0.99), at each update; (paper value). ≈ marks a population "
            f"within 0.01 of N = {t['reference_population']} (the paper's shading rule).",
            "",
        ]
        header = ["update", *[f"N = {c['population']}" for c in t["cols"]]]
        rows = []
        for u in t["points"]:
            cells = []
            for c in t["cols"]:
                mark = " ≈" if c["matches"][u] and c["population"] != t["reference_population"] else ""
                paper = c["paper"][u]
                cells.append(_num(c["values"][u]) + mark + ("" if paper is None else f" ({paper:.4f})"))
            rows.append([str(u), *cells])
        out += [_md(header, rows), ""]
    curves = ex["reward_curves"]
    if curves:
        out += ["## Training reward (debiased EMA; Fig. 1(c) and Fig. 5 curves)", ""]
        out += ["EMA of the per-update mean reward (β = 0.99, bias-corrected) ± its local SD, at thirds of a run.", ""]
        rows = []
        for cell, c in curves.items():
            n = len(c["ema"])
            idx = sorted({max(0, round(n * f) - 1) for f in (1 / 3, 2 / 3, 1)})
            pts = [f"{c['updates'][i]}: {c['ema'][i]:.4f} ± {c['sd'][i]:.4f}" for i in idx]
            rows.append([cell, " | ".join(pts)])
        out += [_md(["cell", "update: EMA ± local SD"], rows), ""]
    for t in ex["subtraction"]:
        out += [f"## Subtraction diagnostic: {t['cell']} (paper Table 13 layout)", ""]
        out += ["κ < 1: subtracting the baseline reduces variance. (paper value, Qwen2.5-1.5B-Instruct).", ""]
        keys = ["corr_plus_zero", "kappa_base", "corr_plus_minus", "kappa_pair"]
        rows = []
        for r in t["rows"]:
            p = r.get("paper") or {}
            if "undefined" in r:
                vals = [f"undefined: {r['undefined']}"] + [""] * 3
            else:
                vals = [_num(r[k]) + ("" if k not in p else f" ({p[k]:.4f})") for k in keys]
            rows.append([f"{r['sigma']:g}", r["objective"], *vals, str(r["observations"])])
        out += [_md(["σ", "objective", "Corr(X₊,X₀)", "κ_base", "Corr(X₊,X₋)", "κ_pair", "obs."], rows), ""]
    if ex["probe"]:
        out += ["## Held-out probe during training (paper Fig. 2)", ""]
        rows = []
        for cell, c in ex["probe"].items():
            ks = [k for k in c if k.startswith("pass@")]
            pts = [f"{k} {c[k][0]:.3f} → {c[k][-1]:.3f}" for k in ks if c[k][0] is not None]
            rows.append([cell, f"{c['entropy'][0]:.4f} → {c['entropy'][-1]:.4f}", "; ".join(pts) or "–"])
        out += [_md(["cell", "token entropy", "Pass@k first → last"], rows), ""]
    return out


# ---------------------------------------------------------------------------------------------------------------
# plots


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    """The report's PNG plots but the compute view's (report.py's `plots` adds it)."""
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
        ema = (data.get("experiments") or {}).get("reward_curves", {})
        for cell, c in training.items():
            if c["probe_entropy"]:
                a1.plot(*zip(*c["probe_entropy"], strict=True), marker=".", label=cell)
            if cell in ema:  # the debiased EMA with its local-SD band, over the raw per-update reward
                e = ema[cell]
                (line,) = a2.plot(e["updates"], e["ema"], label=cell)
                lo = [m - d for m, d in zip(e["ema"], e["sd"], strict=True)]
                hi = [m + d for m, d in zip(e["ema"], e["sd"], strict=True)]
                a2.fill_between(e["updates"], lo, hi, color=line.get_color(), alpha=0.15)
                a2.plot(e["updates"], e["raw"], color=line.get_color(), alpha=0.3, linewidth=0.6)
        a1.set_title("probe token entropy (nats)")
        a2.set_title("train reward: debiased EMA ± local SD (raw faint)")
        _style((a1, a2), "update")
        paths.append(_save(fig, out_dir / "training.png"))

    ex = data.get("experiments") or {}
    if ex.get("probe"):
        keys = sorted({k for c in ex["probe"].values() for k in c if k.startswith("pass@")}, key=lambda k: int(k[5:]))
        fig, axes = plt.subplots(1, 1 + len(keys), figsize=(4.2 * (1 + len(keys)), 3.6), squeeze=False)
        for cell, c in ex["probe"].items():
            axes[0][0].plot(c["updates"], c["entropy"], marker=".", label=cell)
            for ax, k in zip(axes[0][1:], keys, strict=True):
                if k in c:
                    ax.plot(c["updates"], c[k], marker=".", label=cell)
        axes[0][0].set_title("probe token entropy (nats)")
        for ax, k in zip(axes[0][1:], keys, strict=True):
            ax.set_title(f"probe {k}")
        _style(axes[0], "update")
        paths.append(_save(fig, out_dir / "probe.png"))
    if ex.get("passk_profiles"):
        tasks_p = sorted({t for per in ex["passk_profiles"].values() for t in per})
        fig, axes = plt.subplots(1, len(tasks_p), figsize=(4.2 * len(tasks_p), 3.6), squeeze=False)
        for ax, t in zip(axes[0], tasks_p, strict=True):
            for cell, per in ex["passk_profiles"].items():
                if t in per:
                    ax.plot(range(1, len(per[t]) + 1), per[t], label=cell)
            ax.set_title(f"{t}: Pass@K, K = 1..n")
        _style(axes[0], "K")
        paths.append(_save(fig, out_dir / "passk_profile.png"))

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
