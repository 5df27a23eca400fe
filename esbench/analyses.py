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
    from esbench.backends import Backend
    from esbench.methods import TrainResult
    from esbench.spec_schema import EvalSpec

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


def parameter_drift(
    backend: Backend, start: dict[str, torch.Tensor], result: TrainResult, dtype: str
) -> dict[str, Any]:
    """Table 4's drift of a trained cell: of the weights a user would save (the backend's, cast to the suite's
    `dtype`) against θ₀ as loaded, and beside it (`master`) that of the fp32 master, where one exists.

    The paper's GRPO figures are bf16 checkpoints (max |Δθ| 2⁻¹², 2⁻¹⁰: whole bf16 steps), so the saved weights are
    the ones compared with it. A master exists when the backend still holds fp32 weights that `dtype` cannot
    represent exactly (GRPO's mixed precision), or when ES ran `fp32-master` (its master is `result.ideal`); ES's
    paper-bf16 shadow is no one's weights, and stays what it was: the ideal behind `rounding_share`.
    """
    end = backend.parameters()
    saved = getattr(torch, dtype)
    master = None
    if saved != torch.float32:
        if next(iter(end.values())).dtype == torch.float32 and not _exact_at(end, saved):
            master = end
        elif result.ideal is not None and str(result.summary.get("precision", "")).startswith("fp32-master"):
            master = result.ideal
    ideal = master if master is not None else result.ideal
    out = {**drift(start, end, ideal=_subset(ideal, start), dtype=saved), "weights": f"saved:{dtype}"}
    if master is not None:
        out["master"] = {**drift(start, master), "weights": "master:float32"}
    return out


def checkpoint_drift(method: dict[str, Any], dtype: str, model: torch.nn.Module) -> dict[str, Any] | None:
    """A `checkpoint` cell's drift against the model it was trained from (its config's `base`), both at `dtype`:
    Table 4's DeepSeek GRPO row is the released checkpoint against DeepSeek-R1-Distill-Qwen-1.5B. None without a base.
    """
    from esbench.metrics.drift import unique_parameters
    from esbench.models import load_model

    base = method["config"].get("base") if method["kind"] == "checkpoint" else None
    if not base:
        return None
    loaded = load_model(**base, dtype=dtype)
    start, end = unique_parameters(loaded.model), unique_parameters(model)
    shapes = {n: tuple(t.shape) for n, t in start.items()}
    if shapes != {n: tuple(t.shape) for n, t in end.items()}:
        missing = sorted(set(shapes) ^ set(end)) or [n for n in shapes if shapes[n] != tuple(end[n].shape)]
        raise ValueError(f"checkpoint base {base['path']} does not match the checkpoint's tensors: {missing[:5]}")
    out = {**drift(start, end, dtype=getattr(torch, dtype)), "weights": f"saved:{dtype}"}
    out["against"] = {k: loaded.provenance.get(k) for k in ("path", "revision", "subfolder", "state_sha256")}
    return out


def _exact_at(weights: dict[str, torch.Tensor], dtype: torch.dtype) -> bool:
    """Whether every tensor survives a round trip through `dtype` (fp32 weights that are a widened bf16 model)."""
    return all(torch.equal(t, t.to(dtype).to(t.dtype)) for t in weights.values())


def _subset(weights: dict[str, torch.Tensor] | None, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    return None if weights is None else {k: weights[k] for k in like}


@torch.no_grad()
def population_diversity(backend: Backend, ev: EvalSpec, seed: int) -> dict[str, Any]:
    """JS_succ / JS_ans over N members θ + σεᵢ around the current weights, m samples per member and prompt."""
    from esbench.es.weights import member_seed

    spec = ev.diversity
    assert spec is not None, "population_diversity runs only for a suite with eval.diversity"
    task = get_task(spec.task or ev.tasks[0])
    rows = task.rows("test", spec.prompts)
    prompts = [task.prompt(r, backend.tokenizer) for r in rows]
    editor = backend.weight_editor("fp32-master")
    correct, answers = [], []
    try:
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
    finally:
        editor.close()  # its fp32 master: the analyses after this one need that memory
    return {"task": task.name, "sigma": spec.sigma, **div.population_summary(correct, answers)}


@torch.no_grad()
def functional_sparsity(
    backend, start: dict[str, torch.Tensor], ev: EvalSpec, seed: int, out_dir: Path, full: dict
) -> list[dict[str, Any]]:
    """Pass@1 of θ₀ + Δ·1[|Δ| > τ] for each τ (paper Tables 11-12, Eq. 16), evaluated through the same lm-eval path."""
    from esbench.evaluation import evaluate

    spec = ev.sparsity
    assert spec is not None, "sparsity runs only for a suite with eval.sparsity"
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
