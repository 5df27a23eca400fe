"""The paper's headline claims, stated once, and their verdicts on a run's records.

Ba et al., "Understanding Evolution Strategies for LLM Reasoning: Broader Reasoning Coverage than GRPO"
(arXiv 2608.27351). Each claim is a statistic with a direction and a test, computed from the records' per-problem
evidence only (`metrics[task].per_problem`, `metrics[task].entropy_per_problem`, `drift`), so `esbench report`, the
leaderboard and the demo's summary give the same verdict for the same records.

Cells. A *group* is one model × train dataset × budget (the report's labels). Within a group, cells are matched by
seed and method (`grid.method_key`): `es`, `grpo` and `sequence:es,grpo` (ES→GRPO); the `base` cell is the same
model's base of the same seed, else any base of that model (as the forgetting table does). A group with no trained
GRPO takes the model's `checkpoint` cell the same way (the hard setting's GRPO row is a released checkpoint).
Where a group has two cells of one method (say fp32-master and paper-bf16 ES), the one labelled like the method
(`es`, `grpo`, `es-grpo`) is used, else the first by name; the others are listed as `unused`.

Per problem. Pass@k of a problem is the unbiased estimator (`metrics.passk.pass_at_k`) on its `[n, c]`; its token
entropy is the token-weighted mean over its n sampled responses. A difference is paired: the same problem under
the two cells (same seed). `Pass@k(A) − Pass@k(B)` below is the mean over problems of those per-problem differences.

The statistics (Pass@k differences as fractions; the tables print percentage points):

- C1, GRPO raises Pass@1 over base more than ES does: ΔPass@1(GRPO − base) − ΔPass@1(ES − base) > 0 on the
  training task's eval (the train dataset's task; if it is not evaluated, every non-held-out task). Per problem the
  base cancels exactly, so this is Pass@1(GRPO) − Pass@1(ES); the two gains over base are given as context.
- C2@K, ES keeps Pass@K at or above GRPO's, K = 16 and 32 where measured, each its own row: Pass@K(ES) −
  Pass@K(GRPO) ≥ −1 pp (non-inferiority margin `C2_MARGIN`) on the training task's eval.
- C3, GRPO's token entropy falls below base and ES's does not, on the held-out tasks (paper Fig. 2 reads held-out
  GPQA; all eval tasks if none is held out), two parts: H(GRPO) − H(base) < 0, and H(ES) − H(base) ≥ −m with m =
  `C3_MARGIN` (10 %) of base's mean entropy over the same problems. Records from before per-problem entropy give
  the scalar difference with no CI and the verdict "inconclusive" (no per-problem evidence).
- C4, ES's parameter drift is many times GRPO's: relative L2 ‖θ−θ₀‖/‖θ₀‖ of the saved weights (`drift`), ES / GRPO
  > `C4_THRESHOLD` (10×; the paper's Table 4 has 40.7–44.1×). It is one number per seed, not per problem: with
  several seeds the CI resamples seeds; with one it is the point value, "no CI (one seed)".
- C5, ES→GRPO reaches about GRPO's Pass@1 and about ES's Pass@K, parts: Pass@1(ES→GRPO) − Pass@1(GRPO) ≥ −2 pp and
  Pass@K(ES→GRPO) − Pass@K(ES) ≥ −2 pp for K = 16, 32 where measured (margin `C5_MARGIN`; the paper's own gaps are
  −1.7 to +0.8 pp), on the training task's eval.
- C6@K, held-out forgetting is smaller for ES than for GRPO: the mean over held-out tasks (each task weighs the
  same) of ΔPass@K(ES − base) − ΔPass@K(GRPO − base) > 0, K = 16 and 32 where measured; again the base cancels per
  problem. Read at Pass@K, not Pass@1, because that is where the paper shows it: Table 10's Δ@1 has GRPO ahead
  for all three models (ES − GRPO −0.7, −0.9, −1.4 pp) and its Δ@16 and Δ@32 have ES ahead (+0.6 to +3.5 pp).

The test. A 95 % percentile CI from `BOOTSTRAP_ITERS` paired resamples with the fixed seed `BOOTSTRAP_SEED`
(`metrics.bootstrap`, so the same records always give the same CI). With one seed the problems are resampled
(`paired_bootstrap`); with several, seeds and then problems within each drawn seed (`hierarchical_bootstrap`), and
tasks are strata of equal weight. Verdicts, against the claim's threshold t (0, or the margin):

- supported: the CI lies on the claimed side of t, excluding it (lower bound > t for "≥"/">", upper < t for "<");
- contradicted: the CI lies entirely on the other side of t;
- inconclusive: the CI contains t (or there is no per-problem evidence to form one);
- not measurable: a cell, a task or a K the statistic needs is missing.

A claim with parts is contradicted if any part is, not measurable if any part is, supported if all are, else
inconclusive.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from esbench.leaderboard.grid import method_key
from esbench.metrics.bootstrap import hierarchical_bootstrap
from esbench.metrics.passk import pass_at_k

BOOTSTRAP_ITERS = 2000
BOOTSTRAP_SEED = 0
LEVEL = 0.95
KS = (16, 32)  # the paper's Pass@K columns
C2_MARGIN = 0.01  # 1 pp: "at or above" as non-inferiority
C3_MARGIN = 0.10  # share of base's mean token entropy that ES may lose and still "not fall"
C4_THRESHOLD = 10.0  # "many times": ES/GRPO relative L2 above 10x
C5_MARGIN = 0.02  # 2 pp: "about" as non-inferiority

SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_MEASURABLE = "supported", "contradicted", "inconclusive", "not measurable"
ES, GRPO, BASE, ES_GRPO = "es", "grpo", "base", "sequence:es,grpo"
ROLE_NAMES = {BASE: "base", ES: "ES", GRPO: "GRPO", ES_GRPO: "ES→GRPO"}
_CANONICAL_LABEL = {BASE: "base", ES: "es", GRPO: "grpo", ES_GRPO: "es-grpo"}


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    statistic: str
    test: str
    paper: str  # where the paper shows it


CLAIMS = [
    Claim(
        "C1",
        "GRPO raises Pass@1 over base more than ES does",
        "ΔPass@1(GRPO−base) − ΔPass@1(ES−base), training task",
        "> 0",
        "Table 2 GSM8K @1; Table 3 Average @1",
    ),
    *[
        Claim(
            f"C2@{k}",
            f"ES keeps Pass@{k} at or above GRPO's",
            f"Pass@{k}(ES) − Pass@{k}(GRPO), training task",
            f"≥ −{C2_MARGIN * 100:g} pp",
            f"Table 2 GSM8K @{k}; Table 3 Average @{k}",
        )
        for k in KS
    ],
    Claim(
        "C3",
        "GRPO's token entropy falls below base; ES's does not",
        "H(GRPO) − H(base) and H(ES) − H(base), nats, held-out tasks",
        f"< 0 and ≥ −{C3_MARGIN * 100:g} % of H(base)",
        "Fig. 2 (curves only, no numbers)",
    ),
    Claim(
        "C4",
        "ES's parameter drift is many times GRPO's",
        "relative L2 drift ES / GRPO, saved weights",
        f"> {C4_THRESHOLD:g}×",
        "Table 4",
    ),
    Claim(
        "C5",
        "ES→GRPO reaches about GRPO's Pass@1 and about ES's Pass@K",
        "Pass@1(ES→GRPO) − Pass@1(GRPO); Pass@K(ES→GRPO) − Pass@K(ES), training task",
        f"each ≥ −{C5_MARGIN * 100:g} pp",
        "Table 2 GSM8K; Table 3 Average",
    ),
    *[
        Claim(
            f"C6@{k}",
            f"held-out forgetting at Pass@{k} is smaller for ES than for GRPO",
            f"mean over held-out tasks of ΔPass@{k}(ES−base) − ΔPass@{k}(GRPO−base)",
            "> 0",
            f"Table 10 d@{k}; Table 5 Average @{k}",
        )
        for k in KS
    ],
]
BY_ID = {c.id: c for c in CLAIMS}
# Claims resting on record fields that `esbench leaderboard verify` cannot recompute from the samples (token entropy,
# drift): the board shows them as reported, the others as verified.
RECORD_ONLY = {"C3", "C4"}


# ---------------------------------------------------------------------------------------------------------------
# verdicts


def verdict(lo: float | None, hi: float | None, threshold: float, side: str) -> str:
    """The verdict of a CI against a threshold, the claim being `value > threshold` (side ">") or `<` ("<")."""
    if lo is None or hi is None:
        return INCONCLUSIVE
    above, below = lo > threshold, hi < threshold
    if side == "<":
        above, below = below, above
    return SUPPORTED if above else CONTRADICTED if below else INCONCLUSIVE


def combine(verdicts: Sequence[str]) -> str:
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    if NOT_MEASURABLE in verdicts or not verdicts:
        return NOT_MEASURABLE
    return SUPPORTED if all(v == SUPPORTED for v in verdicts) else INCONCLUSIVE


def _missing(name: str, note: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "verdict": NOT_MEASURABLE, "value": None, "lo": None, "hi": None, "note": note, **extra}


# ---------------------------------------------------------------------------------------------------------------
# cells


@dataclass
class Group:
    """One model × dataset × budget: per seed, the record of each method (base included)."""

    model: str
    dataset: str
    budget: Any
    by_seed: dict[int, dict[str, dict[str, Any]]]
    unused: list[str]

    def seeds(self, kinds: Sequence[str]) -> list[int]:
        return sorted(s for s, cells in self.by_seed.items() if all(k in cells for k in kinds))

    def names(self, kinds: Sequence[str], seeds: Sequence[int]) -> dict[str, list[str]]:
        return {ROLE_NAMES[k]: [self.by_seed[s][k]["cell"]["name"] for s in seeds] for k in kinds}


def _pick(candidates: list[dict[str, Any]], kind: str) -> tuple[dict[str, Any], list[str]]:
    ranked = sorted(
        candidates, key=lambda r: (r["cell"]["labels"].get("method") != _CANONICAL_LABEL[kind], r["cell"]["name"])
    )
    return ranked[0], [r["cell"]["name"] for r in ranked[1:]]


def groups(records: Sequence[dict[str, Any]]) -> list[Group]:
    """The trained groups of a run, each with its ES, GRPO and ES→GRPO cells by seed and the matching base."""
    bases: dict[tuple[str, int], list] = defaultdict(list)
    checkpoints: dict[tuple[str, int], list] = defaultdict(list)  # released GRPO weights (the hard setting's row)
    trained: dict[tuple, dict[int, dict[str, list]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in records:
        spec, labels = r["cell"]["spec"], r["cell"]["labels"]
        kind = method_key(spec)
        if kind == BASE:
            bases[labels["model"], spec["seed"]].append(r)
        elif kind == "checkpoint":
            checkpoints[labels["model"], spec["seed"]].append(r)
        elif kind in (ES, GRPO, ES_GRPO):
            trained[labels["model"], labels.get("dataset", "-"), spec["budget"]][spec["seed"]][kind].append(r)
    out = []
    for (model, dataset, budget), by_seed in sorted(trained.items(), key=lambda kv: tuple(map(str, kv[0]))):
        unused: list[str] = []
        picked: dict[int, dict[str, dict[str, Any]]] = {}
        for seed, kinds in sorted(by_seed.items()):
            picked[seed] = {}
            for kind, cands in kinds.items():
                picked[seed][kind], rest = _pick(cands, kind)
                unused += rest
            for kind, pool in ((BASE, bases), (GRPO, checkpoints)):  # same seed, else any of the model
                if kind in picked[seed]:
                    continue
                cands = pool.get((model, seed)) or next((v for (m, _), v in sorted(pool.items()) if m == model), None)
                if cands:
                    picked[seed][kind], rest = _pick(cands, kind)
                    unused += rest
        out.append(Group(model, dataset, budget, picked, sorted(unused)))
    return out


def _train_tasks(g: Group, seeds: Sequence[int], kinds: Sequence[str]) -> tuple[list[str], str]:
    rec = g.by_seed[seeds[0]][kinds[0]]
    evaluated = list(rec["metrics"])
    held = set(rec.get("held_out", []))
    task = (rec["cell"]["spec"].get("dataset") or {}).get("task")
    if task in evaluated:
        return [task], f"training task {task}"
    tasks = [t for t in evaluated if t not in held]
    return tasks, "training task not evaluated: every non-held-out task"


def _held_tasks(g: Group, seeds: Sequence[int], kinds: Sequence[str]) -> list[str]:
    rec = g.by_seed[seeds[0]][kinds[0]]
    return [t for t in rec["metrics"] if t in set(rec.get("held_out", []))]


# ---------------------------------------------------------------------------------------------------------------
# per-problem evidence and the bootstrap


def _pass(rec: dict[str, Any], task: str, k: int) -> list[float] | None:
    m = rec["metrics"].get(task)
    if m is None or not m.get("per_problem") or any(n < k for n, _ in m["per_problem"]):
        return None
    return [pass_at_k(n, c, k) for n, c in m["per_problem"]]


def _entropy(rec: dict[str, Any], task: str) -> list[float | None] | None:
    m = rec["metrics"].get(task) or {}
    return m.get("entropy_per_problem")


Values = Callable[[dict[str, Any], str], "list[float | None] | None"]


def paired(
    g: Group,
    seeds: Sequence[int],
    tasks: Sequence[str],
    values: Values,
    combine_cells: Callable[[dict[str, list[float]]], list[float]],
    kinds: Sequence[str],
    iters: int = BOOTSTRAP_ITERS,
) -> dict[str, Any] | str:
    """The bootstrap of a per-problem statistic over seeds, tasks (equal weight) and problems, or why not.

    `combine_cells` maps each kind's per-problem values (one task, one seed) to the per-problem differences.
    Problems where any cell lacks a value (an entropy with no tokens) are dropped in every seed alike.
    """
    if not tasks:
        return "no task to measure it on"
    raw: dict[str, list[dict[str, list]]] = {}
    for t in tasks:
        raw[t] = []
        for s in seeds:
            per_kind = {k: values(g.by_seed[s][k], t) for k in kinds}
            gone = [ROLE_NAMES[k] for k, v in per_kind.items() if v is None]
            if gone:
                return f"{'/'.join(gone)} seed {s} has no per-problem {t} evidence for it"
            if len({len(v) for v in per_kind.values()}) != 1:
                return f"{t}: the cells answered different numbers of problems"
            raw[t].append(per_kind)
    strata: dict[str, list[list[float]]] = {}
    for t in tasks:
        n = len(next(iter(raw[t][0].values())))
        if any(len(next(iter(pk.values()))) != n for pk in raw[t]):
            return f"{t}: the seeds answered different numbers of problems"
        keep = [i for i in range(n) if all(pk[k][i] is not None for pk in raw[t] for k in kinds)]
        if not keep:
            return f"{t}: no problem has a value in every cell"
        strata[t] = [combine_cells({k: [pk[k][i] for i in keep] for k in kinds}) for pk in raw[t]]
    nested = [[strata[t][j] for t in tasks] for j in range(len(seeds))]
    ci = hierarchical_bootstrap(nested, iters=iters, seed=BOOTSTRAP_SEED, level=LEVEL)
    return {
        "value": ci["delta"],
        "lo": ci["lo"],
        "hi": ci["hi"],
        "se": ci["se"],
        "n_problems": sum(len(strata[t][0]) for t in tasks),
        "n_seeds": len(seeds),
        "tasks": list(tasks),
        "ci": _ci_text(len(seeds), len(tasks)),
    }


def _ci_text(n_seeds: int, n_tasks: int) -> str:
    over = "seeds, then problems within each seed" if n_seeds > 1 else "problems"
    tasks = f"; {n_tasks} tasks of equal weight" if n_tasks > 1 else ""
    return f"{LEVEL:.0%} percentile CI, {BOOTSTRAP_ITERS} paired resamples of {over} (seed {BOOTSTRAP_SEED}){tasks}"


def _diff(a: str, b: str) -> Callable[[dict[str, list[float]]], list[float]]:
    return lambda v: [x - y for x, y in zip(v[a], v[b], strict=True)]


def _part(name: str, ci: dict[str, Any] | str, threshold: float, side: str, unit: str, **extra: Any) -> dict[str, Any]:
    if isinstance(ci, str):
        return _missing(name, ci, threshold=threshold, side=side, unit=unit, **extra)
    return {"name": name, **ci, "threshold": threshold, "side": side, "unit": unit, **extra} | {
        "verdict": verdict(ci["lo"], ci["hi"], threshold, side)
    }


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
    tasks, where = _train_tasks(g, seeds, kinds)
    ci = paired(g, seeds, tasks, lambda r, t: _pass(r, t, 1), _diff(GRPO, ES), kinds, iters)
    out = {"parts": [_part("Pass@1(GRPO) − Pass@1(ES)", ci, 0.0, ">", "fraction")], "where": where}
    out["cells"] = g.names(kinds, seeds)
    _add_gains_over_base(out, g, tasks, lambda r, t: _pass(r, t, 1), (GRPO, ES), "ΔPass@1({})", kinds, iters)
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
    tasks, where = _train_tasks(g, seeds, kinds)
    if _unmeasured_k(g, seeds, kinds, tasks, k):
        ci: dict[str, Any] | str = f"Pass@{k} not measurable: fewer than {k} samples per problem"
    else:
        ci = paired(g, seeds, tasks, lambda r, t: _pass(r, t, k), _diff(ES, GRPO), kinds, iters)
    return {
        "parts": [_part(name, ci, -C2_MARGIN, ">", "fraction")],
        "where": where,
        "cells": g.names(kinds, seeds),
    }


def _unmeasured_k(g: Group, seeds, kinds, tasks, k: int) -> bool:
    """Pass@k is measurable from `[n, c]` wherever every problem has n ≥ k samples (listed in eval.k or not)."""
    return any(_pass(g.by_seed[s][kind], t, k) is None for s in seeds for kind in kinds for t in tasks)


def _c3(g: Group, iters: int) -> dict[str, Any]:
    kinds = [BASE, GRPO, ES]
    names = ["H(GRPO) − H(base)", "H(ES) − H(base)"]
    seeds, why = _need(g, kinds)
    if why:
        return {"parts": [_missing(n, why) for n in names]}
    held = _held_tasks(g, seeds, kinds)
    tasks, where = (held, "held-out tasks") if held else (list(g.by_seed[seeds[0]][BASE]["metrics"]), "all tasks")
    cells = g.names(kinds, seeds)
    recs = [g.by_seed[s][k] for s in seeds for k in kinds]
    if any("entropy" not in (r["metrics"].get(t) or {}) for r in recs for t in tasks):
        why = "no token entropy in the records (eval.entropy off)"
        return {"parts": [_missing(n, why) for n in names], "where": where, "cells": cells}
    if any("entropy_per_problem" not in r["metrics"][t] for r in recs for t in tasks):
        return {"parts": _scalar_entropy(g, seeds, tasks, names), "where": where, "cells": cells}
    grpo = paired(g, seeds, tasks, _entropy, _diff(GRPO, BASE), kinds, iters)
    es = paired(g, seeds, tasks, _entropy, _diff(ES, BASE), kinds, iters)
    base = paired(g, seeds, tasks, _entropy, lambda v: v[BASE], kinds, iters)
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
    drifts = {s: [g.by_seed[s][k].get("drift") for k in kinds] for s in seeds}
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
    masters = [[(d.get("master") or {}).get("relative_l2") for d in drifts[s]] for s in seeds]
    if all(a and b for a, b in masters):
        value = sum(a / b for a, b in masters) / len(masters)
        out["context"] = [{"name": "fp32 masters ES / GRPO", "value": value, "unit": "ratio", "lo": None, "hi": None}]
    return out


def _c5(g: Group, iters: int) -> dict[str, Any]:
    kinds = [ES_GRPO, GRPO, ES]
    seeds, why = _need(g, kinds)
    if why:
        return {"parts": [_missing("ES→GRPO vs GRPO and ES", why)]}
    tasks, where = _train_tasks(g, seeds, kinds)
    ci = paired(g, seeds, tasks, lambda r, t: _pass(r, t, 1), _diff(ES_GRPO, GRPO), kinds, iters)
    parts = [_part("Pass@1(ES→GRPO) − Pass@1(GRPO)", ci, -C5_MARGIN, ">", "fraction")]
    for k in KS:
        if not _unmeasured_k(g, seeds, kinds, tasks, k):
            ci = paired(g, seeds, tasks, lambda r, t, k=k: _pass(r, t, k), _diff(ES_GRPO, ES), kinds, iters)
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
    tasks = _held_tasks(g, seeds, kinds)
    if not tasks:
        return {"parts": [_missing(name, "no held-out task")], "cells": g.names(kinds, seeds)}
    if _unmeasured_k(g, seeds, kinds, tasks, k):
        return {"parts": [_missing(name, f"Pass@{k} not measurable: fewer than {k} samples per problem")]}
    values = lambda r, t: _pass(r, t, k)  # noqa: E731
    out = {
        "parts": [_part(name, paired(g, seeds, tasks, values, _diff(ES, GRPO), kinds, iters), 0.0, ">", "fraction")],
        "where": "held-out tasks",
        "cells": g.names(kinds, seeds),
    }
    _add_gains_over_base(out, g, tasks, values, (ES, GRPO), f"ΔPass@{k}({{}}), held-out mean", kinds, iters)
    return out


def _evaluate_group(g: Group, iters: int) -> list[dict[str, Any]]:
    results = []
    for claim in CLAIMS:
        cid = claim.id
        if cid == "C1":
            r = _c1(g, iters)
        elif cid.startswith("C2@"):
            r = _c2(g, int(cid[3:]), iters)
        elif cid == "C3":
            r = _c3(g, iters)
        elif cid == "C4":
            r = _c4(g, iters)
        elif cid == "C5":
            r = _c5(g, iters)
        else:
            r = _c6(g, int(cid[3:]), iters)
        parts = r["parts"]
        head = parts[0]
        results.append(
            {
                "id": cid,
                "claim": claim.text,
                "statistic": claim.statistic,
                "test": claim.test,
                "paper": claim.paper,
                "group": {"model": g.model, "dataset": g.dataset, "budget": g.budget},
                "verdict": combine([p["verdict"] for p in parts]),
                "value": head.get("value"),
                "lo": head.get("lo"),
                "hi": head.get("hi"),
                "n_problems": head.get("n_problems"),
                "n_seeds": head.get("n_seeds", 0),
                "where": r.get("where"),
                "parts": parts,
                "context": r.get("context", []),
                "cells": r.get("cells", {}),
                "unused": g.unused,
            }
        )
    return results


def evaluate(records: Sequence[dict[str, Any]], iters: int = BOOTSTRAP_ITERS) -> dict[str, Any]:
    """Every claim's verdict for every trained group of `records` (what `esbench report --json` carries as
    `claims`). A run with no ES or GRPO cell gets each claim once, not measurable."""
    gs = groups(records)
    results = [r for g in gs for r in _evaluate_group(g, iters)]
    if not gs:
        empty = Group("-", "-", None, {}, [])
        results = [
            {**r, "verdict": NOT_MEASURABLE, "note": "no ES or GRPO cell in the run"}
            for r in _evaluate_group(empty, iters)
        ]
    return {
        "paper": "arXiv 2608.27351",
        "bootstrap": {"iters": iters, "seed": BOOTSTRAP_SEED, "level": LEVEL},
        "margins": {"C2": C2_MARGIN, "C3": C3_MARGIN, "C4": C4_THRESHOLD, "C5": C5_MARGIN},
        "results": results,
    }


# ---------------------------------------------------------------------------------------------------------------
# the paper's own numbers for each statistic (the leaderboard shows them beside the verdicts)


def paper_values(values: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each claim's statistic on the paper's own tables (point values, pp or ×), per paper model, from the
    release's `paper_tables.json` values. Easy setting: Table 2's GSM8K (Table 10's held-out means for C6); hard
    setting: Table 3's Average (Table 5's for C6); C4 from Table 4. C3 has no numbers (Fig. 2 only)."""
    idx = {(v["table"], v["model"], v["method"], v["column"], v["metric"]): v["value"] for v in values}
    easy = sorted({v["model"] for v in values if v["table"] == 2})
    hard = sorted({v["model"] for v in values if v["table"] == 3})
    spots = [(2, m, "GSM8K") for m in easy] + [(3, m, "Average") for m in hard]

    def diff(table, model, col, metric, a, b):
        x, y = idx.get((table, model, a, col, metric)), idx.get((table, model, b, col, metric))
        return None if x is None or y is None else round(x - y, 2)

    def rows(fn) -> list[dict[str, Any]]:
        out = []
        for table, model, col in spots:
            v = fn(table, model, col)
            if v is not None:
                out.append({"model": model, "value": v, "source": f"Table {table} {col}"})
        return out

    out: dict[str, list[dict[str, Any]]] = {"C3": []}
    out["C1"] = rows(lambda t, m, c: diff(t, m, c, "pass@1", "GRPO", "ES"))
    for k in KS:
        out[f"C2@{k}"] = rows(lambda t, m, c, k=k: diff(t, m, c, f"pass@{k}", "ES", "GRPO"))
        c6 = []
        for m in easy:
            es, grpo = (idx.get((10, m, x, "held-out mean change", f"delta_pass@{k}")) for x in ("ES", "GRPO"))
            if es is not None and grpo is not None:
                c6.append({"model": m, "value": round(es - grpo, 2), "source": "Table 10"})
        for m in hard:
            v = diff(5, m, "Average", f"pass@{k}", "ES", "GRPO")
            if v is not None:
                c6.append({"model": m, "value": v, "source": "Table 5 Average"})
        out[f"C6@{k}"] = c6
    out["C4"] = [
        {"model": v["model"], "value": v["value"], "source": "Table 4", "unit": "x"}
        for v in values
        if v["table"] == 4 and v["metric"] == "drift_ratio_es_grpo"
    ]
    c5 = []
    for table, model, col in spots:
        parts = {"@1": diff(table, model, col, "pass@1", "ES->GRPO", "GRPO")}
        parts |= {f"@{k}": diff(table, model, col, f"pass@{k}", "ES->GRPO", "ES") for k in KS}
        if all(v is not None for v in parts.values()):
            c5.append({"model": model, "value": parts, "source": f"Table {table} {col}"})
    out["C5"] = c5
    return out


