"""`sequence`: run registered methods one after another on the same in-memory model, splitting one budget.

The paper's practical recommendation is ES then GRPO (arXiv 2608.27351, Tables 2-3: "ES->GRPO" and "GRPO->ES"),
each stage getting half the update budget. In a suite:

    methods:
      es: {method: es, ...}
      grpo: {method: grpo, ...}
      es-grpo: {sequence: [es, grpo]}               # stages reuse the named entries' configs
      grpo-es: {sequence: [grpo, es], split: [0.25, 0.75]}

The budget is split by `split` (default: equal shares); rounding gives the remainder to the last stage, so the
stages spend exactly the cell's budget. A budget in epochs ('2ep') is split in epochs instead: each stage spends
its share of the epochs at its own prompts per update (ES 64, GRPO 32 in the paper), so ES->GRPO over two epochs
is one epoch of each. A `checkpoint` stage (first only) starts the sequence from released weights and spends
no updates (the paper's hard GRPO->ES starts from the SofT-GRPO checkpoint).

Each stage logs to train.jsonl with `stage` and `stage_method` fields and a
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
        for i, st in enumerate(self.stages):
            cls = registry.get(st.kind)
            if cls.loads_weights:
                if i != 0:
                    raise ValueError(f"a {st.kind!r} stage can only come first: it replaces the starting weights")
                continue
            if not cls.trains or cls is Sequence:
                raise ValueError(f"stage {st.kind!r} must be a training method other than a sequence")
        return self

    def _training(self) -> list[int]:
        return [i for i, st in enumerate(self.stages) if not registry.get(st.kind).loads_weights]

    def stage_updates(self, budget: int | str, train_size: int) -> list[int]:
        """Updates per stage (0 for a checkpoint stage). Epoch budgets split in epochs; update counts in updates."""
        train = self._training()
        shares = self.split or [1 / len(self.stages)] * len(self.stages)
        total = sum(shares[i] for i in train)
        out = [0] * len(self.stages)
        if isinstance(budget, str):
            epochs = float(budget.removesuffix("ep"))
            for i in train:
                cls = registry.get(self.stages[i].kind)
                cfg = cls.Config.model_validate(self.stages[i].config)
                out[i] = cls.updates_for(f"{epochs * shares[i] / total}ep", train_size, cfg)
            return out
        for i, n in zip(train, stage_budgets(budget, len(train), [shares[i] / total for i in train]), strict=True):
            out[i] = n
        return out


def stage_budgets(budget: int, n: int, split: list[float] | None) -> list[int]:
    """Whole updates per stage, summing exactly to `budget` (the last stage takes the rounding remainder)."""
    shares = split or [1 / n] * n
    out = [int(budget * s) for s in shares[:-1]]
    return [*out, budget - sum(out)]


class _StageContext(TrainContext):
    """A stage's view of the cell context: its own work dir, and log rows tagged and offset into the cell's log."""

    def __init__(self, parent: TrainContext, index: int, kind: str, offset: int, workdir: Path):
        super().__init__(
            seed=parent.seed,
            workdir=workdir,
            log_path=parent.log_path,
            prompt=parent.prompt,
            backend=parent.backend,
            probe=parent.probe,
            probe_every=parent.probe_every,
            workers=parent.workers,
            processes=parent.processes,
        )
        self.index, self.kind, self.offset = index, kind, offset

    def maybe_probe(self, updates: int, final: bool = False) -> None:
        # probe on the cell's update axis; a later stage's start is the previous stage's end, measured already
        if self.offset and updates == 0:
            return
        if self.probe is not None and (final or (self.offset + updates) % self.probe_every == 0):
            self.log({"update": updates, "probe": self.probe(self.backend)})

    def log(self, row: dict[str, Any]) -> None:
        super().log({**row, "update": self.offset + row["update"], "stage": self.index, "stage_method": self.kind})

    def rewind(self, updates: int) -> None:
        # rows of earlier stages stay; this stage keeps its updates before its checkpoint
        super().rewind(self.offset + updates)


class Sequence(Method):
    Config = SequenceConfig

    @classmethod
    def updates_for(cls, budget: int | str, train_size: int, config: SequenceConfig) -> int:
        """Each stage spends its share of the epochs at its own prompts per update (module docstring)."""
        return budget if isinstance(budget, int) else sum(config.stage_updates(budget, train_size))

    def train(self, train_data, reward, budget, config: SequenceConfig, ctx: TrainContext):
        from safetensors.torch import load_file, save_file

        backend = ctx.backend

        budgets = config.stage_updates(ctx.budget_spec if isinstance(ctx.budget_spec, str) else budget, len(train_data))
        if sum(budgets) != budget:
            raise RuntimeError(f"stage budgets {budgets} do not sum to the cell's {budget} updates")
        totals = {"rollouts": 0, "generated_tokens": 0}
        offset = 0
        for i, (stage, n) in enumerate(zip(config.stages, budgets, strict=True)):
            sdir = ctx.workdir / f"stage{i}"
            done = sdir / "done.json"
            if registry.get(stage.kind).loads_weights:
                continue  # the runner loaded this checkpoint as the cell's starting model
            if done.exists():  # finished before a kill: take its weights and counters, skip it
                backend.load_parameters(load_file(str(sdir / "model.safetensors")))
                summary = json.loads(done.read_text())
            else:
                sdir.mkdir(parents=True, exist_ok=True)
                cls = registry.get(stage.kind)
                cfg = cls.Config.model_validate(stage.config)
                sctx = _StageContext(ctx, i, stage.kind, offset, sdir)
                result = cls().train(train_data, reward, n, cfg, sctx)
                summary = {
                    "kind": stage.kind,
                    "updates": result.updates,
                    "rollouts": result.rollouts,
                    "generated_tokens": result.generated_tokens,
                }
                if result.updates != n:
                    raise RuntimeError(f"stage {i} ({stage.kind}) spent {result.updates} updates, not {n}")
                state = {k: v.detach().cpu().contiguous() for k, v in backend.parameters().items()}
                save_file(state, str(sdir / "model.safetensors"))
                atomic_write_json(done, summary)
            totals["rollouts"] += summary["rollouts"]
            totals["generated_tokens"] += summary["generated_tokens"]
            offset += n
        return TrainResult(
            updates=budget,
            summary={"stage_budgets": budgets, "stage_methods": [s.kind for s in config.stages]},
            rollouts=totals["rollouts"],
            generated_tokens=totals["generated_tokens"],
        )
