"""`sequence`: run registered methods one after another on the same in-memory model, splitting one budget.

The paper's practical recommendation is ES then GRPO (arXiv 2608.27351, Tables 2-3: "ES->GRPO" and "GRPO->ES"),
each stage getting half the update budget. In a suite:

    methods:
      es: {method: es, ...}
      grpo: {method: grpo, ...}
      es-grpo: {sequence: [es, grpo]}               # stages reuse the named entries' configs
      grpo-es: {sequence: [grpo, es], split: [0.25, 0.75]}

The budget is split by `split` (default: equal shares); rounding gives the remainder to the last stage, so the
stages spend exactly the cell's budget. Each stage logs to train.jsonl with `stage` and `stage_method` fields and a
cell-wide `update` index. A finished stage saves its weights under `work/stage<i>/` before the next one starts;
a killed run reloads them and resumes the unfinished stage from that stage's own checkpoints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from esbench.methods import Method, TrainContext, TrainResult, registry
from esbench.records import atomic_write_json


class Stage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = Field(description="A registered method that trains.")
    config: dict[str, Any] = Field(default_factory=dict, description="That method's validated config.")


class SequenceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    stages: list[Stage] = Field(min_length=2, description="Methods to run in order.")
    split: list[float] | None = Field(None, description="Budget share of each stage; default equal shares.")

    @field_validator("split")
    @classmethod
    def _split(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (any(x <= 0 for x in v) or abs(sum(v) - 1) > 1e-9):
            raise ValueError(f"split must be positive shares summing to 1, got {v}")
        return v

    @model_validator(mode="after")
    def _stages(self) -> SequenceConfig:
        if self.split is not None and len(self.split) != len(self.stages):
            raise ValueError(f"split has {len(self.split)} shares for {len(self.stages)} stages")
        for st in self.stages:
            cls = registry.get(st.kind)
            if not cls.trains or cls is Sequence:
                raise ValueError(f"stage {st.kind!r} must be a training method other than a sequence")
        return self


def stage_budgets(budget: int, n: int, split: list[float] | None) -> list[int]:
    """Whole updates per stage, summing exactly to `budget` (the last stage takes the rounding remainder)."""
    shares = split or [1 / n] * n
    out = [int(budget * s) for s in shares[:-1]]
    return [*out, budget - sum(out)]


class _StageContext(TrainContext):
    """A stage's view of the cell context: its own work dir, and log rows tagged and offset into the cell's log."""

    def __init__(self, parent: TrainContext, index: int, kind: str, offset: int, workdir: Path):
        super().__init__(seed=parent.seed, workdir=workdir, log_path=parent.log_path, prompt=parent.prompt)
        self.index, self.kind, self.offset = index, kind, offset

    def log(self, row: dict[str, Any]) -> None:
        super().log({**row, "update": self.offset + row["update"], "stage": self.index, "stage_method": self.kind})

    def rewind(self, updates: int) -> None:
        # rows of earlier stages stay; this stage keeps its updates before its checkpoint
        super().rewind(self.offset + updates)


class Sequence(Method):
    Config = SequenceConfig

    def train(self, model, tokenizer, train_data, reward, budget, config: SequenceConfig, ctx: TrainContext):
        from safetensors.torch import load_file, save_file

        budgets = stage_budgets(budget, len(config.stages), config.split)
        totals = {"rollouts": 0, "generated_tokens": 0}
        offset = 0
        for i, (stage, n) in enumerate(zip(config.stages, budgets, strict=True)):
            sdir = ctx.workdir / f"stage{i}"
            done = sdir / "done.json"
            if done.exists():  # finished before a kill: take its weights and counters, skip it
                model.load_state_dict(load_file(str(sdir / "model.safetensors")), strict=False)
                summary = json.loads(done.read_text())
            else:
                sdir.mkdir(parents=True, exist_ok=True)
                cls = registry.get(stage.kind)
                cfg = cls.Config.model_validate(stage.config)
                sctx = _StageContext(ctx, i, stage.kind, offset, sdir)
                result = cls().train(model, tokenizer, train_data, reward, n, cfg, sctx)
                model = result.model
                summary = {
                    "kind": stage.kind,
                    "updates": result.updates,
                    "rollouts": result.rollouts,
                    "generated_tokens": result.generated_tokens,
                }
                if result.updates != n:
                    raise RuntimeError(f"stage {i} ({stage.kind}) spent {result.updates} updates, not {n}")
                state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}  # untie shared
                save_file(state, str(sdir / "model.safetensors"))
                atomic_write_json(done, summary)
            totals["rollouts"] += summary["rollouts"]
            totals["generated_tokens"] += summary["generated_tokens"]
            offset += n
        return TrainResult(
            model=model,
            updates=budget,
            summary={"stage_budgets": budgets, "stage_methods": [s.kind for s in config.stages]},
            **totals,
        )