def paper_text(entries: Sequence[dict[str, Any]], claim_id: str) -> str:
    """One line of the paper's values for a claim, e.g. "Qwen2.5-1.5B-Instruct +4.9; ... (Table 2 GSM8K)"."""
    if not entries:
        return BY_ID[claim_id].paper if claim_id in BY_ID else "–"
    parts = []
    for e in entries:
        v = e["value"]
        if isinstance(v, dict):
            text = ", ".join(f"{k} {x:+.1f}" for k, x in v.items())
        elif e.get("unit") == "x":
            text = f"{v:.1f}×"
        else:
            text = f"{v:+.1f}"
        parts.append(f"{e['model']} {text} ({e['source']})")
    return "; ".join(parts) + (" pp" if claim_id != "C4" else "")


# ---------------------------------------------------------------------------------------------------------------
# one line per claim, for the demo, the report and the board


def format_value(part: dict[str, Any]) -> str:
    """`+3.1 pp [+0.4, +5.8]`, `−0.012 nats [...]`, `41.2× (no CI, one seed)`, or `–`."""
    v, unit = part.get("value"), part.get("unit", "fraction")
    if v is None:
        return "–"
    if unit == "ratio":
        text = f"{v:.1f}×"
        if part.get("lo") is None:
            return text + (" (no CI, one seed)" if part.get("n_seeds") == 1 else " (no CI)")
        return text + f" [{part['lo']:.1f}, {part['hi']:.1f}]"
    scale, suffix, fmt = (100.0, " pp", "+.1f") if unit == "fraction" else (1.0, " nats", "+.4f")
    text = f"{v * scale:{fmt}}{suffix}"
    if part.get("lo") is None:
        return text + " (no CI)"
    return text + f" [{part['lo'] * scale:{fmt}}, {part['hi'] * scale:{fmt}}]"


