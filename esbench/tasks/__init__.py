"""Task registry: every eval or train task is an lm-eval task config shipped in `esbench/tasks/configs/`.

`lm_eval --include_path $(python -c 'import esbench.tasks as t; print(t.LM_EVAL_DIR)') --tasks tiny_arith`
runs the same configs that esbench runs. A task here adds what esbench needs besides the config: its verifier
(shared with training rewards) and a loader for its train/test rows.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from esbench.tasks import synthetic
from esbench.tasks.verifiers import VERIFIERS, Verdict

LM_EVAL_DIR = Path(__file__).parent / "configs"


@dataclass(frozen=True)
class TaskDef:
    name: str
    family: str
    verifier: str  # key of VERIFIERS
    version: int = 1

    def verify(self, response: str, gold: str) -> Verdict:
        return VERIFIERS[self.verifier](response, gold)

    def rows(self, split: str, size: int | None = None) -> list[dict[str, str]]:
        return synthetic.make_split(self.family, split, size or DEFAULT_SIZES[split])

    def prompt(self, row: dict[str, str]) -> str:
        """The exact text the model is conditioned on (identical to the lm-eval config's doc_to_text)."""
        return row["question"] + "\n"


DEFAULT_SIZES = {"train": 1024, "test": 500}

TASKS: dict[str, TaskDef] = {
    "tiny_arith": TaskDef("tiny_arith", "arith", "hash"),
    "tiny_reverse": TaskDef("tiny_reverse", "reverse", "exact"),
    "tiny_max": TaskDef("tiny_max", "max", "hash"),
}


def get_task(name: str) -> TaskDef:
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}") from None


def rows_hash(rows: list[dict[str, str]]) -> str:
    """SHA-256 of the canonical JSONL of a split: the dataset's provenance for generated data."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True).encode() + b"\n")
    return h.hexdigest()


__all__ = ["LM_EVAL_DIR", "TASKS", "TaskDef", "Verdict", "get_task", "rows_hash"]
