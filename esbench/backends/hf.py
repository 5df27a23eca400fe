"""Generation through Hugging Face transformers `generate` on the in-memory model (CPU or one GPU).

Recipes talk to generation only through `Backend.generate` and edit weights only through
`Backend.weight_editor`, so a vLLM backend can run the same recipe with the edits applied inside its workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from esbench.es.weights import Precision, WeightEditor


@dataclass
class Generation:
    text: str
    tokens: int  # generated tokens, excluding padding and the prompt


class HFBackend:
    name = "hf"

    def __init__(self, model, tokenizer, batch_size: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    def weight_editor(self, precision: Precision) -> WeightEditor:
        return WeightEditor.for_model(self.model, precision)

    @torch.no_grad()
    def generate(
        self,
        prompts: list[str],
        *,
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | None = None,
    ) -> list[list[Generation]]:
        """`n` completions per prompt; greedy when temperature is 0, else sampled (seeded if `seed` is given)."""
        tok = self.tokenizer
        if seed is not None:
            torch.manual_seed(seed)
        out: list[list[Generation]] = []
        per_batch = max(1, self.batch_size // n)
        for start in range(0, len(prompts), per_batch):
            chunk = prompts[start : start + per_batch]
            enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
            kwargs = (
                {"do_sample": False}
                if temperature == 0
                else {"do_sample": True, "temperature": temperature, "top_p": top_p}
            )
            ids = self.model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                num_return_sequences=n,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                **kwargs,
            )
            new = ids[:, enc["input_ids"].shape[1] :]
            texts = tok.batch_decode(new, skip_special_tokens=True)
            lengths = (new != tok.pad_token_id).sum(dim=1).tolist()
            for i in range(len(chunk)):
                out.append([Generation(texts[i * n + j], lengths[i * n + j]) for j in range(n)])
        return out
