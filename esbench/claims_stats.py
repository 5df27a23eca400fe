"""The machinery under the paper's claims (`esbench.claims`): the verdict rules, the cells a claim compares and the
paired bootstrap of a per-problem statistic over them.

Separate from the claims themselves (`esbench.claims_compute`, `esbench.claims`) because none of this knows a
claim: it matches cells by seed and method, reads per-problem evidence from the records and resamples it with a
fixed seed. The definitions (what "matched", "paired", "supported" mean) are in `esbench.claims`' docstring.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from esbench.metrics.bootstrap import hierarchical_bootstrap
from esbench.metrics.passk import pass_at_k
from esbench.records import method_key

# the test: a LEVEL percentile CI from BOOTSTRAP_ITERS paired resamples with a fixed seed (`esbench.claims`)
BOOTSTRAP_ITERS = 2000
BOOTSTRAP_SEED = 0
LEVEL = 0.95
SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_MEASURABLE = "supported", "contradicted", "inconclusive", "not measurable"
ES, GRPO, BASE, ES_GRPO = "es", "grpo", "base", "sequence:es,grpo"
ROLE_NAMES = {BASE: "base", ES: "ES", GRPO: "GRPO", ES_GRPO: "ES→GRPO"}
_CANONICAL_LABEL = {BASE: "base", ES: "es", GRPO: "grpo", ES_GRPO: "es-grpo"}


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
                pooled = pool.get((model, seed)) or next((v for (m, _), v in sorted(pool.items()) if m == model), None)
                if pooled:
                    picked[seed][kind], rest = _pick(pooled, kind)
                    unused += rest
        out.append(Group(model, dataset, budget, picked, sorted(unused)))
    return out


def train_tasks(g: Group, seeds: Sequence[int], kinds: Sequence[str]) -> tuple[list[str], str]:
    rec = g.by_seed[seeds[0]][kinds[0]]
    evaluated = list(rec["metrics"])
    held = set(rec.get("held_out", []))
    task = (rec["cell"]["spec"].get("dataset") or {}).get("task")
    if isinstance(task, str) and task in evaluated:
        return [task], f"training task {task}"
    tasks = [t for t in evaluated if t not in held]
    return tasks, "training task not evaluated: every non-held-out task"


def held_tasks(g: Group, seeds: Sequence[int], kinds: Sequence[str]) -> list[str]:
    rec = g.by_seed[seeds[0]][kinds[0]]
    return [t for t in rec["metrics"] if t in set(rec.get("held_out", []))]


# ---------------------------------------------------------------------------------------------------------------
# per-problem evidence and the bootstrap


def pass_values(rec: dict[str, Any], task: str, k: int) -> list[float] | None:
    m = rec["metrics"].get(task)
    if m is None or not m.get("per_problem") or any(n < k for n, _ in m["per_problem"]):
        return None
    return [pass_at_k(n, c, k) for n, c in m["per_problem"]]


def entropy_values(rec: dict[str, Any], task: str) -> list[float | None] | None:
    m = rec["metrics"].get(task) or {}
    return m.get("entropy_per_problem")


# one cell's per-problem values on a task (None: no evidence; an item None: that problem has no value)
Values = Callable[[dict[str, Any], str], "Sequence[float | None] | None"]


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
    raw: dict[str, list[dict[str, Sequence[float | None]]]] = {}
    for t in tasks:
        raw[t] = []
        for s in seeds:
            per_kind = {k: values(g.by_seed[s][k], t) for k in kinds}
            gone = [ROLE_NAMES[k] for k, v in per_kind.items() if v is None]
            present = {k: v for k, v in per_kind.items() if v is not None}
            if gone:
                return f"{'/'.join(gone)} seed {s} has no per-problem {t} evidence for it"
            if len({len(v) for v in present.values()}) != 1:
                return f"{t}: the cells answered different numbers of problems"
            raw[t].append(present)
    strata: dict[str, list[list[float]]] = {}
    for t in tasks:
        n = len(next(iter(raw[t][0].values())))
        if any(len(next(iter(pk.values()))) != n for pk in raw[t]):
            return f"{t}: the seeds answered different numbers of problems"
        keep = [i for i in range(n) if all(pk[k][i] is not None for pk in raw[t] for k in kinds)]
        if not keep:
            return f"{t}: no problem has a value in every cell"
        # `keep` holds only problems with a value in every cell: no None is left
        strata[t] = [combine_cells({k: cast(list[float], [pk[k][i] for i in keep]) for k in kinds}) for pk in raw[t]]
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
