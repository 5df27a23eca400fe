"""The paper's datasets (arXiv 2608.27351, Tables 2-5), loaded through Hugging Face `datasets` at pinned revisions.

Every source names its hub id, config, revision and split, and a normaliser that turns one raw row into an esbench
row `{"id", "question", "answer"}` with a *string* answer (structured golds such as MBPP tests or a Countdown
target with its numbers are JSON-encoded). `question` is the user message; the chat template and the task family's
system prompt are added by `TaskDef.prompt` (training) and by lm-eval (`apply_chat_template`, evaluation).
Countdown rows also carry `messages`, the dataset's own conversation (JSON), which is rendered as it is.

Offline mirrors: when `ESBENCH_DATASETS_DIR` is set and holds `<hub id>[/<config>]/`, that folder is loaded with the
same `datasets.load_dataset` call (files named after their split: `test.jsonl`, `validation.parquet`, ...). The
tests point it at hand-written fixture rows in each dataset's real schema.

Revisions: a 40-hex commit where one could be confirmed from public pins (other projects' loaders, download
scripts and cache paths that name the same commit for the same dataset; this machine has no hub access). `None`
marks a source whose full commit was not found (see `UNPINNED`): it loads the commit its default branch points at
when it is first read (`resolve_default_branch`), and the record names that commit (`resolved_revision`) beside
the row hash, so a change upstream shows as a different eval set.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_DIR = "ESBENCH_DATASETS_DIR"


class UnpinnedSource(RuntimeError):
    """A hub dataset without a pinned revision was asked for from the hub."""


@dataclass(frozen=True)
class HubSource:
    path: str  # hub dataset id
    name: str | None  # config
    revision: str | None
    splits: dict[str, str]  # esbench split (train/test) -> hub split
    normalise: Callable[[dict[str, Any], int], dict[str, str]]

    def local_dir(self) -> Path | None:
        root = os.environ.get(ENV_DIR)
        if not root:
            return None
        d = Path(root) / self.path / (self.name or "")
        return d if d.is_dir() else None

    def provenance(self, split: str) -> dict[str, Any]:
        local = self.local_dir()
        return {
            "hub_id": self.path,
            "config": self.name,
            "revision": self.revision,
            **({"resolved_revision": r} if (r := RESOLVED.get((self.path, self.name))) and not local else {}),
            "split": self.splits.get(split),
            "local_mirror": str(local) if local else None,
        }


def load_raw(src: HubSource, split: str):
    """The raw HF `Dataset` of `split` (esbench name): from the local mirror if there is one, else the hub."""
    import datasets

    if split not in src.splits:
        raise ValueError(f"{src.path} has no {split!r} split here; it has {sorted(src.splits)}")
    hub_split = src.splits[split]
    local = src.local_dir()
    if local is not None:
        return datasets.load_dataset(str(local), split=hub_split)
    revision = src.revision or resolve_default_branch(src)
    return datasets.load_dataset(src.path, src.name, revision=revision, split=hub_split)


RESOLVED: dict[tuple[str, str | None], str] = {}
"""Commits that unpinned sources resolved to in this process: provenance records them (`resolved_revision`)."""


def resolve_default_branch(src: HubSource) -> str:
    """The commit an unpinned source's default branch points at now (from the local cache when the hub is off),
    loaded by that commit and recorded, so a record names exactly the eval set it used even where no pin is known.
    A published pin is still the fix: the default branch can move between two runs (the row hash shows it)."""
    import warnings

    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(src.path, repo_type="dataset")
    except Exception as e:
        raise UnpinnedSource(
            f"{src.path} has no pinned revision in esbench.tasks.hub.SOURCES and its default branch could not be "
            f"resolved ({type(e).__name__}: {e}). Run `esbench prefetch` where the hub is reachable, or point "
            f"{ENV_DIR} at a local mirror holding {src.path}/{src.name or ''}."
        ) from e
    sha = Path(folder).name  # huggingface_hub's snapshots/<commit>
    RESOLVED[(src.path, src.name)] = sha
    warnings.warn(f"{src.path} is not pinned: loading its default branch at commit {sha} (recorded)", stacklevel=2)
    return sha


def load_rows(src: HubSource, split: str, size: int | None = None) -> list[dict[str, str]]:
    raw = load_raw(src, split)
    n = len(raw) if size is None else min(size, len(raw))
    return [src.normalise(raw[i], i) for i in range(n)]


# ---------------------------------------------------------------------------------------------------------------
# normalisers: raw row in the dataset's real schema -> {"id", "question", "answer"}


def _gsm8k(row, i):
    """The gold as the paper's artifact takes it: the first `#### <number>`, commas stripped, nothing else (`3.50`
    and `-0` stay as written: `reward: paper` compares strings; the evaluation verifiers normalise numbers)."""
    from esbench.tasks.verifiers import _HASH  # the same `#### <number>` pattern as hash_answer

    m = _HASH.search(row["answer"])
    if m is None:
        raise ValueError(f"GSM8K row {i} has no '#### <number>' answer")
    return {"id": f"gsm8k-{i}", "question": row["question"].strip(), "answer": m.group(1).replace(",", "")}


def _math(question_key: str, id_key: str | None = None):
    """Problem/answer datasets; `problem` and `question` are both accepted (mirrors rename the column)."""

    def norm(row, i):
        rid = row.get(id_key) if id_key else None
        question = row.get(question_key, row.get("problem", row.get("question")))
        return {
            "id": str(rid if rid is not None else i),
            "question": str(question).strip(),
            "answer": str(row["answer"]).strip(),
        }

    return norm


def _boxed_solution(row, i):
    """math-ai/aime24: the gold is the `solution` column, written as `\\boxed{N}`; the box's content is the
    answer (a plain value is kept as it is)."""
    solution = str(row["solution"]).strip()
    m = re.fullmatch(r"\\boxed\s*\{(.*)\}", solution, flags=re.S)  # the whole field is one box
    answer = (m.group(1) if m else solution).strip()
    if not answer:
        raise ValueError(f"AIME 2024 row {i} has an empty solution")
    rid = row.get("id")
    return {"id": str(rid if rid is not None else i), "question": str(row["problem"]).strip(), "answer": answer}


LETTERS = "ABCDEFGHIJ"


def choice_question(question: str, options: list[tuple[str, str]]) -> str:
    """The user message of a multiple-choice task: the question, a blank line, then one `A. text` line per option.

    The paper (App. G.4) gives the system prompt, not this layout; this is the plainest one that labels every choice.
    No instruction is appended: the system prompt asks for the boxed letter.
    """
    return question.strip() + "\n\n" + "\n".join(f"{label}. {text}" for label, text in options)


def _csqa(row, i):
    labels, texts = row["choices"]["label"], row["choices"]["text"]
    q = choice_question(row["question"], [(lab, str(txt).strip()) for lab, txt in zip(labels, texts, strict=True)])
    return {"id": row["id"], "question": q, "answer": row["answerKey"].strip()}


def _gpqa(row, i):
    """Options shuffled with a seed from the record id, so the gold letter is stable and not always A."""
    rid = row.get("Record ID") or str(i)
    options = [row["Correct Answer"], row["Incorrect Answer 1"], row["Incorrect Answer 2"], row["Incorrect Answer 3"]]
    options = [str(o).strip() for o in options]
    order = list(range(4))
    random.Random(int(hashlib.sha256(rid.encode()).hexdigest()[:16], 16)).shuffle(order)
    shown = [options[j] for j in order]
    gold = LETTERS[order.index(0)]
    q = choice_question(row["Question"], [(LETTERS[k], o) for k, o in enumerate(shown)])
    return {"id": rid, "question": q, "answer": gold}


def _hotpot(row, i):
    """Distractor setting: the ten paragraphs (two gold, eight distractors), then the question.

    The paper does not state the layout: `Context:`, one `Title: text` paragraph each (sentences joined as the
    dataset splits them), separated by blank lines, then a blank line and `Question: <question>`. No instruction is
    appended: the system prompt asks for the short answer in `<answer>` tags.
    """
    ctx = row["context"]
    paras = [f"{t}: {''.join(s).strip()}" for t, s in zip(ctx["title"], ctx["sentences"], strict=True)]
    q = "Context:\n" + "\n\n".join(paras) + f"\n\nQuestion: {row['question'].strip()}"
    return {"id": row["id"], "question": q, "answer": row["answer"].strip()}


def _countdown(row, i):
    """The dataset's own `prompt` messages are kept (JSON in `messages`) and rendered unchanged: the paper adds no
    prompt of its own to Countdown. `question` is the last user message, for records and display."""
    messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in row["prompt"]]
    users = [m["content"] for m in messages if m["role"] == "user"]
    if not users:
        raise ValueError(f"Countdown row {i} has no user message in its prompt")
    nums = [int(n) for n in row["nums"]]
    target = int(row["target"])
    return {
        "id": f"countdown-{i}",
        "question": users[-1],
        "answer": json.dumps({"target": target, "nums": nums}),
        "messages": json.dumps(messages),
    }


def _mbpp(row, i):
    """The paper's user message (App. G.4): `Task: <description>`, a newline, `Test Cases: <public tests>`.

    The public tests are the sanitized split's `test_list` joined with newlines (the split has no separate hidden
    tests), the same asserts the sandbox runs; `test_imports` are not shown, they are set-up for the checker.
    """
    tests = list(row["test_list"])
    q = f"Task: {row['prompt'].strip()}\nTest Cases: " + "\n".join(tests)
    gold = {"test_list": tests, "test_imports": list(row.get("test_imports") or [])}
    return {"id": str(row["task_id"]), "question": q, "answer": json.dumps(gold)}


SOURCES: dict[str, HubSource] = {
    "gsm8k": HubSource(
        "openai/gsm8k", "main", "740312add88f781978c0658806c59bc2815b9866", {"train": "train", "test": "test"}, _gsm8k
    ),
    "deepscaler": HubSource(
        "agentica-org/DeepScaleR-Preview-Dataset",
        None,
        "b6ae8c60f5c1f2b594e2140b91c49c9ad0949e29",
        {"train": "train"},
        _math("problem"),
    ),
    # math-ai/aime24, the collection the hard setting's AIME25 and AMC23 come from (issue 23: HuggingFaceH4/aime_2024
    # is not the paper's source; neither the paper's text nor its artifact names one, see configs/aime24.yaml). The
    # commit is the one a public loader pins beside math-ai/aime25 563bb840 and math-ai/amc23 80815d37 (the commits
    # pinned here for those two): test-00000-of-00001.parquet, 30 rows, fields id/problem/solution/url. Not checked
    # against the hub from this machine.
    "aime24": HubSource(
        "math-ai/aime24",
        None,
        "83a7f387baaa524a8bda0022eac0541582297103",
        {"test": "test"},
        _boxed_solution,
    ),
    "aime25": HubSource(
        "math-ai/aime25", None, "563bb8404243c5f09de6ec262f2db674fe5bce9b", {"test": "test"}, _math("problem", "id")
    ),
    "amc23": HubSource(
        "math-ai/amc23", None, "80815d37005feb82cd7f8fbc6901d5d3eff43057", {"test": "test"}, _math("question", "id")
    ),
    "math500": HubSource(
        "HuggingFaceH4/MATH-500",
        None,
        "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be",
        {"test": "test"},
        _math("problem", "unique_id"),
    ),
    "commonsense_qa": HubSource(
        "tau/commonsense_qa", None, "94630fe30dad47192a8546eb75f094926d47e155", {"test": "validation"}, _csqa
    ),
    "hotpotqa": HubSource(
        "hotpotqa/hotpot_qa",
        "distractor",
        "1908d6afbbead072334abe2965f91bd2709910ab",
        {"test": "validation"},
        _hotpot,
    ),
    "gpqa_diamond": HubSource(  # gated on the hub: needs HF_TOKEN, or a local mirror via ESBENCH_DATASETS_DIR
        "Idavidrein/gpqa", "gpqa_diamond", "633f5ee89ab8ad4522a9f850766b73f62147ffdd", {"test": "train"}, _gpqa
    ),
    "mbpp": HubSource(
        "google-research-datasets/mbpp",
        "sanitized",
        "4bb6404fdc6cacfda99d4ac4205087b89d32030c",
        {"test": "test"},
        _mbpp,
    ),
    "countdown": HubSource("HuggingFaceTB/Countdown-Task-GOLD", "test", None, {"test": "test"}, _countdown),
}

# Sources whose revision could not be confirmed offline; pin them on a machine with hub access.
UNPINNED = frozenset(name for name, s in SOURCES.items() if s.revision is None)
