"""Token entropy of a policy on its own responses, and the fixed-probe measurement logged during training.

The paper (arXiv 2608.27351, Fig. 2a–b) tracks the mean per-token entropy of sampled responses on a held-out task
during GSM8K training: GRPO's collapses, ES's does not. Here the entropy is that of the model's full next-token
distribution at temperature 1 (the policy itself, independent of the sampling temperature), teacher-forced on
each response, averaged over response tokens. TRL's logged `entropy` is the same quantity on GRPO's own training
completions; the probe measures ES and GRPO alike on one fixed prompt set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@torch.no_grad()
def token_entropy(model, tokenizer, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 64) -> dict:
    """Mean entropy (nats) of the next-token distribution over the tokens of each response given its prompt.

    Returns the token-weighted mean over all responses and the count of tokens it averages.
    """
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for start in range(0, len(prompts), batch_size):
        seqs, spans = [], []
        for p, r in zip(prompts[start : start + batch_size], responses[start : start + batch_size], strict=True):
            p_ids = tokenizer(p, add_special_tokens=False)["input_ids"]
            r_ids = tokenizer(r, add_special_tokens=False)["input_ids"]
            if not r_ids:
                continue
            seqs.append(p_ids + r_ids)
            spans.append((len(p_ids), len(r_ids)))
        if not seqs:
            continue
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        logits = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device)).logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        ent = -(logp.exp() * logp).sum(-1)  # [batch, width]
        for i, (p_len, r_len) in enumerate(spans):
            # position t predicts token t+1: response tokens p_len..p_len+r_len-1 are predicted at p_len-1..
            total += float(ent[i, max(p_len - 1, 0) : p_len - 1 + r_len].sum())
            count += r_len
    model.train(was_training)
    return {"entropy": total / count if count else float("nan"), "tokens": count}


@dataclass
class Probe:
    """A fixed probe set measured during training: sampled responses' token entropy and their success rate.

    Same prompts, same sampling seed at every probe, so the curve reflects the weights, not the draw.
    """

    prompts: list[str]
    golds: list[str]
    verify: object  # callable (response, gold) -> Verdict
    samples: int = 4
    temperature: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    every: int = 10

    @torch.no_grad()
    def __call__(self, model, tokenizer) -> dict:
        from esbench.backends.hf import HFBackend

        was_training = model.training
        model.eval()
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):  # the probe must not shift the trainer's random stream
            gens = HFBackend(model, tokenizer).generate(
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
        out = token_entropy(model, tokenizer, prompts, texts)
        model.train(was_training)
        return {
            "entropy": out["entropy"],
            "tokens": out["tokens"],
            "success": sum(v.correct for v in verdicts) / len(verdicts),
            "format_rate": sum(v.formatted for v in verdicts) / len(verdicts),
        }
