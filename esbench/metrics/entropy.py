"""Token entropy of a policy on its own responses, and the fixed-probe measurement logged during training.

The paper (arXiv 2608.27351, Fig. 2a–b) tracks the mean per-token entropy of sampled responses on a held-out task
during GSM8K training: GRPO's collapses, ES's does not. Here the entropy is that of the model's full next-token
distribution at temperature 1 (the policy itself, independent of the sampling temperature), teacher-forced on
each response, averaged over response tokens (`Backend.token_entropy` computes it, on the backend's device).
TRL's logged `entropy` is the same quantity on GRPO's own training completions; the probe measures ES and GRPO
alike on one fixed prompt set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from esbench.metrics.passk import mean_pass_at_k


class Graded(Protocol):
    """What the probe reads of a verdict (`esbench.tasks.verdict.Verdict`: tasks sit above metrics, not imported)."""

    @property
    def correct(self) -> bool: ...

    @property
    def formatted(self) -> bool: ...


@dataclass
class Probe:
    """A fixed probe set measured during training: sampled responses' token entropy and their success rate.

    Same prompts, same sampling seed at every probe, so the curve reflects the weights, not the draw.
    """

    prompts: list[str]
    golds: list[str]
    verify: Callable[[str, str], Graded]  # (response, gold) -> Verdict
    samples: int = 4
    temperature: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    every: int = 10

    @torch.no_grad()
    def __call__(self, backend) -> dict:
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):  # the probe must not shift the trainer's random stream
            gens = backend.generate(
                self.prompts,
                n=self.samples,
                temperature=self.temperature,
                max_new_tokens=self.max_new_tokens,
                seed=self.seed,
            )
        prompts = [p for p, g in zip(self.prompts, gens, strict=True) for _ in g]
        texts = [x.text for g in gens for x in g]
        golds = [a for a, g in zip(self.golds, gens, strict=True) for _ in g]
        verdicts = [self.verify(t, a) for t, a in zip(texts, golds, strict=True)]
        out = backend.token_entropy(prompts, texts)
        # Fig. 2 reads Pass@16 and Pass@32 of the held-out probe over training: per-prompt counts give every k ≤ n
        counts, i = [], 0
        for g in gens:
            counts.append([len(g), sum(v.correct for v in verdicts[i : i + len(g)])])
            i += len(g)
        n = min(c[0] for c in counts)
        ks = sorted({k for k in (1, 2, 4, 8, 16, 32, 64) if k <= n} | {n})
        return {
            "entropy": out["entropy"],
            "tokens": out["tokens"],
            "success": sum(v.correct for v in verdicts) / len(verdicts),
            "format_rate": sum(v.formatted for v in verdicts) / len(verdicts),
            "pass@k": {str(k): mean_pass_at_k(counts, k) for k in ks},
        }
