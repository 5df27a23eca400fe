"""The paper's analyses of one cell, run by the runner after training: eval-time token entropy, parameter drift,
population JS diversity and functional sparsity. Each writes a section of record.json (docs/analyses.md).

The numerical definitions live in `esbench.metrics` (entropy, diversity, drift); this module wires them to a
cell's model, tasks and settings, so the runner stays a readable pipeline.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from esbench.metrics import diversity as div
from esbench.metrics.drift import drift, threshold, unique_parameters
from esbench.metrics.entropy import Probe, token_entropy
from esbench.tasks import get_task

log = logging.getLogger(__name__)


def _probe_task(ev: dict[str, Any], part: dict[str, Any]) -> str:
    if part.get("task"):
        return part["task"]
    return (ev["held_out"] or ev["tasks"])[0]


def build_probe(ev: dict[str, Any], seed: int, tokenizer=None) -> tuple[Probe | None, int]:
    """The cell's training probe from `eval.probe`, or (None, 0) when the suite does not ask for one."""
    spec = ev.get("probe")
    if not spec:
        return None, 0
    task = get_task(_probe_task(ev, spec))
    rows = task.rows("test", spec["prompts"])
    probe = Probe(
        prompts=[task.prompt(r, tokenizer) for r in rows],
        golds=[r["answer"] for r in rows],
        verify=task.verify,
        samples=spec["samples"],
        temperature=ev["temperature"] or 1.0,
        max_new_tokens=ev["max_new_tokens"],
        seed=seed,
        every=spec["every"],
    )
    return probe, spec["every"]


def eval_entropy(model, tokenizer, task_name: str, rows: list[dict[str, Any]]) -> dict[str, float]:
    """Token entropy of a task's sampled eval responses (the rows of samples/<task>.jsonl)."""
    task = get_task(task_name)
    prompts, responses = [], []
    for r in rows:
        p = task.prompt(r["doc"], tokenizer)
        prompts += [p] * len(r["resps"])
        responses += r["resps"]
    return token_entropy(model, tokenizer, prompts, responses)


def answer_entropy(rows: list[dict[str, Any]]) -> float:
    """Mean over problems of the entropy (bits) of the policy's answer clusters among its n samples."""
    return sum(div.answer_entropy(r["answers"]) for r in rows) / len(rows)


def parameter_drift(model, start: dict[str, torch.Tensor], ideal: dict[str, torch.Tensor] | None) -> dict[str, Any]:
    end = unique_parameters(model)
    return drift(start, end, ideal={k: ideal[k] for k in start} if ideal is not None else None)


@torch.no_grad()
def population_diversity(model, tokenizer, ev: dict[str, Any], seed: int) -> dict[str, Any]:
    """JS_succ / JS_ans over N members θ + σεᵢ around the current weights, m samples per member and prompt."""
    from esbench.backends.hf import HFBackend
    from esbench.es.weights import WeightEditor, member_seed

    spec = ev["diversity"]
    task = get_task(spec["task"] or ev["tasks"][0])
    rows = task.rows("test", spec["prompts"])
    prompts = [task.prompt(r, tokenizer) for r in rows]
    backend = HFBackend(model, tokenizer)
    editor = WeightEditor.for_model(model, "fp32-master")
    correct, answers = [], []
    for i in range(spec["members"]):
        editor.perturb(member_seed(seed, -1, i), spec["sigma"])
        try:
            gens = backend.generate(
                prompts,
                n=spec["samples"],
                temperature=ev["temperature"] or 1.0,
                top_p=ev["top_p"],
                max_new_tokens=ev["max_new_tokens"],
                seed=seed,  # common random numbers across members: differences come from the weights
            )
        finally:
            editor.restore()
        verdicts = [[task.verify(g.text, r["answer"]) for g in gs] for gs, r in zip(gens, rows, strict=True)]
        correct.append([[v.correct for v in vs] for vs in verdicts])
        answers.append([[v.answer for v in vs] for vs in verdicts])
    return {"task": task.name, "sigma": spec["sigma"], **div.population_summary(correct, answers)}


@torch.no_grad()
def functional_sparsity(
    model, tokenizer, start: dict[str, torch.Tensor], ev: dict[str, Any], seed: int, out_dir: Path, full: dict
) -> list[dict[str, Any]]:
    """Pass@1 of θ₀ + Δ·1[|Δ| ≥ τ] for each τ (paper Tables 11-12), evaluated through the same lm-eval path."""
    from esbench.evaluation import evaluate

    spec = ev["sparsity"]
    task = spec["task"] or ev["tasks"][0]
    n = spec["n"] or ev["n"]
    params = unique_parameters(model)
    end = {k: v.clone() for k, v in params.items()}
    sub_eval = {**ev, "tasks": [task], "n": n, "k": [1], "greedy": False}
    full_pass1 = full[task]["pass@1"] if n == ev["n"] else None
    rows = []
    try:
        for tau in spec["taus"]:
            weights, stats = threshold(start, end, tau)
            for name, p in params.items():
                p.copy_(weights[name].to(p.dtype))
            metrics = evaluate(model, tokenizer, sub_eval, seed, out_dir / f"tau={tau:g}")
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
    finally:
        for name, p in params.items():
            p.copy_(end[name])
    return rows
