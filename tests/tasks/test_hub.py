"""The paper's datasets: hand-written rows in each dataset's real schema, loaded through `datasets.load_dataset`
from a local mirror (the same call that reads the pinned hub revision), normalised, and checked by their verifiers."""

from __future__ import annotations

import json
import re

import pytest

from esbench.tasks import LM_EVAL_DIR, TASKS, get_task, hub, rows_hash

FIXTURES = __import__("pathlib").Path(__file__).resolve().parent.parent / "fixtures" / "datasets"
HUB_TASKS = sorted(name for name, t in TASKS.items() if (t.source or "").startswith("hub:"))
EVAL_SPLIT = {name: "train" if name == "deepscaler" else "test" for name in HUB_TASKS}

# a correct response per task, in the answer format its family's system prompt asks for
CORRECT = {
    "gsm8k": "3 + 2 = 5, so \\boxed{5}",
    "deepscaler": "\\boxed{\\dfrac{5}{6}}",
    "aime24": "2^10 = 1024, so the remainder is \\boxed{24}.",
    "aime25": "\\boxed{1001}",
    "amc23": "\\sqrt{16} = \\boxed{4}",
    "math500": "\\boxed{\\frac{3}{4}}",
    "commonsense_qa": "Banks guard money. \\boxed{A}",
    "gpqa_diamond": lambda row: f"The photon. \\boxed{{{row['answer']}}}",  # the letter depends on the shuffle
    "hotpotqa": "Both are American. <answer>yes</answer>",
    "countdown": "<think>44 + 19 = 63, 63 + 35 = 98</think> <answer>44 + 19 + 35</answer>",
    "mbpp": "```python\ndef remove_Occ(s, ch):\n    s = s.replace(ch, '', 1)\n    i = s.rfind(ch)\n"
    "    return s[:i] + s[i + 1:] if i >= 0 else s\n```",
}


@pytest.fixture(autouse=True)
def _mirror(monkeypatch):
    monkeypatch.setenv(hub.ENV_DIR, str(FIXTURES))


def test_every_paper_task_has_a_fixture_and_a_correct_response():
    assert set(CORRECT) == set(HUB_TASKS)
    for name in HUB_TASKS:
        assert hub.SOURCES[name].local_dir() is not None, name


@pytest.mark.parametrize("name", HUB_TASKS)
def test_rows_are_normalised_with_string_answers_and_verify(name):
    task = get_task(name)
    rows = task.rows(EVAL_SPLIT[name])
    assert rows
    for row in rows:  # Countdown rows also carry the dataset's own chat messages
        assert set(row) == {"id", "question", "answer"} | ({"messages"} if name == "countdown" else set())
        assert all(isinstance(v, str) and v for v in row.values())
    correct = CORRECT[name](rows[0]) if callable(CORRECT[name]) else CORRECT[name]
    assert task.verify(correct, rows[0]["answer"]).correct
    assert not task.verify("I don't know.", rows[0]["answer"]).correct


def test_gsm8k_gold_follows_the_hash_rule_commas_and_negatives():
    rows = get_task("gsm8k").rows("test")
    assert [r["answer"] for r in rows] == ["5", "36000", "-5"]
    assert get_task("gsm8k").rows("train")[0]["answer"] == "10"
    assert get_task("gsm8k").verify("\\boxed{36,000}", rows[1]["answer"]).correct


def test_structured_golds_are_json():
    cd = json.loads(get_task("countdown").rows("test")[0]["answer"])
    assert cd == {"target": 98, "nums": [44, 19, 35]}
    mb = json.loads(get_task("mbpp").rows("test")[1]["answer"])
    assert mb["test_imports"] == ["import math"] and mb["test_list"] == ["assert sq(9) == 3.0"]
    q = get_task("mbpp").rows("test")[0]["question"]
    assert 'Test Cases: assert remove_Occ("hello","l") == "heo"\n' in q  # the tests are shown (App. G.4)


