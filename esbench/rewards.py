"""Training rewards. A reward is a callable `(response, gold) -> float` that a method applies to its rollouts.

`Reward` is the paper's verifier reward (arXiv 2608.27351, App. G): the task's own verifier, the one evaluation
uses, gives `correct` for a right answer, `formatted` for an extracted but wrong one, and 0 otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reward:
    task: Any  # esbench.tasks.TaskDef
    correct: float = 1.0
    formatted: float = 0.1

    def __call__(self, response: str, gold: str) -> float:
        v = self.task.verify(response, gold)
        return self.correct if v.correct else (self.formatted if v.formatted else 0.0)

    def with_values(self, correct: float, formatted: float) -> Reward:
        return Reward(self.task, correct, formatted)
