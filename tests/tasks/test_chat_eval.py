"""lm-eval renders a paper task exactly as training does: the math system prompt through the chat template."""

from __future__ import annotations

from pathlib import Path

import pytest

from esbench.tasks import get_task, hub

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


def test_lm_eval_context_equals_the_training_prompt(chat_tiny, monkeypatch):
    """Through the backend's lm-eval adapter, the chat-templated context lm-eval builds is the training prompt."""
    from lm_eval.tasks import TaskManager

    from esbench.backends.hf import HFBackend
    from esbench.evaluation import _run_lm_eval, task_config
    from esbench.tasks import LM_EVAL_DIR

    monkeypatch.setenv(hub.ENV_DIR, str(FIXTURES))
    task = get_task("gsm8k")
    lm = HFBackend(chat_tiny.model, chat_tiny.tokenizer, device="cpu").lm_eval_model()
    tm = TaskManager(include_path=str(LM_EVAL_DIR), include_defaults=False)
    config = task_config("gsm8k", 2, 0.6, 1.0, 4)
    res = _run_lm_eval(lm, tm, [config], 2, 0, task.system_prompt)
    rows = task.rows("test", 2)
    assert _contexts(res, "gsm8k") == [task.prompt(r, chat_tiny.tokenizer) for r in rows]
    # and a synthetic task keeps its plain prompt (no chat template, no system prompt)
    res = _run_lm_eval(lm, tm, [task_config("tiny_arith", 1, 0.0, 1.0, 4)], 1, 0, None)
    plain = get_task("tiny_arith")
    assert _contexts(res, "tiny_arith") == [plain.prompt(plain.rows("test", 1)[0])]


def test_evaluate_scores_a_paper_task_with_math_verify(chat_tiny, tmp_path, monkeypatch):
    from esbench.backends.hf import HFBackend
    from esbench.evaluation import evaluate
    from esbench.spec import EvalSpec

    monkeypatch.setenv(hub.ENV_DIR, str(FIXTURES))
    ev = {
        "tasks": ["gsm8k"],
        "held_out": [],
        "limit": 3,
        "n": 2,
        "k": [1, 2],
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 4,
        "greedy": False,
        "entropy": False,
    }
    metrics = evaluate(HFBackend(chat_tiny.model, chat_tiny.tokenizer, device="cpu"), EvalSpec(**ev), 0, tmp_path)
    assert metrics["gsm8k"]["problems"] == 3 and metrics["gsm8k"]["n"] == 2
    lines = (tmp_path / "samples" / "gsm8k.jsonl").read_text().splitlines()
    assert len(lines) == 3 and '"answer": "36000"' in lines[1]