def test_multiple_choice_rows_show_options_and_gpqa_shuffles_deterministically():
    csqa = get_task("commonsense_qa").rows("test")[0]
    assert "\nA. bank\n" in csqa["question"] and csqa["answer"] == "A"
    gpqa = get_task("gpqa_diamond").rows("test")
    again = get_task("gpqa_diamond").rows("test")
    assert gpqa == again
    for row, correct in zip(gpqa, ["photon", "7"], strict=True):
        letter = row["answer"]
        assert re.search(rf"^{letter}\. {re.escape(correct)}$", row["question"], re.M)


def test_hotpot_question_carries_the_distractor_context():
    row = get_task("hotpotqa").rows("test")[0]
    assert "Scott Derrickson: Scott Derrickson is an American director." in row["question"]
    assert row["question"].endswith("\n\nQuestion: Were Scott Derrickson and Ed Wood of the same nationality?")


def test_size_takes_a_prefix_and_hash_is_stable():
    task = get_task("math500")
    assert task.rows("test", 1) == task.rows("test")[:1]
    assert rows_hash(task.rows("test")) == rows_hash(task.rows("test"))


def test_missing_split_is_an_error():
    with pytest.raises(ValueError, match="no 'test' split"):
        get_task("deepscaler").rows("test")


def test_provenance_names_hub_id_revision_and_split():
    prov = get_task("gsm8k").provenance("test")
    assert prov["hub_id"] == "openai/gsm8k" and prov["config"] == "main" and prov["split"] == "test"
    assert prov["revision"] == hub.SOURCES["gsm8k"].revision
    assert prov["local_mirror"].endswith("openai/gsm8k/main")


def test_revisions_are_commits_or_listed_as_unpinned():
    for name, src in hub.SOURCES.items():
        if name in hub.UNPINNED:
            assert src.revision is None
        else:
            assert re.fullmatch(r"[0-9a-f]{40}", src.revision), name


def test_hub_path_is_used_without_a_mirror(monkeypatch):
    """Without a mirror the loader asks `datasets` for the pinned hub revision (offline here, so it must fail)."""
    calls = []

    def fake(path, name=None, revision=None, split=None):
        calls.append((path, name, revision, split))
        raise ConnectionError("offline")

    monkeypatch.delenv(hub.ENV_DIR)
    monkeypatch.setattr("datasets.load_dataset", fake)
    with pytest.raises(ConnectionError):
        get_task("gsm8k").rows("test")
    assert calls == [("openai/gsm8k", "main", hub.SOURCES["gsm8k"].revision, "test")]


@pytest.mark.parametrize("name", [n for n in HUB_TASKS if n != "deepscaler"] + ["gsm_symbolic"])
def test_every_eval_task_ships_an_lm_eval_config(name):
    text = (LM_EVAL_DIR / f"{name}.yaml").read_text()
    assert f"task: {name}\n" in text and "utils.load_task" in text and 'doc_to_text: "{{question}}"' in text


def test_paper_tasks_are_prompted_through_the_chat_template(tiny_model_dir):
    """The exact strings of every family are in test_prompts.py; here: chat vs plain, and no template is an error."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    row = get_task("gsm8k").rows("test")[0]
    text = get_task("gsm8k").prompt(row, tok)
    assert text.startswith("<|system|>") and text.endswith(f"<|user|>{row['question']}\n<|assistant|>")
    assert get_task("tiny_arith").prompt({"question": "1+1"}) == "1+1\n"  # synthetic tasks stay plain
    with pytest.raises(ValueError, match="chat template"):
        get_task("gsm8k").prompt(row)


def test_gsm_symbolic_is_procedural_seeded_and_verifiable():
    task = get_task("gsm_symbolic")
    test, train = task.rows("test", 5), task.rows("train", 5)
    assert test == task.rows("test", 5)
    assert not {r["question"] for r in test} & {r["question"] for r in train}
    assert task.verify(f"\\boxed{{{test[0]['answer']}}}", test[0]["answer"]).correct
    assert task.provenance("test")["seed"] != task.provenance("train")["seed"]
