"""Hooks referenced by the lm-eval task configs in this folder (`!function utils.<name>`).

Kept import-light: lm-eval imports this module when it indexes the folder.
"""

from __future__ import annotations


def load_tiny(task: str, family: str, test_size: int = 500, **_: object):
    """The test split of a synthetic family as an HF `DatasetDict` (generated offline, deterministically)."""
    import datasets

    from esbench.tasks import synthetic

    rows = [{**row, "task": task} for row in synthetic.make_split(family, "test", test_size)]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def keep_all(resps, docs):
    """Identity filter: keep all `repeats` responses per document, so Pass@k sees every sample."""
    return resps


def flatten(results: list | tuple) -> list[str]:
    """lm-eval hands over one entry per request instance; with `repeats: n` that entry is the list of n."""
    out: list[str] = []
    for r in results:
        out.extend(flatten(r) if isinstance(r, list | tuple) else [r])
    return out


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """Pass@1 (= mean correctness over the repeats) with the task's esbench verifier.

    esbench recomputes per-problem [n, c], Pass@k and Maj@k from the logged samples with the same verifier; this
    metric is lm-eval's own view of the same numbers, and the two are cross-checked.
    """
    from esbench.tasks import get_task

    task = get_task(doc["task"])
    verdicts = [task.verify(r, doc["answer"]) for r in flatten(results)]
    return {"pass@1": sum(v.correct for v in verdicts) / len(verdicts)}


def chat_doc_fields(task, row: dict) -> dict[str, str]:
    """The fields lm-eval renders a chat task from: `system` (the config's `description: system`; "" for none) and
    the user message in `question` (`doc_to_text`).

    lm-eval builds at most one system and one user message per doc, so a task's `messages(row)` must have exactly
    that shape to come out as `TaskDef.prompt` renders it. The dataset's own Countdown messages are checked row by
    row: any other conversation would be rendered differently by lm-eval, so it fails here instead.
    """
    messages = task.messages(row)
    roles = [m.get("role") for m in messages]
    if roles == ["system", "user"] and messages[0].get("content"):
        system = messages[0]["content"]
    elif roles == ["user"]:
        system = ""
    else:
        raise ValueError(
            f"task {task.name} row {row.get('id')}: messages with roles {roles} (or an empty system message) cannot"
            " be rendered by lm-eval as TaskDef.prompt renders them; expected one optional system and one user message"
        )
    if messages[-1].get("content") != row["question"]:
        raise ValueError(f"task {task.name} row {row.get('id')}: the user message is not the row's question")
    return {"system": system}


def load_task(task: str, **_: object):
    """The test split of any registered task as an HF `DatasetDict` (paper tasks: the pinned hub dataset); chat tasks
    get the `system` field their config renders as the system message (see `chat_doc_fields`)."""
    import datasets

    from esbench.tasks import get_task

    t = get_task(task)
    rows = [{**row, "task": task, **(chat_doc_fields(t, row) if t.chat else {})} for row in t.rows("test")]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
