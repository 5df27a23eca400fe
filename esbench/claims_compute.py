"""Each of the paper's claims measured on one group of cells: its parts, their CIs and verdicts (`measure`).

The thresholds live here with the code that applies them; the claims' statement (ids, texts, tests) and the
evaluation of a run are above, in `esbench.claims`, which calls `measure` once a claim and a group. Below, the
cell matching and the bootstrap (`esbench.claims_stats`) know no claim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from esbench.claims_stats import (
    BASE,
    BOOTSTRAP_SEED,
    CONTRADICTED,
    ES,
    ES_GRPO,
    GRPO,
    INCONCLUSIVE,
    LEVEL,
    NOT_MEASURABLE,
    ROLE_NAMES,
    SUPPORTED,
    Group,
    Values,
    entropy_values,
    held_tasks,
    paired,
    pass_values,
    train_tasks,
    verdict,
)
from esbench.metrics.bootstrap import hierarchical_bootstrap

KS = (16, 32)  # the paper's Pass@K columns
C2_MARGIN = 0.01  # 1 pp: "at or above" as non-inferiority
C3_MARGIN = 0.10  # share of base's mean token entropy that ES may lose and still "not fall"
C4_THRESHOLD = 10.0  # "many times": ES/GRPO relative L2 above 10x
C5_MARGIN = 0.02  # 2 pp: "about" as non-inferiority


def _missing(name: str, note: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "verdict": NOT_MEASURABLE, "value": None, "lo": None, "hi": None, "note": note, **extra}


def _diff(a: str, b: str) -> Callable[[dict[str, list[float]]], list[float]]:
    return lambda v: [x - y for x, y in zip(v[a], v[b], strict=True)]


def _part(name: str, ci: dict[str, Any] | str, threshold: float, side: str, unit: str, **extra: Any) -> dict[str, Any]:
    if isinstance(ci, str):
        return _missing(name, ci, threshold=threshold, side=side, unit=unit, **extra)
    return {"name": name, **ci, "threshold": threshold, "side": side, "unit": unit, **extra} | {
        "verdict": verdict(ci["lo"], ci["hi"], threshold, side)
    }


def _pass_at(k: int) -> Values:
    """A cell's per-problem Pass@k on a task (`pass_values`), as the `values` of `paired`."""
    return lambda r, t: pass_values(r, t, k)


# ---------------------------------------------------------------------------------------------------------------
# the claims


def _need(g: Group, kinds: Sequence[str]) -> tuple[list[int], str | None]:
    seeds = g.seeds(kinds)
    if seeds:
        return seeds, None
    have = sorted({ROLE_NAMES[k] for cells in g.by_seed.values() for k in cells})
    want = [ROLE_NAMES[k] for k in kinds]
    return [], f"needs {' + '.join(want)} cells of one seed; the group has {', '.join(have) or 'none'}"


def _c1(g: Group, iters: int) -> dict[str, Any]:
    kinds = [GRPO, ES]
    seeds, why = _need(g, kinds)
    if why:
        return {"parts": [_missing("Pass@1(GRPO) − Pass@1(ES)", why)]}
    tasks, where = train_tasks(g, seeds, kinds)
    ci = paired(g, seeds, tasks, _pass_at(1), _diff(GRPO, ES), kinds, iters)
    out: dict[str, Any] = {"parts": [_part("Pass@1(GRPO) − Pass@1(ES)", ci, 0.0, ">", "fraction")], "where": where}
    out["cells"] = g.names(kinds, seeds)
    _add_gains_over_base(out, g, tasks, _pass_at(1), (GRPO, ES), "ΔPass@1({})", kinds, iters)
    return out


def _add_gains_over_base(out: dict, g: Group, tasks, values, order, label: str, kinds, iters: int) -> None:
    """Each method's own gain over base as `context` (C1, C6 need no base: it cancels), where the seeds allow."""
    with_base = g.seeds([*order, BASE])
    if not with_base:
        return
    out["context"] = [
        _part(
            label.format(f"{ROLE_NAMES[kind]}−base"),
            paired(g, with_base, tasks, values, _diff(kind, BASE), [kind, BASE], iters),
            0.0,
            ">",
            "fraction",
        )
        for kind in order
    ]
    out["cells"] = g.names([BASE, *kinds], with_base)


