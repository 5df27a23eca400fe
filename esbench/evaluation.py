"""Evaluation through lm-eval: sampled Pass@k / Maj@k and a greedy pass, with per-sample evidence.

esbench calls `lm_eval.simple_evaluate` with the cell backend's lm-eval adapter (`Backend.lm_eval_model`), so
evaluation samples through the same explicit sampler as training, on the task configs shipped in
`esbench/tasks/configs/`. The suite's eval settings are applied as per-task overrides (`repeats: n`, sampling
kwargs), so a plain `lm_eval --include_path` run of the same config with the same overrides is the same
evaluation. lm-eval's own pass@k needs the hub, so Pass@k and Maj@k are computed here from the logged samples
with the task's verifier; lm-eval's `pass@1` is cross-checked against ours.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from esbench.metrics.diversity import answer_entropy as cluster_entropy
from esbench.metrics.passk import majority_correct, mean_pass_at_k
from esbench.records import atomic_write_text
from esbench.tasks import LM_EVAL_DIR, get_task
from esbench.tasks.configs.utils import flatten

if TYPE_CHECKING:
    from esbench.backends import Backend
    from esbench.spec_schema import EvalSpec

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _stderr_to(path: Path):
    """Send file descriptor 2 (lm-eval's tqdm bars, git probes of subprocesses) to `path` for the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "a") as f:
        os.dup2(f.fileno(), 2)
        try:
            with contextlib.redirect_stderr(f):
                yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def task_config(task: str, repeats: int, temperature: float, top_p: float, max_new_tokens: int) -> dict:
    """The shipped lm-eval config of `task` with the suite's sampling settings applied.

    lm-eval treats an inline dict as a complete config (it does not merge it onto the registered task), so the
    YAML is loaded with lm-eval's own loader, which resolves `!function` hooks, and the overrides merged here.
    """
    from lm_eval.tasks._yaml_loader import load_yaml  # pinned lm-eval 0.4.13

    config = load_yaml(LM_EVAL_DIR / f"{task}.yaml")
    gen: dict[str, Any] = {**config.get("generation_kwargs", {}), "max_gen_toks": max_new_tokens}
    if temperature > 0:
        gen.update(do_sample=True, temperature=temperature, top_p=top_p)
    else:
        gen.update(do_sample=False, temperature=0.0)
    return {**config, "task": task, "repeats": repeats, "generation_kwargs": gen}


def _cache_env_report() -> None:
    """lm-eval adds torch's environment report to every `simple_evaluate` result (`loggers.utils.add_env_info`),
    which runs about a dozen subprocesses (0.5 s) per call, six calls per cell. The report cannot change within a
    process and esbench never reads it, so it is computed once per process."""
    import functools

    from torch.utils import collect_env

    if not hasattr(collect_env.get_pretty_env_info, "cache_info"):
        collect_env.get_pretty_env_info = functools.cache(collect_env.get_pretty_env_info)


def _run_lm_eval(
    lm, task_manager, overrides: list[dict], limit: int | None, seed: int, chat: bool = False
) -> dict[str, Any]:
    """Chat tasks (the paper's) go through the model's chat template, as `TaskDef.prompt` renders them. Their system
    message comes from each doc (`description: system` in the config), not from `system_instruction`: it differs by
    task family, and for Countdown it is the dataset's own, row by row."""
    import lm_eval

    _cache_env_report()
    return lm_eval.simple_evaluate(
        model=lm,
        tasks=overrides,
        limit=limit,
        **({"apply_chat_template": True} if chat else {}),
        log_samples=True,
        bootstrap_iters=0,
        task_manager=task_manager,
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
    )


def score_samples(task_name: str, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-document evidence rows: the raw responses with each one's extracted answer and correctness."""
    task = get_task(task_name)
    rows = []
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        resps = flatten(s["resps"])
        verdicts = [task.verify(r, s["doc"]["answer"]) for r in resps]
        rows.append(
            {
                "doc_id": s["doc_id"],
                # `messages`: a task's own conversation (Countdown), which `TaskDef.prompt` needs to re-render it
                "doc": {k: s["doc"][k] for k in ("id", "question", "answer", "messages") if k in s["doc"]},
                "resps": resps,
                "answers": [v.answer for v in verdicts],
                "correct": [v.correct for v in verdicts],
                "lm_eval_pass@1": s.get("pass@1"),
                # why a verifier gave up ("timeout", "too long"; those count as wrong), only where one did
                **({"errors": [v.error for v in verdicts]} if any(v.error for v in verdicts) else {}),
            }
        )
    return rows


def summarise(sampled: list[dict[str, Any]], greedy: list[dict[str, Any]] | None, ks: list[int]) -> dict[str, Any]:
    """Task metrics from evidence rows; every number is recomputable from `per_problem` and the samples."""
    per_problem = [[len(r["correct"]), sum(r["correct"])] for r in sampled]
    out: dict[str, Any] = {"problems": len(per_problem), "n": per_problem[0][0] if per_problem else 0}
    for k in ks:
        out[f"pass@{k}"] = mean_pass_at_k(per_problem, k)
    for k in ks:
        out[f"maj@{k}"] = sum(majority_correct(r["answers"], r["correct"], k) for r in sampled) / len(sampled)
    out["format_rate"] = sum(a is not None for r in sampled for a in r["answers"]) / sum(n for n, _ in per_problem)
    if greedy is not None:
        out["greedy"] = sum(r["correct"][0] for r in greedy) / len(greedy)
    out["per_problem"] = per_problem
    return out


def answer_entropy(rows: list[dict[str, Any]]) -> float:
    """Mean over problems of the entropy (bits) of the policy's answer clusters among its n samples."""
    return sum(cluster_entropy(r["answers"]) for r in rows) / len(rows)


def eval_entropy(backend: Backend, task_name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Token entropy of a task's sampled eval responses (the rows of samples/<task>.jsonl)."""
    task = get_task(task_name)
    prompts, responses = [], []
    for r in rows:
        p = task.prompt(r["doc"], backend.tokenizer)
        prompts += [p] * len(r["resps"])
        responses += r["resps"]
    return backend.token_entropy(prompts, responses)


def entropy_per_problem(rows: list[dict[str, Any]], per_response: list[list[float]]) -> list[float | None]:
    """Each problem's token-weighted mean entropy over its n responses (None when they have no tokens): the paired
    evidence `esbench.claims` bootstraps for C3, in the order of `per_problem`."""
    out, i = [], 0
    for r in rows:
        chunk = per_response[i : i + len(r["resps"])]
        i += len(r["resps"])
        tokens = sum(n for _, n in chunk)
        out.append(sum(s for s, _ in chunk) / tokens if tokens else None)
    if i != len(per_response):
        raise ValueError(f"{len(per_response)} entropy rows for {i} responses")
    return out


def evaluate(
    backend: Backend,
    ev: EvalSpec,
    seed: int,
    out_dir: Path,
    on_pass: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Evaluate the backend's current weights on every task of `ev`; writes `out_dir/samples/<task>[.greedy].jsonl`."""
    from lm_eval.tasks import TaskManager

    lm = backend.lm_eval_model()
    tm = TaskManager(include_path=str(LM_EVAL_DIR), include_defaults=False)
    passes = [("sampled", ev.n, ev.temperature)]
    if ev.greedy:
        passes.append(("greedy", 1, 0.0))
    evidence: dict[str, dict[str, list]] = {t: {} for t in ev.tasks}
    lm_eval_pass1: dict[str, float] = {}
    samples_dir = out_dir / "samples"
    samples_dir.mkdir(parents=True, exist_ok=True)
    for label, repeats, temperature in passes:
        for t in ev.tasks:
            config = task_config(t, repeats, temperature, ev.top_p, ev.max_new_tokens)
            with _stderr_to(out_dir / "lm_eval.log"):  # progress bars and chatter stay off the screen
                res = _run_lm_eval(lm, tm, [config], ev.limit, seed, get_task(t).chat)
            rows = score_samples(t, res["samples"][t])
            evidence[t][label] = rows
            suffix = "" if label == "sampled" else ".greedy"
            atomic_write_text(samples_dir / f"{t}{suffix}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
            if label == "sampled":
                lm_eval_pass1[t] = res["results"][t]["pass@1,all"]
            if on_pass:
                on_pass(f"{t} {label}")
    metrics = {}
    for t in ev.tasks:
        metrics[t] = summarise(evidence[t]["sampled"], evidence[t].get("greedy"), ev.ks)
        metrics[t]["answer_entropy"] = answer_entropy(evidence[t]["sampled"])
        if ev.entropy:
            ent = eval_entropy(backend, t, evidence[t]["sampled"])
            metrics[t]["entropy"] = ent["entropy"]
            if "per_response" in ent:
                metrics[t]["entropy_per_problem"] = entropy_per_problem(evidence[t]["sampled"], ent["per_response"])
        if abs(metrics[t]["pass@1"] - lm_eval_pass1[t]) > 1e-9:
            raise RuntimeError(f"{t}: esbench pass@1 {metrics[t]['pass@1']} != lm-eval {lm_eval_pass1[t]}")
    return metrics
