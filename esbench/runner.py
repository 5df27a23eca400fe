"""Run one cell: load model -> one backend -> method recipe -> lm-eval evaluation -> analyses -> record.json.

This is what `esbench run-cell CELL.json --out DIR` executes, and every executor (local, Ray, Slurm) and container
runtime calls that same entry point, so a cell's files do not depend on where it ran. The record is written last
and atomically; a killed run resumes from the recipe's checkpoints under `work/`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from esbench import provenance
from esbench.leases import Lease
from esbench.memory import GRPO_GPUS_ENV, generation_budget
from esbench.records import (
    RECORD_SCHEMA,
    RELEASE,
    CellDir,
    Events,
    atomic_write_json,
    eval_seed,
    read_jsonl,
    train_summary,
    write_record,
)
from esbench.spec import Cell, load_cell_json

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def stage_count(cell: Cell) -> int:
    """Progress steps of a cell: load, train (if any), one per task and eval pass, write the record."""
    from esbench.methods import registry

    ev = cell.typed.eval
    trains = registry.get(cell.typed.method.kind).trains
    return 2 + int(trains) + len(ev.tasks) * (2 if ev.greedy else 1)


class ForeignCellDir(ValueError):
    """A cell folder that holds another cell's cell.json or record.json (or is not a folder)."""


def check_cell_dir(cell: Cell, directory: Path) -> None:
    """Refuse a folder that is not `cell`'s: its record would be returned as this cell's result, and its `work/`
    checkpoints resumed as this cell's training. Both files are read as untrusted input (esbench.untrusted)."""
    from esbench.suite_yaml import printable
    from esbench.untrusted import load_json_object

    cd = CellDir(directory)
    if os.path.lexists(cd.path) and not cd.path.is_dir():
        raise ForeignCellDir(printable(f"{cd.path}: exists and is not a folder"))
    for path in (cd.cell_json, cd.record):
        if not os.path.lexists(path):
            continue
        obj = load_json_object(path)
        owner = obj.get("cell") if path == cd.record else obj
        other = owner.get("id") if isinstance(owner, dict) else None
        if other != cell.id:
            raise ForeignCellDir(
                printable(f"{cd.path}: its {path.name} belongs to another cell ({str(other)[:40]}), not {cell.id}")
            )


