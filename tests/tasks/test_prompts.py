"""The paper's prompts (App. G.4) rendered for every task family, checked against literal strings: the system
prompts are written out here byte for byte rather than imported, so an edit to them in `esbench.tasks` fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esbench.tasks import TASKS, get_task, hub
from esbench.tasks.configs.utils import chat_doc_fields

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "datasets"
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

MATH = "Please reason step by step, and put your final answer within \\boxed{}."
CHOICE = (
    "Please reason step by step to solve the following multiple-choice question. Put your final choice letter "
    "inside \\boxed{}, e.g., \\boxed{C}."
)
OPEN_QA = (
    "Answer the question using the provided context. Keep the final answer short, and put it inside <answer> "
    "</answer> tags."
)
CODE = (
    "You are a Python programming assistant. Write clean, correct Python code that passes the given tests. The "
    "function name and signature must match exactly as specified in the test cases. The final code block must not "
    "include the tests; do not include the tests in your answer. Do not include explanations or text outside the code "
    "block. Output exactly one Python markdown code block containing only the final solution code."
)

# the user message of the first fixture row of each task, exactly
USER = {
    "gsm8k": "Janet has 3 apples and buys 2 more. How many apples does she have?",
    "commonsense_qa": "A revolving door is convenient for two direction travel, but it also serves as a security "
    "measure at a what?\n\nA. bank\nB. library\nC. department store\nD. mall\nE. new york",
    # options shuffled with a seed from the record id: photon lands on B
    "gpqa_diamond": "Which particle mediates the electromagnetic force?\n\n"
    "A. gluon\nB. photon\nC. graviton\nD. W boson",
    "hotpotqa": "Context:\nScott Derrickson: Scott Derrickson is an American director.\n\n"
    "Ed Wood: Edward Wood Jr. was an American filmmaker.\n\n"
    "Question: Were Scott Derrickson and Ed Wood of the same nationality?",
    "mbpp": "Task: Write a python function to remove first and last occurrence of a given character from the string.\n"
    'Test Cases: assert remove_Occ("hello","l") == "heo"\nassert remove_Occ("abcda","a") == "bcd"\n'
    'assert remove_Occ("PHP","P") == "H"',
}
SYSTEM = {"gsm8k": MATH, "commonsense_qa": CHOICE, "gpqa_diamond": CHOICE, "hotpotqa": OPEN_QA, "mbpp": CODE}


@pytest.fixture(autouse=True)
def _mirror(monkeypatch):
    monkeypatch.setenv(hub.ENV_DIR, str(FIXTURES))


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(tiny_model_dir)
    t.chat_template = TEMPLATE
    return t


@pytest.mark.parametrize("name", sorted(SYSTEM))
def test_each_family_renders_its_system_prompt_and_user_message(name, tok):
    task = get_task(name)
    row = task.rows("test")[0]
    assert task.prompt(row, tok) == f"<|system|>{SYSTEM[name]}\n<|user|>{USER[name]}\n<|assistant|>"


def test_every_paper_task_has_the_system_prompt_of_its_family():
    family = {"math": MATH, "choice": CHOICE, "hotpot": OPEN_QA, "mbpp": CODE, "countdown": None}
    for name, task in TASKS.items():
        if task.source is None:
            assert not task.chat and task.system_prompt is None, name  # tiny tasks: plain prompts
        else:
            assert task.chat and task.system_prompt == family[task.verifier], name


def test_no_esbench_instruction_is_appended():
    for name in ("commonsense_qa", "gpqa_diamond", "hotpotqa", "mbpp"):
        for row in get_task(name).rows("test"):
            q = row["question"]
            assert "Answer with" not in q and "code block" not in q and not q.endswith("\n"), name


def test_countdown_renders_the_dataset_messages_unchanged(tok):
    """No system prompt of ours, no rewriting: the dataset's own messages, trailing whitespace included."""
    task = get_task("countdown")
    assert task.chat and task.system_prompt is None
    raw = [json.loads(line) for line in (FIXTURES / hub.SOURCES["countdown"].path / "test" / "test.jsonl").open()]
    rows = task.rows("test")
    assert len(rows) == len(raw) == 2
    for row, r in zip(rows, raw, strict=True):
        assert task.messages(row) == r["prompt"]
        expected = "".join(f"<|{m['role']}|>{m['content']}\n" for m in r["prompt"]) + "<|assistant|>"
        assert task.prompt(row, tok) == expected
        assert row["question"] == r["prompt"][-1]["content"]
    assert rows[1]["question"].endswith("</answer>.\n  ")


def test_a_chat_task_without_a_system_prompt_needs_the_rows_messages():
    with pytest.raises(ValueError, match="no 'messages'"):
        get_task("countdown").messages({"id": "x", "question": "q", "answer": "{}"})


def test_lm_eval_fields_of_a_chat_doc():
    """lm-eval renders `description: system` and the question; a conversation of another shape fails loudly."""
    task = get_task("countdown")

    def row(messages):
        return {"id": "x", "question": messages[-1]["content"], "answer": "{}", "messages": json.dumps(messages)}

    sys_user = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert chat_doc_fields(task, row(sys_user)) == {"system": "S"}
    assert chat_doc_fields(task, row(sys_user[1:])) == {"system": ""}
    for bad in (
        [*sys_user, {"role": "assistant", "content": "A"}, {"role": "user", "content": "U2"}],  # several turns
        [{"role": "system", "content": ""}, {"role": "user", "content": "U"}],  # lm-eval would drop an empty system
        [{"role": "user", "content": "U"}, {"role": "system", "content": "S"}],  # order
    ):
        with pytest.raises(ValueError, match="cannot be rendered by lm-eval"):
            chat_doc_fields(task, row(bad))
    mismatch = {**row(sys_user), "question": "other"}
    with pytest.raises(ValueError, match="not the row's question"):
        chat_doc_fields(task, mismatch)
    assert chat_doc_fields(get_task("mbpp"), get_task("mbpp").rows("test")[0]) == {"system": CODE}


def test_every_chat_config_takes_its_system_message_from_the_doc_and_versions_agree():
    from esbench.tasks import LM_EVAL_DIR

    for path in sorted(LM_EVAL_DIR.glob("*.yaml")):
        task = get_task(path.stem)
        text = path.read_text()
        assert ("\ndescription: system\n" in text) is task.chat, path.name
        assert '--system_instruction "' not in text, path.name
        version = text.split("metadata:\n  version: ")[1].split()[0]
        assert float(version) == task.version, path.name