def statistic_text(result: dict[str, Any]) -> str:
    """Every part of a claim as `name value [CI]`, `;`-joined."""
    out = []
    for p in result["parts"]:
        if p.get("value") is None:
            out.append(f"{p['name']}: {p.get('note', 'not measurable')}")
        else:
            out.append(f"{p['name']} {format_value(p)}")
    return "; ".join(out)


def group_text(result: dict[str, Any]) -> str:
    g = result["group"]
    return f"{g['model']}/{g['dataset']}/b{g['budget']}" if g.get("budget") is not None else "-"


def rows(claims: dict[str, Any] | None) -> list[dict[str, str]]:
    """Plain strings for a table: group, id, claim, statistic with CI, test, verdict, n (problems × seeds)."""
    out = []
    for r in (claims or {}).get("results", []):
        n = "–" if not r.get("n_problems") else f"{r['n_problems']} × {r['n_seeds']} seed(s)"
        if r["id"] == "C4" and r.get("n_seeds"):
            n = f"{r['n_seeds']} seed(s)"
        out.append(
            {
                "group": group_text(r),
                "id": r["id"],
                "claim": r["claim"],
                "statistic": statistic_text(r),
                "test": r["test"],
                "verdict": r["verdict"],
                "n": n,
            }
        )
    return out