def _c2(g: Group, k: int, iters: int) -> dict[str, Any]:
    kinds = [ES, GRPO]
    name = f"Pass@{k}(ES) − Pass@{k}(GRPO)"
    seeds, why = _need(g, kinds)
    if why:
        return {"parts": [_missing(name, why)]}
    tasks, where = train_tasks(g, seeds, kinds)
    if _unmeasured_k(g, seeds, kinds, tasks, k):
        ci: dict[str, Any] | str = f"Pass@{k} not measurable: fewer than {k} samples per problem"
    else:
        ci = paired(g, seeds, tasks, _pass_at(k), _diff(ES, GRPO), kinds, iters)
    return {
        "parts": [_part(name, ci, -C2_MARGIN, ">", "fraction")],
        "where": where,
        "cells": g.names(kinds, seeds),
    }


def _unmeasured_k(g: Group, seeds, kinds, tasks, k: int) -> bool:
    """Pass@k is measurable from `[n, c]` wherever every problem has n ≥ k samples (listed in eval.k or not)."""
    return any(pass_values(g.by_seed[s][kind], t, k) is None for s in seeds for kind in kinds for t in tasks)


def _c3(g: Group, iters: int) -> dict[str, Any]:
    kinds = [BASE, GRPO, ES]
    names = ["H(GRPO) − H(base)", "H(ES) − H(base)"]
    seeds, why = _need(g, kinds)
    if why:
        return {"parts": [_missing(n, why) for n in names]}
    held = held_tasks(g, seeds, kinds)
    tasks, where = (held, "held-out tasks") if held else (list(g.by_seed[seeds[0]][BASE]["metrics"]), "all tasks")
    cells = g.names(kinds, seeds)
    recs = [g.by_seed[s][k] for s in seeds for k in kinds]
    if any("entropy" not in (r["metrics"].get(t) or {}) for r in recs for t in tasks):
        why = "no token entropy in the records (eval.entropy off)"
        return {"parts": [_missing(n, why) for n in names], "where": where, "cells": cells}
    if any("entropy_per_problem" not in r["metrics"][t] for r in recs for t in tasks):
        return {"parts": _scalar_entropy(g, seeds, tasks, names), "where": where, "cells": cells}
    grpo = paired(g, seeds, tasks, entropy_values, _diff(GRPO, BASE), kinds, iters)
    es = paired(g, seeds, tasks, entropy_values, _diff(ES, BASE), kinds, iters)
    base = paired(g, seeds, tasks, entropy_values, lambda v: v[BASE], kinds, iters)
    margin = -C3_MARGIN * base["value"] if isinstance(base, dict) else 0.0
    return {
        "parts": [_part(names[0], grpo, 0.0, "<", "nats"), _part(names[1], es, margin, ">", "nats")],
        "where": where,
        "cells": cells,
    }


def _scalar_entropy(g: Group, seeds, tasks, names) -> list[dict[str, Any]]:
    """Records from before per-problem entropy: the point difference of the task means, with no CI."""
    out = []
    for name, kind in zip(names, (GRPO, ES), strict=True):
        d = [
            g.by_seed[s][kind]["metrics"][t]["entropy"] - g.by_seed[s][BASE]["metrics"][t]["entropy"]
            for s in seeds
            for t in tasks
        ]
        part = _missing(name, "no per-problem evidence (records from before per-problem entropy): no CI", unit="nats")
        out.append({**part, "value": sum(d) / len(d), "verdict": INCONCLUSIVE, "n_seeds": len(seeds)})
    return out


