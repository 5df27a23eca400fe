"""lm-eval renders every paper task exactly as training does: its family's system prompt (or Countdown's own
messages) through the chat template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esbench.tasks import LM_EVAL_DIR, TASKS, get_task, hub

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "datasets"
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture
def chat_tiny(tiny_model_dir):
    from esbench.models import load_model

    loaded = load_model(str(tiny_model_dir))
    loaded.tokenizer.chat_template = TEMPLATE
    return loaded


def _contexts(res, task):
    out = []
    for s in sorted(res["samples"][task], key=lambda s: s["doc_id"]):
        args = s["arguments"]
        first = args[0] if isinstance(args, list) else next(iter(args.values()))
        out.append(first[0] if isinstance(first, list | tuple) else first["arg_0"])
    return out


CHAT_EVAL_TASKS = sorted(n for n, t in TASKS.items() if t.chat and (LM_EVAL_DIR / f"{n}.yaml").exists())


@pytest.mark.parametrize("name", CHAT_EVAL_TASKS)
def test_lm_eval_context_equals_the_training_prompt(name, chat_tiny, monkeypatch):
    """Through the backend's lm-eval adapter, the chat-templated context lm-eval builds is the training prompt."""
    from lm_eval.tasks import TaskManager

    from esbench.backends.hf import HFBackend
    from esbench.evaluation import _run_lm_eval, task_config

    monkeypatch.setenv(hub.ENV_DIR, str(FIXTURES))
    task = get_task(name)
    lm = HFBackend(chat_tiny.model, chat_tiny.tokenizer, device="cpu").lm_eval_model()
    tm = TaskManager(include_path=str(LM_EVAL_DIR), include_defaults=False)
    config = task_config(name, 2, 0.6, 1.0, 4)
    res = _run_lm_eval(lm, tm, [config], 3, 0, task.chat)
    rows = task.rows("test", 3)
    assert _contexts(res, name) == [task.prompt(r, chat_tiny.tokenizer) for r in rows]


def test_a_synthetic_task_keeps_its_plain_prompt(chat_tiny):
    """No chat template, no system prompt, even when the tokenizer has a template."""
    from lm_eval.tasks import TaskManager

    from esbench.backends.hf import HFBackend
    from esbench.evaluation import _run_lm_eval, task_config

    lm = HFBackend(chat_tiny.model, chat_tiny.tokenizer, device="cpu").lm_eval_model()
    tm = TaskManager(include_path=str(LM_EVAL_DIR), include_defaults=False)
    res = _run_lm_eval(lm, tm, [task_config("tiny_arith", 1, 0.0, 1.0, 4)], 1, 0, False)
    plain = get_task("tiny_arith")
    assert _contexts(res, "tiny_arith") == [plain.prompt(plain.rows("test", 1)[0])]


def _small_eval(task: str, **kw) -> dict:
    """A few problems, a few tokens, sampled at temperature 1: enough to exercise a paper task's path."""
    fixed = {"held_out": [], "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 4, "greedy": False}
    return {"tasks": [task], **fixed, **kw}


def test_evaluate_scores_a_paper_task_with_math_verify(chat_tiny, tmp_path, monkeypatch):
    from esbench.backends.hf import HFBackend
    from esbench.evaluation import evaluate
    from esbench.spec_schema import EvalSpec

    monkeypatch.setenv(hub.ENV_DIR, str(FIXTURES))
    ev = _small_eval("gsm8k", limit=3, n=2, k=[1, 2], entropy=False)
    metrics = evaluate(HFBackend(chat_tiny.model, chat_tiny.tokenizer, device="cpu"), EvalSpec(**ev), 0, tmp_path)
    assert metrics["gsm8k"]["problems"] == 3 and metrics["gsm8k"]["n"] == 2
    lines = (tmp_path / "samples" / "gsm8k.jsonl").read_text().splitlines()
    assert len(lines) == 3 and '"answer": "36000"' in lines[1]


def test_evaluate_keeps_countdown_messages_so_its_prompt_can_be_rebuilt(chat_tiny, tmp_path, monkeypatch):
    """The token-entropy pass re-renders each sample's prompt from the logged doc: Countdown needs its messages."""
    from esbench.backends.hf import HFBackend
    from esbench.evaluation import evaluate
    from esbench.spec_schema import EvalSpec

    monkeypatch.setenv(hub.ENV_DIR, str(FIXTURES))
    ev = _small_eval("countdown", limit=2, n=1, k=[1], entropy=True)
    metrics = evaluate(HFBackend(chat_tiny.model, chat_tiny.tokenizer, device="cpu"), EvalSpec(**ev), 0, tmp_path)
    assert metrics["countdown"]["problems"] == 2 and "entropy" in metrics["countdown"]
    docs = [json.loads(line)["doc"] for line in (tmp_path / "samples" / "countdown.jsonl").read_text().splitlines()]
    rows = get_task("countdown").rows("test")
    assert docs == [{k: r[k] for k in ("id", "question", "answer", "messages")} for r in rows]
