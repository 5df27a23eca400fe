"""Method recipes and their registry.

A method is a class registered under the entry-point group `esbench.methods` (the built-ins are registered the
same way, in pyproject.toml). The registry maps names to `module:attr` strings and imports a recipe only when a
suite uses it, so `esbench validate` stays fast.

Contract (DESIGN.md): `train(model, tokenizer, train_data, reward, budget, config, ctx)` returns a `TrainResult`
holding the trained model and its per-update log. `trains = False` methods (like `base`) are evaluated as they
are and ignore datasets and budgets.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

GROUP = "esbench.methods"


class NoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


@dataclass
class TrainContext:
    """What a recipe gets besides its inputs: the cell's seed, a private work dir for checkpoints (it survives a
    kill, so a recipe resumes from it), and `log`, which appends one JSON line per update to train.jsonl."""

    seed: int
    workdir: Path
    log: Callable[[dict[str, Any]], None]


@dataclass
class TrainResult:
    model: Any
    updates: int = 0
    rollouts: int = 0
    generated_tokens: int = 0
    summary: dict[str, Any] = field(default_factory=dict)


class Method:
    """Base class for recipes. Subclasses set `Config` (a pydantic model of their suite fields) and `train`."""

    trains: ClassVar[bool] = True
    Config: ClassVar[type[BaseModel]] = NoConfig

    def train(self, model, tokenizer, train_data, reward, budget: int, config: BaseModel, ctx: TrainContext):
        raise NotImplementedError


class _Registry:
    def entries(self) -> dict[str, metadata.EntryPoint]:
        return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}

    def names(self) -> list[str]:
        return sorted(self.entries())

    def get(self, name: str) -> type[Method]:
        ep = self.entries().get(name)
        if ep is None:
            raise KeyError(f"unknown method {name!r}; registered methods: {', '.join(self.names()) or 'none'}")
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Method)):
            raise TypeError(f"entry point {name!r} ({ep.value}) is not an esbench.methods.Method subclass")
        return cls


registry = _Registry()


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    """Append one line and fsync it: a kill loses at most the line being written, never an earlier one."""
    import os

    with open(path, "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
