"""The paper's analyses of one cell, run by the runner after evaluation: parameter drift, population JS diversity
and functional sparsity. Each writes a section of record.json (docs/analyses.md).

The numerical definitions live in `esbench.metrics` (entropy, diversity, drift); this module wires them to the
cell's backend, tasks and settings, so the runner stays a readable pipeline. Every sample is drawn and every
weight is edited through the cell's one backend.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from esbench.metrics import diversity as div
from esbench.metrics.drift import drift, threshold
from esbench.metrics.entropy import Probe
from esbench.tasks import get_task

if TYPE_CHECKING:
    from esbench.spec import EvalSpec

log = logging.getLogger(__name__)


def _default_task(ev: EvalSpec, task: str | None) -> str:
    return task or (ev.held_out or ev.tasks)[0]


def build_probe(ev: EvalSpec, seed: int, tokenizer=None) -> tuple[Probe | None, int]:
    """The cell's training probe from `eval.probe`, or (None, 0) when the suite does not ask for one."""
    spec = ev.probe
    if spec is None:
        return None, 0
    task = get_task(_default_task(ev, spec.task))
    rows = task.rows("test", spec.prompts)
    probe = Probe(
        prompts=[task.prompt(r, tokenizer) for r in rows],
        golds=[r["answer"] for r in rows],
        verify=task.verify,
        samples=spec.samples,
        temperature=ev.temperature or 1.0,
        max_new_tokens=ev.max_new_tokens,
        seed=seed,
        every=spec.every,
    )
    return probe, spec.every


def parameter_drift(backend, start: dict[str, torch.Tensor], ideal: dict[str, torch.Tensor] | None) -> dict[str, Any]:
    end = backend.parameters()
    return drift(start, end, ideal={k: ideal[k] for k in start} if ideal is not None else None)


@torch.no_grad()
def population_diversity(backend, ev: EvalSpec, seed: int) -> dict[str, Any]:
    """JS_succ / JS_ans over N members θ + σεᵢ around the current weights, m samples per member and prompt."""
    from esbench.es.weights import member_seed

    spec = ev.diversity
    task = get_task(spec.task or ev.tasks[0])
    rows = task.rows("test", spec.prompts)
    prompts = [task.prompt(r, backend.tokenizer) for r in rows]
    editor = backend.weight_editor("fp32-master")
    correct, answers = [], []
    for i in range(spec.members):
        editor.perturb(member_seed(seed, -1, i), spec.sigma)
        try:
            gens = backend.generate(
                prompts,
                n=spec.samples,
                temperature=ev.temperature or 1.0,
                top_p=ev.top_p,
                max_new_tokens=ev.max_new_tokens,
                seed=seed,  # common random numbers across members: differences come from the weights
            )
        finally:
            editor.restore()
        verdicts = [[task.verify(g.text, r["answer"]) for g in gs] for gs, r in zip(gens, rows, strict=True)]
        correct.append([[v.correct for v in vs] for vs in verdicts])
        answers.append([[v.answer for v in vs] for vs in verdicts])
    return {"task": task.name, "sigma": spec.sigma, **div.population_summary(correct, answers)}


@torch.no_grad()
def functional_sparsity(
    backend, start: dict[str, torch.Tensor], ev: EvalSpec, seed: int, out_dir: Path, full: dict
) -> list[dict[str, Any]]:
    """Pass@1 of θ₀ + Δ·1[|Δ| > τ] for each τ (paper Tables 11-12, Eq. 16), evaluated through the same lm-eval path."""
    from esbench.evaluation import evaluate

    spec = ev.sparsity
    task = spec.task or ev.tasks[0]
    n = spec.n or ev.n
    end = {k: v.clone() for k, v in backend.parameters().items()}
    sub_eval = ev.model_copy(update={"tasks": [task], "held_out": [], "n": n, "k": [1], "greedy": False})
    full_pass1 = full[task]["pass@1"] if n == ev.n else None
    rows = []
    for tau in spec.taus:
        weights, stats = threshold(start, end, tau)
        with backend.swapped_parameters(weights):
            metrics = evaluate(backend, sub_eval, seed, out_dir / f"tau={tau:g}")
        p1 = metrics[task]["pass@1"]
        rows.append(
            {
                **stats,
                "task": task,
                "n": n,
                "pass@1": p1,
                "delta_vs_full": None if full_pass1 is None else p1 - full_pass1,
            }
        )
    return rows