def _c4(g: Group, iters: int) -> dict[str, Any]:
    kinds = [ES, GRPO]
    name = "relative L2 drift ES / GRPO"
    seeds, why = _need(g, kinds)
    if why:
        return {"parts": [_missing(name, why, unit="ratio")]}
    cells = g.names(kinds, seeds)
    drifts: dict[int, list[Any]] = {s: [g.by_seed[s][k].get("drift") for k in kinds] for s in seeds}
    seeds = [s for s in seeds if all(d and d.get("relative_l2") for d in drifts[s])]
    if not seeds:
        return {"parts": [_missing(name, "no drift in the ES and GRPO records", unit="ratio")], "cells": cells}
    ratios = [drifts[s][0]["relative_l2"] / drifts[s][1]["relative_l2"] for s in seeds]
    part: dict[str, Any] = {
        "name": name,
        "threshold": C4_THRESHOLD,
        "side": ">",
        "unit": "ratio",
        "n_seeds": len(seeds),
    }
    weights = {d.get("weights") for s in seeds for d in drifts[s]} - {None}
    part["weights"] = ", ".join(sorted(weights)) or "as trained (records from before saved-weights drift)"
    if len(seeds) == 1:
        part.update(value=ratios[0], lo=None, hi=None, note="no CI (one seed)")
        part["verdict"] = SUPPORTED if ratios[0] > C4_THRESHOLD else CONTRADICTED
    else:
        ci = hierarchical_bootstrap([[[r]] for r in ratios], iters=iters, seed=BOOTSTRAP_SEED, level=LEVEL)
        part.update(value=ci["delta"], lo=ci["lo"], hi=ci["hi"], se=ci["se"])
        part["ci"] = f"{LEVEL:.0%} percentile CI, {iters} resamples of seeds (seed {BOOTSTRAP_SEED})"
        part["verdict"] = verdict(ci["lo"], ci["hi"], C4_THRESHOLD, ">")
    out: dict[str, Any] = {"parts": [part], "cells": g.names(kinds, seeds)}
    masters: list[list[Any]] = [[(d.get("master") or {}).get("relative_l2") for d in drifts[s]] for s in seeds]
    if all(a and b for a, b in masters):
        value = sum(a / b for a, b in masters) / len(masters)
        out["context"] = [{"name": "fp32 masters ES / GRPO", "value": value, "unit": "ratio", "lo": None, "hi": None}]
    return out


def _c5(g: Group, iters: int) -> dict[str, Any]:
    kinds = [ES_GRPO, GRPO, ES]
    seeds, why = _need(g, kinds)
    if why:
        return {"parts": [_missing("ES→GRPO vs GRPO and ES", why)]}
    tasks, where = train_tasks(g, seeds, kinds)
    ci = paired(g, seeds, tasks, _pass_at(1), _diff(ES_GRPO, GRPO), kinds, iters)
    parts = [_part("Pass@1(ES→GRPO) − Pass@1(GRPO)", ci, -C5_MARGIN, ">", "fraction")]
    for k in KS:
        if not _unmeasured_k(g, seeds, kinds, tasks, k):
            ci = paired(g, seeds, tasks, _pass_at(k), _diff(ES_GRPO, ES), kinds, iters)
            parts.append(_part(f"Pass@{k}(ES→GRPO) − Pass@{k}(ES)", ci, -C5_MARGIN, ">", "fraction"))
    if len(parts) == 1:
        parts.append(_missing("Pass@K(ES→GRPO) − Pass@K(ES)", f"Pass@K not measurable for K in {list(KS)}"))
    return {"parts": parts, "where": where, "cells": g.names(kinds, seeds)}


def _c6(g: Group, k: int, iters: int) -> dict[str, Any]:
    kinds = [ES, GRPO]
    name = f"ΔPass@{k}(ES−base) − ΔPass@{k}(GRPO−base), held-out mean"
    seeds, why = _need(g, kinds)
    if why:
        return {"parts": [_missing(name, why)]}
    tasks = held_tasks(g, seeds, kinds)
    if not tasks:
        return {"parts": [_missing(name, "no held-out task")], "cells": g.names(kinds, seeds)}
    if _unmeasured_k(g, seeds, kinds, tasks, k):
        return {"parts": [_missing(name, f"Pass@{k} not measurable: fewer than {k} samples per problem")]}
    values = _pass_at(k)
    out = {
        "parts": [_part(name, paired(g, seeds, tasks, values, _diff(ES, GRPO), kinds, iters), 0.0, ">", "fraction")],
        "where": "held-out tasks",
        "cells": g.names(kinds, seeds),
    }
    _add_gains_over_base(out, g, tasks, values, (ES, GRPO), f"ΔPass@{k}({{}}), held-out mean", kinds, iters)
    return out


def measure(cid: str, g: Group, iters: int) -> dict[str, Any]:
    """Claim `cid` on group `g`: its `parts` (the first is its headline statistic) and, where it has them, `where`,
    `cells` and `context`."""
    if cid == "C1":
        return _c1(g, iters)
    if cid.startswith("C2@"):
        return _c2(g, int(cid[3:]), iters)
    if cid == "C3":
        return _c3(g, iters)
    if cid == "C4":
        return _c4(g, iters)
    if cid == "C5":
        return _c5(g, iters)
    return _c6(g, int(cid[3:]), iters)
