"""Task registry: every eval or train task is an lm-eval task config shipped in `esbench/tasks/configs/`.

`lm_eval --include_path $(python -c 'import esbench.tasks as t; print(t.LM_EVAL_DIR)') --tasks tiny_arith`
runs the same configs that esbench runs. A task here adds what esbench needs besides the config: its verifier
(shared with training rewards) and a loader for its train/test rows.

Rows come from three sources: the synthetic families of the tiny model (plain prompts), the paper's Hugging Face
datasets (`esbench.tasks.hub`, pinned revisions) and reasoning-gym generators. The paper's tasks (arXiv
2608.27351) are prompted as its App. G.4 says: through the model's chat template, with one system prompt per task
family (math, multiple choice, open QA, code; the exact strings below) and the question as the user message;
Countdown sends the dataset's own messages and no system prompt of ours. `deepscaler` is train-only and has no
lm-eval config.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from esbench.tasks import synthetic
from esbench.tasks.verifiers import VERIFIERS, Verdict

LM_EVAL_DIR = Path(__file__).parent / "configs"


# The paper's system prompts (App. G.4), byte for byte: protocol parameters, not wording to improve.
MATH_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
CHOICE_SYSTEM_PROMPT = (
    "Please reason step by step to solve the following multiple-choice question. "
    "Put your final choice letter inside \\boxed{}, e.g., \\boxed{C}."
)
OPEN_QA_SYSTEM_PROMPT = (
    "Answer the question using the provided context. "
    "Keep the final answer short, and put it inside <answer> </answer> tags."
)
CODE_SYSTEM_PROMPT = (
    "You are a Python programming assistant. Write clean, correct Python code that passes the given tests. "
    "The function name and signature must match exactly as specified in the test cases. "
    "The final code block must not include the tests; do not include the tests in your answer. "
    "Do not include explanations or text outside the code block. "
    "Output exactly one Python markdown code block containing only the final solution code."
)
GYM_SEEDS = {"train": 1, "test": 2}  # reasoning-gym seed per split: disjoint, reproducible problem sets


@dataclass(frozen=True)
class TaskDef:
    name: str
    family: str
    verifier: str  # key of VERIFIERS
    version: int = 1
    source: str | None = None  # None: synthetic family; "hub:<key>" (esbench.tasks.hub); "gym:<reasoning-gym name>"
    # chat tasks: the system message of the task's family; None with chat: the rows carry their own `messages`
    system_prompt: str | None = None
    # prompted through the model's chat template (the paper's tasks); False: plain `question + newline` (tiny tasks).
    # Explicit, because a chat task need not have a system prompt of ours (Countdown).
    chat: bool = False

    def verify(self, response: str, gold: str) -> Verdict:
        return VERIFIERS[self.verifier](response, gold)

    def rows(self, split: str, size: int | None = None) -> list[dict[str, str]]:
        if self.source is None:
            return synthetic.make_split(self.family, split, size or DEFAULT_SIZES[split])
        kind, _, key = self.source.partition(":")
        if kind == "hub":
            from esbench.tasks import hub

            return hub.load_rows(hub.SOURCES[key], split, size)
        if kind == "gym":
            return gym_rows(key, split, size or DEFAULT_SIZES[split])
        raise ValueError(f"task {self.name}: unknown source {self.source!r}")

    def messages(self, row: dict[str, str]) -> list[dict[str, str]]:
        """The chat messages of a row: the family's system prompt and the question, or, for a task without a system
        prompt of ours (Countdown), the dataset's own messages (`row["messages"]`, JSON) exactly as shipped."""
        if self.system_prompt is not None:
            return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": row["question"]}]
        if "messages" not in row:
            raise ValueError(f"task {self.name} renders the dataset's own messages; this row has no 'messages'")
        return json.loads(row["messages"])

    def prompt(self, row: dict[str, str], tokenizer=None) -> str:
        """The exact text the model is conditioned on (identical to what lm-eval builds from the task config):
        plain `question + newline` for synthetic tasks; `messages(row)` through the chat template for paper tasks,
        as the authors' artifact renders them (`apply_chat_template(..., add_generation_prompt=True)`)."""
        if not self.chat:
            return row["question"] + "\n"
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"task {self.name} is prompted through a chat template; the tokenizer has none")
        return tokenizer.apply_chat_template(self.messages(row), tokenize=False, add_generation_prompt=True)

    def provenance(self, split: str) -> dict:
        """Where the rows of `split` come from (hub id, config, revision, split; or generator and seed)."""
        if self.source is None:
            return {"generator": f"esbench.tasks.synthetic:{self.family}"}
        kind, _, key = self.source.partition(":")
        if kind == "hub":
            from esbench.tasks import hub

            return hub.SOURCES[key].provenance(split)
        from importlib.metadata import version

        seed = GYM_SEEDS[split]
        return {"generator": f"reasoning_gym:{key}", "reasoning_gym": version("reasoning-gym"), "seed": seed}


