"""The Hugging Face backend: transformers `generate` on the in-memory model, on CPU or one GPU.

Decoding is explicit and complete (`esbench.backends.NEUTRAL_SAMPLER`). transformers fills every setting left unset
in a passed `GenerationConfig` from `model.generation_config` (the model folder's generation_config.json) and then
from its global defaults, which include `top_k=50`. So each call sets every setting that changes the token
distribution, and runs with `model.generation_config` swapped for an empty one: nothing from the folder leaks in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from esbench.backends import NEUTRAL_SAMPLER, SAMPLER_SETTINGS, DevicePolicy, Generation, chunks, resolve_device
from esbench.es.weights import Precision, WeightEditor


def stop_ids(model, tokenizer) -> list[int]:
    """EOS ids from the tokenizer and the model config (never from generation_config.json), in a stable order."""
    ids: list[int] = []
    for source in (tokenizer.eos_token_id, getattr(model.config, "eos_token_id", None)):
        for i in source if isinstance(source, list | tuple) else [source]:
            if i is not None and i not in ids:
                ids.append(int(i))
    return ids


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """The text before the first occurrence of any stop string: lm-eval's own `until` post-processing."""
    from lm_eval.models.utils import postprocess_generated_text

    return postprocess_generated_text(text, list(stop), None)


