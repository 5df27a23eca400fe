"""Run one cell: load model -> method recipe -> lm-eval evaluation -> record.json (written last, atomically).

Executors (`esbench.executors`) decide *where* cells run; this module is what runs inside each of them, so a
local run and a Ray or Slurm worker produce the same files.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esbench import provenance
from esbench.leaderboard.release import CURRENT as RELEASE
from esbench.records import RECORD_SCHEMA, atomic_write_json, status
from esbench.spec import Cell

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class Reward:
    """The paper's verifier reward: `correct` if right, `formatted` if an answer was extracted but is wrong, else
    0. It calls the task's own verifier, the one evaluation uses."""

    task: Any
    correct: float = 1.0
    formatted: float = 0.1

    def __call__(self, response: str, gold: str) -> float:
        v = self.task.verify(response, gold)
        return self.correct if v.correct else (self.formatted if v.formatted else 0.0)

    def with_values(self, correct: float, formatted: float) -> Reward:
        return Reward(self.task, correct, formatted)


def _train_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """First/last reward means over the log, so a record shows whether training moved the reward."""
    rewards = [r["reward_mean"] for r in rows if "reward_mean" in r]
    probes = [r for r in rows if "probe" in r]
    out: dict[str, Any] = {"updates_logged": len(rewards)}
    if rewards:
        w = max(1, len(rewards) // 4)
        out.update(reward_first=sum(rewards[:w]) / w, reward_last=sum(rewards[-w:]) / w)
    if probes:
        first, last = probes[0], probes[-1]
        out["probe"] = {
            "first_update": first["update"],
            "last_update": last["update"],
            "entropy_first": first["probe"]["entropy"],
            "entropy_last": last["probe"]["entropy"],
            "success_first": first["probe"]["success"],
            "success_last": last["probe"]["success"],
        }
    return out


def stage_count(cell: Cell) -> int:
    """Progress steps of a cell: load, train (if any), one per task and eval pass, write the record."""
    from esbench.methods import registry

    ev = cell.spec["eval"]
    trains = registry.get(cell.spec["method"]["kind"]).trains
    return 2 + int(trains) + len(ev["tasks"]) * (2 if ev["greedy"] else 1)


class CellBusy(RuntimeError):
    pass


@contextlib.contextmanager
def cell_lock(directory: Path):
    """Exclusive lock on a cell folder: two `esbench run`s must never write the same cell at once."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CellBusy(f"{directory} is being run by another esbench process") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_cell(cell: Cell, directory: Path, on_stage: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Execute `cell` into `directory` and return its record. Resumable: a recipe checkpoints under `work/`."""
    with cell_lock(directory):
        return _run_cell(cell, directory, on_stage)


def _run_cell(cell: Cell, directory: Path, on_stage: Callable[[str], None] | None) -> dict[str, Any]:
    from esbench.analyses import build_probe, functional_sparsity, parameter_drift, population_diversity
    from esbench.evaluation import evaluate
    from esbench.methods import TrainContext, registry, resolve_budget
    from esbench.metrics.drift import unique_parameters
    from esbench.models import load_model, state_hash
    from esbench.tasks import get_task, rows_hash

    stage = on_stage or (lambda _: None)
    spec = cell.spec
    directory.mkdir(parents=True, exist_ok=True)
    if status(directory) == "done":
        return json.loads((directory / "record.json").read_text())
    atomic_write_json(directory / "cell.json", cell.to_json())
    timings: dict[str, float] = {}
    t0 = time.perf_counter()

    from esbench.methods.checkpoint import model_to_load

    loaded = load_model(**model_to_load(spec["method"], spec["model"]))  # a `checkpoint` method names other weights
    model, tokenizer = loaded.model, loaded.tokenizer
    timings["load_s"] = time.perf_counter() - t0
    stage("model loaded")

    method_cls = registry.get(spec["method"]["kind"])
    config = method_cls.Config.model_validate(spec["method"]["config"])
    data_prov: dict[str, Any] = {}
    train_log = directory / "train.jsonl"
    if method_cls.trains:
        task = get_task(spec["dataset"]["task"])
        train_rows = task.rows("train", spec["dataset"]["size"])
        data_prov["train"] = {
            "task": task.name,
            "version": task.version,
            "rows": len(train_rows),
            "sha256": rows_hash(train_rows),
            **task.provenance("train"),  # hub id, config, revision and split (or generator and seed)
        }
        work = directory / "work"
        work.mkdir(exist_ok=True)
        seed_everything(spec["seed"])
        probe, probe_every = build_probe(spec["eval"], spec["seed"], tokenizer)
        ctx = TrainContext(
            seed=spec["seed"],
            workdir=work,
            log_path=train_log,
            prompt=functools.partial(task.prompt, tokenizer=tokenizer),  # chat template for paper tasks
            probe=probe,
            probe_every=probe_every,
            budget_spec=spec["budget"],
        )
        start = {n: p.detach().to("cpu", copy=True) for n, p in unique_parameters(model).items()}  # θ₀ for drift
        t1 = time.perf_counter()
        updates = resolve_budget(spec["budget"], len(train_rows), config)
        result = method_cls().train(model, tokenizer, train_rows, Reward(task), updates, config, ctx)
        timings["train_s"] = time.perf_counter() - t1
        stage("trained")
    else:
        from esbench.methods import TrainResult

        result = TrainResult(model=model)
    model = result.model
    log_rows = [json.loads(line) for line in train_log.read_text().splitlines()] if train_log.exists() else []

    t2 = time.perf_counter()
    seed_everything(spec["seed"])
    ev = spec["eval"]
    metrics = evaluate(model, tokenizer, ev, spec["seed"], directory, on_pass=lambda p: stage(f"evaluated {p}"))
    timings["eval_s"] = time.perf_counter() - t2
    analyses: dict[str, Any] = {}
    if method_cls.trains:
        analyses["drift"] = parameter_drift(model, start, result.ideal)
        if ev["save_weights"]:
            from safetensors.torch import save_file

            state = {k: v.detach().cpu().contiguous() for k, v in unique_parameters(model).items()}
            save_file(state, str(directory / "final.safetensors"))
        if ev["sparsity"]:
            t3 = time.perf_counter()
            analyses["sparsity"] = functional_sparsity(
                model, tokenizer, start, ev, spec["seed"], directory / "sparsity", metrics
            )
            timings["sparsity_s"] = time.perf_counter() - t3
            stage("sparsity evaluated")
    if ev["diversity"]:
        t4 = time.perf_counter()
        analyses["diversity"] = population_diversity(model, tokenizer, ev, spec["seed"])
        timings["diversity_s"] = time.perf_counter() - t4
        stage("diversity measured")
    data_prov["eval"] = {}
    for t in ev["tasks"]:
        task = get_task(t)
        rows = task.rows("test", ev["limit"] or None)
        data_prov["eval"][t] = {
            "version": task.version,
            "rows": len(rows),
            "sha256": rows_hash(rows),
            **task.provenance("test"),
        }
    timings["total_s"] = time.perf_counter() - t0

    record = {
        "schema": RECORD_SCHEMA,
        "release": RELEASE,  # the leaderboard release this record is comparable under
        "cell": cell.to_json(),
        "metrics": metrics,
        # binds the per-sample logs to the record: the leaderboard rejects a sample edited after the run
        "samples_sha256": {
            f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted((directory / "samples").glob("*.jsonl"))
        },
        "held_out": ev["held_out"],
        "train": {**_train_summary(log_rows), **result.summary},
        **analyses,
        "budget_used": {
            "updates": result.updates,
            "rollouts": result.rollouts,
            "generated_tokens": result.generated_tokens,
        },
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "provenance": {
            **provenance.environment(),
            "seeds": {"cell": spec["seed"], "train": spec["seed"], "eval": spec["seed"]},
            "model": loaded.provenance,
            "final_weights_sha256": state_hash(model),
            "datasets": data_prov,
        },
    }
    atomic_write_json(directory / "record.json", record)
    stage("record written")
    shutil.rmtree(directory / "work", ignore_errors=True)  # checkpoints only serve resumption
    return record