def gym_rows(name: str, split: str, size: int) -> list[dict[str, str]]:
    """Procedural problems from reasoning-gym (offline, seeded per split)."""
    import reasoning_gym

    ds = reasoning_gym.create_dataset(name, seed=GYM_SEEDS[split], size=size)
    return [
        {"id": f"{name}-{split}-{i}", "question": x["question"], "answer": str(x["answer"])} for i, x in enumerate(ds)
    ]


DEFAULT_SIZES = {"train": 1024, "test": 500}


def _paper(name: str, verifier: str, system_prompt: str | None, source: str | None = None, version: int = 1) -> TaskDef:
    return TaskDef(
        name, name, verifier, version=version, source=source or f"hub:{name}", system_prompt=system_prompt, chat=True
    )


TASKS: dict[str, TaskDef] = {
    "tiny_arith": TaskDef("tiny_arith", "arith", "hash"),
    "tiny_reverse": TaskDef("tiny_reverse", "reverse", "exact"),
    "tiny_max": TaskDef("tiny_max", "max", "hash"),
    # the paper's tasks (arXiv 2608.27351): the family's system prompt through the chat template (App. G.4).
    # Every math, choice and countdown task went up one version with issue 22's bounded verifiers: a length cap per
    # response and answer, a linear last-box scan, math-verify in a worker with a 10 s limit per answer (a timeout
    # is a wrong answer, listed in the row's `errors`), and math judged the same off the main thread.
    "gsm8k": _paper("gsm8k", "math", MATH_SYSTEM_PROMPT, version=2),
    "deepscaler": _paper("deepscaler", "math", MATH_SYSTEM_PROMPT, version=2),
    # 2: math-ai/aime24 at a pinned commit, the paper's collection (1: HuggingFaceH4/aime_2024)
    "aime24": _paper("aime24", "math", MATH_SYSTEM_PROMPT, version=3),
    "aime25": _paper("aime25", "math", MATH_SYSTEM_PROMPT, version=2),
    # 2: revision pinned (1 loaded the hub's default branch)
    "amc23": _paper("amc23", "math", MATH_SYSTEM_PROMPT, version=3),
    "math500": _paper("math500", "math", MATH_SYSTEM_PROMPT, version=2),
    # 2: the paper's multiple-choice system prompt and a plain question + `A. text` message (1: the math prompt and
    # an appended instruction); the letter is read from the last box only (1 also took "the answer is (B)")
    "commonsense_qa": _paper("commonsense_qa", "choice", CHOICE_SYSTEM_PROMPT, version=3),
    # 2: revision pinned; 3: the paper's open-QA system prompt, no appended instruction, answer in <answer> tags
    # (2: the math prompt, the answer read from a box or "answer is")
    "hotpotqa": _paper("hotpotqa", "hotpot", OPEN_QA_SYSTEM_PROMPT, version=3),
    # 2: revision pinned; 3: as commonsense_qa's 2 (multiple-choice prompt and layout, boxed letter only)
    "gpqa_diamond": _paper("gpqa_diamond", "choice", CHOICE_SYSTEM_PROMPT, version=4),
    # 2: a pass needs proof that every test ran (exit 0 was gameable); 3: the paper's code system prompt and its
    # `Task:` / `Test Cases:` user message (2: the math prompt and esbench's own wording); 4: run under bubblewrap and
    # judged by the trusted parent on plain data (esbench/tasks/mbpp_judge.py): a result of the program's own class
    # fails, a `Counter` compares as the dict it holds, and `sys.exit(0)` before the tests fails
    "mbpp": _paper("mbpp", "mbpp", CODE_SYSTEM_PROMPT, version=4),
    # 2: the dataset's own messages, no system prompt of ours, the equation read from <answer> tags only (1: the
    # math prompt, esbench's question, the last box first)
    "countdown": _paper("countdown", "countdown", None, version=3),
    # GSM8K-style procedural problems (reasoning-gym), for the real-LLM CPU smoke suite
    "gsm_symbolic": _paper("gsm_symbolic", "math", MATH_SYSTEM_PROMPT, source="gym:gsm_symbolic", version=2),
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


__all__ = [
    "CHOICE_SYSTEM_PROMPT",
    "CODE_SYSTEM_PROMPT",
    "LM_EVAL_DIR",
    "MATH_SYSTEM_PROMPT",
    "OPEN_QA_SYSTEM_PROMPT",
    "TASKS",
    "TaskDef",
    "Verdict",
    "get_task",
    "rows_hash",
]
