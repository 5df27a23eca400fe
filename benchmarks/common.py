"""Shared pieces of the benchmarks: random-init model configs, model loading, timing and peak memory."""

from __future__ import annotations

import time

import torch

# Random-init Llama configs; nothing is downloaded.
CONFIGS = {
    "llama-100m": dict(
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=10,
        num_attention_heads=12,
        num_key_value_heads=4,
        vocab_size=32000,
        tie_word_embeddings=True,
    ),
    "llama-0.5b": dict(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
        num_key_value_heads=8,
        vocab_size=32000,
        tie_word_embeddings=True,
    ),
    "llama-1b": dict(
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=32000,
        tie_word_embeddings=True,
    ),
}


def load(name: str, device: str, dtype: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    from esbench.models import load_model
    from esbench.models.tiny import build_tokenizer

    if name == "tiny":
        loaded = load_model("builtin:tiny", dtype=dtype)
        return loaded.model.to(device), loaded.tokenizer, [r["question"] + "\n" for r in _rows()]
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**CONFIGS[name], max_position_embeddings=512)).to(getattr(torch, dtype))
    tok = build_tokenizer(512)  # random-init model: any tokenizer gives the same cost per token
    model.config.pad_token_id = tok.pad_token_id
    return model.to(device).eval(), tok, [r["question"] + "\n" for r in _rows()]


def _rows():
    from esbench.tasks import get_task

    return get_task("tiny_arith").rows("train", 256)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str) -> float:
    sync(device)
    t = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t


class PeakRSS:
    """Highest resident set size seen while the block runs, sampled every millisecond from /proc/self/statm,
    minus the RSS at entry: what the phase itself adds on top of the loaded model."""

    def __enter__(self):
        import os
        import threading

        self._page = os.sysconf("SC_PAGE_SIZE")
        self.base = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def _watch(self):
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, self._rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())