class HFBackend:
    kind = "hf"

    def __init__(
        self, model, tokenizer, *, device: DevicePolicy = "auto", cpu_threads: int | None = None, batch_size: int = 256
    ):
        self.device_policy = device
        resolved = resolve_device(device)
        if resolved == "cpu" and cpu_threads is not None:
            torch.set_num_threads(cpu_threads)  # results depend on it on CPU: the cell spec fixes it
        self.model = model.to(resolved)
        self.model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size  # sequences per generate call (prompts per call = batch_size // n)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    # ---------------------------------------------------------------------------------------------------------
    # decoding

    def generation_config(self, temperature: float, top_p: float, max_new_tokens: int, n: int):
        """The full decoding config of one call; every distribution-changing setting is explicit."""
        from transformers import GenerationConfig

        tok = self.tokenizer
        sampled = temperature > 0
        return GenerationConfig(
            do_sample=sampled,
            temperature=temperature if sampled else 1.0,
            top_p=top_p if sampled else 1.0,
            top_k=0,  # off (transformers' global default is 50)
            min_p=None,
            typical_p=1.0,
            epsilon_cutoff=0.0,
            eta_cutoff=0.0,
            repetition_penalty=SAMPLER_SETTINGS["repetition_penalty"],
            encoder_repetition_penalty=1.0,
            no_repeat_ngram_size=SAMPLER_SETTINGS["no_repeat_ngram_size"],
            encoder_no_repeat_ngram_size=0,
            min_new_tokens=SAMPLER_SETTINGS["min_new_tokens"],  # (min_length left unset: transformers warns on both)
            max_new_tokens=max_new_tokens,
            num_beams=1,
            num_return_sequences=n,
            length_penalty=1.0,
            bad_words_ids=None,
            suppress_tokens=None,
            begin_suppress_tokens=None,
            forced_bos_token_id=None,
            forced_eos_token_id=None,
            exponential_decay_length_penalty=None,
            sequence_bias=None,
            renormalize_logits=False,
            remove_invalid_values=False,
            eos_token_id=stop_ids(self.model, tok),
            pad_token_id=tok.pad_token_id,
            bos_token_id=tok.bos_token_id,
        )

    @contextlib.contextmanager
    def neutral_decoding(self) -> Iterator[None]:
        """`model.generation_config` is empty for the block: a caller's unset settings fall to transformers' own
        defaults, never to the model folder's (TRL's GRPO rollouts run inside this too)."""
        from transformers import GenerationConfig

        saved = self.model.generation_config
        self.model.generation_config = GenerationConfig()
        try:
            yield
        finally:
            self.model.generation_config = saved

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[str],
        *,
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | None = None,
        stop: Sequence[str] = (),
    ) -> list[list[Generation]]:
        """`n` completions per prompt; greedy when temperature is 0, else sampled (seeded if `seed` is given).

        Prompts are tokenised as they are (no special tokens added: a chat template already carries its own), and
        a prompt's `n` samples come from one batched call (`num_return_sequences`), so the prompt is encoded once.
        """
        if temperature == 0 and n > 1:  # greedy: n copies of one deterministic answer
            return [[g[0]] * n for g in self.generate(prompts, max_new_tokens=max_new_tokens, stop=stop)]
        tok = self.tokenizer
        if seed is not None:
            torch.manual_seed(seed)
        config = self.generation_config(temperature, top_p, max_new_tokens, n)
        stop = [s for s in stop if s]
        extra: dict[str, Any] = {"stop_strings": stop, "tokenizer": tok} if stop else {}
        out: list[list[Generation]] = []
        was_training = self.model.training
        self.model.eval()
        with self.neutral_decoding():
            for chunk in chunks(list(prompts), max(1, self.batch_size // n)):
                enc = tok(list(chunk), return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
                ids = self.model.generate(**enc, generation_config=config, **extra)
                new = ids[:, enc["input_ids"].shape[1] :]
                texts = tok.batch_decode(new, skip_special_tokens=True)
                lengths = (new != tok.pad_token_id).sum(dim=1).tolist()
                for i in range(len(chunk)):
                    out.append([Generation(cut_at_stop(texts[i * n + j], stop), lengths[i * n + j]) for j in range(n)])
        self.model.train(was_training)
        return out

    @torch.no_grad()
    def _teacher_forced(self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 64):
        """Yield (response index, log-softmax rows predicting the response's tokens, their ids) per response,
        teacher-forced at temperature 1 (the policy itself). Empty responses are skipped."""
        model, tok = self.model, self.tokenizer
        was_training = model.training
        model.eval()
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        try:
            for start in range(0, len(prompts), batch_size):
                seqs, spans = [], []
                batch = zip(prompts[start : start + batch_size], responses[start : start + batch_size], strict=True)
                for i, (p, r) in enumerate(batch, start):
                    p_ids = tok(p, add_special_tokens=False)["input_ids"]
                    r_ids = tok(r, add_special_tokens=False)["input_ids"]
                    if r_ids:
                        seqs.append(p_ids + r_ids)
                        spans.append((i, len(p_ids), r_ids))
                if not seqs:
                    continue
                width = max(len(s) for s in seqs)
                ids = torch.full((len(seqs), width), pad, dtype=torch.long)
                mask = torch.zeros((len(seqs), width), dtype=torch.long)
                for j, s in enumerate(seqs):
                    ids[j, : len(s)] = torch.tensor(s)
                    mask[j, : len(s)] = 1
                with torch.no_grad():
                    logits = model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits.float()
                logp = torch.log_softmax(logits, dim=-1)
                for j, (i, p_len, r_ids) in enumerate(spans):
                    # position t predicts token t+1: response tokens p_len.. are predicted at p_len-1..
                    yield i, logp[j, max(p_len - 1, 0) : p_len - 1 + len(r_ids)], r_ids
        finally:
            model.train(was_training)

    def token_entropy(self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 64) -> dict:
        """Mean entropy (nats) of the full next-token distribution over each response's tokens, given its prompt.

        Temperature 1 (the policy itself), teacher-forced; the token-weighted mean over all responses, and the
        count of tokens it averages.
        """
        total, count = 0.0, 0
        for _, logp, r_ids in self._teacher_forced(prompts, responses, batch_size):
            total += float(-(logp.exp() * logp).sum())
            count += len(r_ids)
        return {"entropy": total / count if count else float("nan"), "tokens": count}

    def token_logprobs(self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 64) -> list:
        """log π(yₜ | x, y<ₜ) of each response token, teacher-forced; [] for an empty response."""
        out: list[list[float]] = [[] for _ in prompts]
        for i, logp, r_ids in self._teacher_forced(prompts, responses, batch_size):
            out[i] = logp.gather(-1, torch.tensor(r_ids, device=logp.device)[:, None])[:, 0].tolist()
        return out

    # ---------------------------------------------------------------------------------------------------------
    # weights

    def weight_editor(self, precision: Precision = "fp32-master", noise: str = "torch") -> WeightEditor:
        return WeightEditor(self.parameters(), precision, noise)

    def parameters(self) -> dict[str, torch.Tensor]:
        seen: set[int] = set()
        out = {}
        for name, p in self.model.named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out[name] = p.data
        return out

    @torch.no_grad()
    def load_parameters(self, state: Mapping[str, torch.Tensor]) -> None:
        for name, p in self.parameters().items():
            p.copy_(state[name].to(device=p.device, dtype=p.dtype))

    @contextlib.contextmanager
    def swapped_parameters(self, state: Mapping[str, torch.Tensor]) -> Iterator[None]:
        saved = {n: p.clone() for n, p in self.parameters().items()}
        self.load_parameters(state)
        try:
            yield
        finally:
            self.load_parameters(saved)

    def cast(self, dtype: torch.dtype) -> None:
        self.model.to(dtype)

    def checksum(self) -> str:
        """A cheap fingerprint of the weights under their HF names (compared across ES replicas after updates)."""
        from esbench.es.weights import tensor_checksums, weights_digest

        return weights_digest(tensor_checksums(self.parameters()))

    def state_hash(self) -> str:
        from esbench.models import state_hash

        return state_hash(self.model)

    def save(self, directory: Path) -> None:
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    # ---------------------------------------------------------------------------------------------------------
    # evaluation and provenance

    def lm_eval_model(self):
        from esbench.backends.lm_eval_adapter import BackendLM

        return BackendLM(self)

    def provenance(self) -> dict[str, Any]:
        device = self.device
        return {
            "kind": self.kind,
            "device_policy": self.device_policy,
            "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dtype": str(self.dtype).removeprefix("torch."),
            "cpu_threads": torch.get_num_threads() if device.type == "cpu" else None,
            "sampler": NEUTRAL_SAMPLER,
        }