def run_cell(cell: Cell, directory: Path, on_stage: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Execute `cell` into `directory` and return its record. Resumable; one runner per cell folder at a time.
    A folder that belongs to another cell is refused before anything is written (`check_cell_dir`)."""
    cd = CellDir(directory)
    check_cell_dir(cell, cd.path)
    cd.path.mkdir(parents=True, exist_ok=True)
    with Lease(cd.lease):
        events = Events(cd.events)
        events.emit("started")

        def stage(name: str) -> None:
            events.emit("stage", stage=name)
            if on_stage:
                on_stage(name)

        try:
            record = _run_cell(cell, cd, stage)
        except BaseException as e:
            events.emit("failed", error=f"{type(e).__name__}: {e}"[:500])
            raise
        events.emit("done")
        return record


def run_cell_file(cell_json: Path, directory: Path, on_stage: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`esbench run-cell`: run the cell frozen in `cell_json`, read and validated as untrusted input (bounded,
    strict JSON, the suite's validation, its id and name recomputed: `esbench.spec.load_cell_json`)."""
    return run_cell(load_cell_json(cell_json), directory, on_stage)


def _data_provenance(task, split: str, rows: list[dict[str, str]]) -> dict[str, Any]:
    from esbench.tasks import rows_hash

    return {
        "version": task.version,
        "rows": len(rows),
        "sha256": rows_hash(rows),
        **task.provenance(split),  # hub id, config, revision and split (or generator and seed)
    }


def es_workers() -> int:
    """`--es-workers` (ESBENCH_ES_WORKERS): an execution option, outside the cell id (results do not depend on it)."""
    return max(1, int(os.environ.get("ESBENCH_ES_WORKERS", "1")))


def grpo_gpus() -> int:
    """`--grpo-gpus` (ESBENCH_GRPO_GPUS): processes a GRPO stage trains on (FSDP2 over a node's GPUs; gloo processes
    on a CPU). Outside the cell id like `--es-workers`, but recorded: TRL seeds each rank's sampling apart, so the
    numbers are another machine's (`esbench.methods.grpo_processes`)."""
    return max(1, int(os.environ.get(GRPO_GPUS_ENV, "1")))


def _longest_prompt(task_name: str, split: str, size: int | None, tokenizer) -> int:
    """Tokens of the split's longest prompt, as the task builds it (chat template included)."""
    from esbench.tasks import get_task

    task = get_task(task_name)
    return max(
        (len(tokenizer(task.prompt(r, tokenizer=tokenizer))["input_ids"]) for r in task.rows(split, size)), default=0
    )


def longest_sequence(spec: Any, method: dict[str, Any], tokenizer, model_config: Any) -> int | None:
    """The vLLM engine's context for this cell (`esbench.backends.engine_context`): its longest prompt (the
    evaluation and held-out test problems, and the training set) plus its largest generation budget."""
    from esbench.backends import engine_context

    prompts = [_longest_prompt(t, "test", spec.eval.limit, tokenizer) for t in [*spec.eval.tasks, *spec.eval.held_out]]
    if spec.dataset is not None:
        prompts.append(_longest_prompt(spec.dataset.task, "train", spec.dataset.size, tokenizer))
    return engine_context(max(prompts, default=0), generation_budget(spec, method), model_config)


def _require_code_sandbox(spec: Any) -> None:
    """Raise SandboxUnavailable (which names the fix) when the cell grades model-written code (a task whose verifier
    runs it: MBPP) and neither bubblewrap nor the opted-in weaker mode can run it, instead of failing hours in."""
    from esbench.tasks import get_task
    from esbench.tasks.sandbox import require

    names = [*spec.eval.tasks, *spec.eval.held_out, *([spec.dataset.task] if spec.dataset is not None else [])]
    if any(get_task(n).verifier == "mbpp" for n in names):
        require()


def _run_cell(cell: Cell, cd: CellDir, stage: Callable[[str], None]) -> dict[str, Any]:
    import torch

    from esbench.analyses import (
        build_probe,
        checkpoint_drift,
        functional_sparsity,
        parameter_drift,
        population_diversity,
    )
    from esbench.backends import build_backend
    from esbench.evaluation import evaluate
    from esbench.methods import TrainContext, TrainResult, model_to_load, registry
    from esbench.models import load_model
    from esbench.rewards import Reward
    from esbench.tasks import get_task
    from esbench.untrusted import load_json_object

    spec = cell.typed
    if cd.status() == "done":  # this cell's own record (check_cell_dir)
        return load_json_object(cd.record)
    _require_code_sandbox(spec)  # before anything loads: a cell that grades code needs the confined sandbox
    atomic_write_json(cd.cell_json, cell.to_json())
    timings: dict[str, float] = {}
    t0 = time.perf_counter()

    # a `loads_weights` method (or first stage), e.g. `checkpoint`, names other weights than the cell's model
    loaded = load_model(**model_to_load(cell.spec["method"], cell.spec["model"]))
    # a checkpoint's drift against its `base`, on the HF weights as loaded (before a backend renames or fuses them)
    base_drift = checkpoint_drift(cell.spec["method"], spec.model.dtype, loaded.model)
    options = {}
    if spec.backend.kind == "vllm":  # the engine's context: the cell's longest sequence, not the model's whole one
        options["max_model_len"] = longest_sequence(spec, cell.spec["method"], loaded.tokenizer, loaded.model.config)
    backend = build_backend(spec.backend, loaded.model, loaded.tokenizer, **options)
    timings["load_s"] = time.perf_counter() - t0
    stage("model loaded")

    method_cls = registry.get(spec.method.kind)
    config = method_cls.Config.model_validate(spec.method.config)
    data_prov: dict[str, Any] = {}
    result = TrainResult()
    if method_cls.trains:
        assert spec.dataset is not None, "the schema requires a dataset for a method that trains"
        task = get_task(spec.dataset.task)
        train_rows = task.rows("train", spec.dataset.size)
        data_prov["train"] = {"task": task.name, **_data_provenance(task, "train", train_rows)}
        cd.work.mkdir(exist_ok=True)
        seed_everything(spec.seed)
        probe, probe_every = build_probe(spec.eval, spec.seed, backend.tokenizer)
        ctx = TrainContext(
            seed=spec.seed,
            workdir=cd.work,
            log_path=cd.train_log,
            prompt=functools.partial(task.prompt, tokenizer=backend.tokenizer),  # chat template for paper tasks
            backend=backend,
            probe=probe,
            probe_every=probe_every,
            budget_spec=spec.budget,
            workers=es_workers(),
            processes=grpo_gpus(),
        )
        start = {n: p.detach().to("cpu", copy=True) for n, p in backend.parameters().items()}  # θ₀ for drift
        t1 = time.perf_counter()
        updates = method_cls.updates_for(spec.budget, len(train_rows), config)
        result = method_cls().train(train_rows, Reward(task, rule=spec.dataset.reward), updates, config, ctx)
        timings["train_s"] = time.perf_counter() - t1
        stage("trained")
    log_rows = read_jsonl(cd.train_log, missing_ok=True)
    compute: dict[str, Any] = {}
    if method_cls.trains:  # FLOPs by the paper's App. G.2 formulas, from the tokens train.jsonl logs
        from esbench.metrics.compute import cell_compute, device_count

        devices = device_count(backend.device.type, max(es_workers(), grpo_gpus()))
        P = sum(t.numel() for t in start.values())  # every parameter, tied tensors once (the backend's view)
        compute["compute"] = cell_compute(
            spec.method.kind, log_rows, P, timings["train_s"], devices, backend.device.type
        )
    analyses: dict[str, Any] = {} if base_drift is None else {"drift": base_drift}
    if method_cls.trains:  # the saved weights' drift and the fp32 master's (GRPO's), before the evaluation cast
        analyses["drift"] = parameter_drift(backend, start, result, spec.model.dtype)
    backend.cast(getattr(torch, spec.model.dtype))  # every cell is evaluated at the suite's dtype

    t2 = time.perf_counter()
    weights_sha = backend.state_hash()
    seeds = {"cell": spec.seed, "train": spec.seed, "eval": eval_seed(spec.seed, weights_sha)}
    seed_everything(seeds["eval"])
    ev = spec.eval
    metrics = evaluate(backend, ev, seeds["eval"], cd.path, on_pass=lambda p: stage(f"evaluated {p}"))
    timings["eval_s"] = time.perf_counter() - t2
    if method_cls.trains:
        if ev.save_weights:
            from safetensors.torch import save_file

            state = {k: v.detach().cpu().contiguous() for k, v in backend.parameters().items()}
            save_file(state, str(cd.final_weights))
        if ev.sparsity and (ev.sparsity.methods is None or spec.method.kind in ev.sparsity.methods):
            t3 = time.perf_counter()
            analyses["sparsity"] = functional_sparsity(backend, start, ev, spec.seed, cd.sparsity, metrics)
            timings["sparsity_s"] = time.perf_counter() - t3
            stage("sparsity evaluated")
    if ev.diversity:
        t4 = time.perf_counter()
        analyses["diversity"] = population_diversity(backend, ev, spec.seed)
        timings["diversity_s"] = time.perf_counter() - t4
        stage("diversity measured")
    data_prov["eval"] = {}
    for t in ev.tasks:
        task = get_task(t)
        data_prov["eval"][t] = _data_provenance(task, "test", task.rows("test", ev.limit or None))
    timings["total_s"] = time.perf_counter() - t0

    record = {
        "schema": RECORD_SCHEMA,
        "release": RELEASE,  # the leaderboard release this record is comparable under
        "cell": cell.to_json(),
        "metrics": metrics,
        # binds the per-sample logs to the record: the leaderboard rejects a sample edited after the run
        "samples_sha256": {
            f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(cd.samples.glob("*.jsonl"))
        },
        "held_out": ev.held_out,
        "train": {**train_summary(log_rows), **result.summary, "evaluated_dtype": spec.model.dtype},
        **analyses,
        "budget_used": {
            "updates": result.updates,
            "rollouts": result.rollouts,
            "generated_tokens": result.generated_tokens,
        },
        **compute,
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "provenance": {
            **provenance.environment(),
            "backend": backend.provenance(),
            "execution": {"es_workers": es_workers(), "grpo_gpus": grpo_gpus()},
            "seeds": seeds,
            "model": loaded.provenance,
            "final_weights_sha256": weights_sha,
            "datasets": data_prov,
        },
    }
    write_record(cd.record, record)
    stage("record written")
    shutil.rmtree(cd.work, ignore_errors=True)  # checkpoints only serve resumption
    return record
