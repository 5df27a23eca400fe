"""Token entropy (`Backend.token_entropy`) on a model whose next-token distributions are known, and the training
probe's guarantees."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from esbench.backends.hf import HFBackend
from esbench.metrics.entropy import Probe


class CharTokenizer:
    pad_token_id = 0

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [1 + (ord(c) % 20) for c in text]}


class PositionModel(torch.nn.Module):
    """At position t the next-token distribution is uniform over t+1 tokens: entropy ln(t+1), known exactly."""

    vocab = 64

    def __init__(self):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask):
        b, w = input_ids.shape
        logits = torch.full((b, w, self.vocab), -1e9)
        for t in range(w):
            logits[:, t, : t + 1] = 0.0
        return SimpleNamespace(logits=logits)


def test_entropy_averages_only_response_tokens():
    backend = HFBackend(PositionModel(), CharTokenizer(), device="cpu")
    out = backend.token_entropy(["abc", "hello"], ["xy", "z"])
    # response "xy" after a 3-token prompt is predicted at positions 2, 3; "z" after 5 tokens at position 4
    expected = (math.log(3) + math.log(4) + math.log(5)) / 3
    assert out["tokens"] == 3
    assert out["entropy"] == pytest.approx(expected, rel=1e-5)


def test_batching_and_padding_do_not_change_the_value():
    backend = HFBackend(PositionModel(), CharTokenizer(), device="cpu")
    prompts = ["a", "bbbbbbb", "cc", "d", "eeee"]
    responses = ["xyz", "q", "", "long response", "w"]
    one = backend.token_entropy(prompts, responses, batch_size=1)
    all_ = backend.token_entropy(prompts, responses, batch_size=64)
    assert one["tokens"] == all_["tokens"] == 3 + 1 + 0 + 13 + 1  # an empty response contributes nothing
    assert one["entropy"] == pytest.approx(all_["entropy"], rel=1e-6)


def test_probe_is_repeatable_and_leaves_the_global_random_stream_alone(tiny_model_dir):
    from esbench.models import load_model
    from esbench.tasks import get_task

    loaded = load_model(path="builtin:tiny")
    backend = HFBackend(loaded.model, loaded.tokenizer, device="cpu")
    task = get_task("tiny_arith")
    rows = task.rows("test", 6)
    probe = Probe([task.prompt(r) for r in rows], [r["answer"] for r in rows], task.verify, samples=3, seed=5)

    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    first = probe(backend)
    assert torch.equal(torch.rand(3), expected_next)  # a probe inside training must not shift the trainer's RNG
    second = probe(backend)
    assert first == second
    assert first["tokens"] > 0 and 0 < first["entropy"] < math.log(loaded.model.config.vocab_size)
    assert 0.0 <= first["success"] <= 1.0
