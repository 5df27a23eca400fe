"""Method recipes and their registry.

A method is a class registered under the entry-point group `esbench.methods` (the built-ins are registered the
same way, in pyproject.toml). The registry (`esbench.registry`) maps names to `module:attr` strings and imports a
recipe only when a suite uses it, so `esbench validate` stays fast.

Contract (docs/architecture.md, "Method"): `train(train_data, reward, budget, config, ctx)` works on the cell's
model through `ctx.backend` (generation, weight edits, device) and returns a `TrainResult`: what it spent and its
summary; the trained weights are the backend's. `trains = False` methods (like `base`) are evaluated as they are
and ignore datasets and budgets. The typed surface for plug-ins is re-exported by `esbench.api`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from esbench.backends import Backend
from esbench.records import append_jsonl, atomic_write_text, jsonl_line, read_jsonl
from esbench.registry import EntryPointRegistry
from esbench.rewards import Reward

GROUP = "esbench.methods"


class NoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


@dataclass
class TrainContext:
    """What a recipe gets besides its inputs: the cell's seed; a private work dir for checkpoints (it survives a
    kill, so a recipe resumes from it); the task's prompt template; and train.jsonl, written through `log`."""

    seed: int
    workdir: Path
    log_path: Path
    prompt: Callable[[dict[str, str]], str]
    backend: Backend
    probe: Callable[[Backend], dict[str, Any]] | None = None  # esbench.metrics.entropy.Probe
    probe_every: int = 0
    budget_spec: int | str | None = None  # the suite's budget as written ('2ep' or an update count), for sequences
    workers: int = 1  # replicas a recipe may spread its work over (ES: population on Ray actors); never changes results
    processes: int = 1  # processes (GPUs) a GRPO stage trains on (`--grpo-gpus`); changes results like another machine

    def maybe_probe(self, updates: int, final: bool = False) -> None:
        """Log the probe after `updates` updates (0 = before training) when due: every `probe_every`, and at the end.

        The row carries `update: updates`, so a resume that rewinds to a checkpoint re-measures the same points.
        """
        if self.probe is None or not (final or updates % self.probe_every == 0):
            return
        self.log({"update": updates, "probe": self.probe(self.backend)})

    def log(self, row: dict[str, Any]) -> None:
        """Append one update's row to train.jsonl (fsynced)."""
        append_jsonl(self.log_path, row)

    def rewind(self, updates: int) -> None:
        """Keep only rows of updates < `updates`: a resumed recipe re-logs what followed its checkpoint."""
        if not self.log_path.exists():
            return
        rows = read_jsonl(self.log_path)
        kept = [r for r in rows if r.get("update", -1) < updates]
        if len(kept) != len(rows):
            atomic_write_text(self.log_path, "".join(jsonl_line(r) for r in kept))


@dataclass
class TrainResult:
    """What a recipe spent and reports. The trained weights are the backend's (`ctx.backend`)."""

    updates: int = 0
    rollouts: int = 0
    generated_tokens: int = 0
    summary: dict[str, Any] = field(default_factory=dict)
    ideal: dict[str, Any] | None = None  # fp32 weights the update rule intended (ES), to split drift from rounding


class Method:
    """Base class for recipes. Subclasses set `Config` (a pydantic model of their suite fields) and `train`.

    Declared, not guessed: `trains` (False: evaluated as loaded, no dataset or budget), `loads_weights` (True: the
    runner loads the weights its config names as the cell's model), and the budget unit: a budget counts updates,
    and `prompts_per_update` converts an epoch budget ('2ep') into updates.
    """

    trains: ClassVar[bool] = True
    loads_weights: ClassVar[bool] = False
    spends_updates: ClassVar[bool] = True  # False: a measurement whose budget counts something else (no updates)
    Config: ClassVar[type[BaseModel]] = NoConfig

    def train(self, train_data: list[dict[str, str]], reward: Reward, budget: int, config: Any, ctx: TrainContext):
        raise NotImplementedError

    @classmethod
    def weights_to_load(cls, config: dict[str, Any], dtype: str) -> dict[str, Any]:
        """`load_model` arguments for a `loads_weights` method: by default its config's `path` and the optional
        `revision`, `subfolder` and `dtype` (else the cell model's). Override for another config layout."""
        out = {"path": config["path"], "revision": config.get("revision"), "dtype": config.get("dtype") or dtype}
        if config.get("subfolder"):
            out["subfolder"] = config["subfolder"]
        return out

    @classmethod
    def prompts_per_update(cls, config: Any) -> int | None:
        """Prompts one update consumes, or None if the method has no such unit (epoch budgets are then refused)."""
        return None

    @classmethod
    def updates_for(cls, budget: int | str, train_size: int, config: Any) -> int:
        """Updates for a suite budget: an int counts updates; 'Xep' is X epochs of the train set."""
        if isinstance(budget, int):
            return budget
        epochs = float(budget.removesuffix("ep"))
        batch = cls.prompts_per_update(config)
        if batch is None:
            raise ValueError(f"budget {budget!r} is in epochs but method {cls.__name__} has no prompts_per_update")
        return max(1, math.ceil(epochs * train_size / batch))


def _a_method(cls: object) -> str | None:
    return None if isinstance(cls, type) and issubclass(cls, Method) else "an esbench.methods.Method subclass"


registry: EntryPointRegistry[Method] = EntryPointRegistry(GROUP, "method", _a_method)


def model_to_load(method: dict[str, Any], cell_model: dict[str, Any]) -> dict[str, Any]:
    """`load_model` arguments for a cell: its model, or the weights its method (or a sequence's first stage) loads.

    Decided by the registered class's `loads_weights`, so a plug-in that loads weights is evaluated on them too."""
    kind, config = method["kind"], method["config"]
    if kind == "sequence" and config["stages"]:
        kind, config = config["stages"][0]["kind"], config["stages"][0]["config"]
    cls = registry.get(kind)
    if cls.loads_weights:
        return cls.weights_to_load(config, cell_model.get("dtype", "float32"))
    return {k: v for k, v in cell_model.items() if k != "recipe"}  # the recipe is an id stamp, not an argument
