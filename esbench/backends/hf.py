"""The Hugging Face backend: transformers `generate` on the in-memory model, on CPU or one GPU.

Decoding is explicit and complete (`esbench.backends.NEUTRAL_SAMPLER`). transformers fills every setting left unset
in a passed `GenerationConfig` from `model.generation_config` (the model folder's generation_config.json) and then
from its global defaults, which include `top_k=50`. So each call sets every setting that changes the token
distribution, and runs with `model.generation_config` swapped for an empty one: nothing from the folder leaks in but
its EOS ids, which join the stop set (`esbench.backends.stop_token_ids`, read once when the backend is built).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from esbench.backends import (
    NEUTRAL_SAMPLER,
    SAMPLER_SETTINGS,
    DevicePolicy,
    Generation,
    chunks,
    resolve_device,
    stop_token_ids,
)
from esbench.es.weights import Precision, TensorEditor, WeightEditor


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """The text before the first occurrence of any stop string: lm-eval's own `until` post-processing."""
    from lm_eval.models.utils import postprocess_generated_text

    cut: str = postprocess_generated_text(text, list(stop), None)
    return cut


def _pack(lengths: Sequence[int], token_budget: int, max_seqs: int | None = None) -> list[list[int]]:
    """Indices of sequences in chunks of at most `token_budget` padded tokens (chunk size × its longest), longest
    first so that lengths alike share a chunk; a sequence longer than the budget goes alone."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    for i in order:
        last = out[-1] if out else None
        if last and (len(last) + 1) * lengths[last[0]] <= token_budget and len(last) < (max_seqs or len(lengths)):
            last.append(i)
        else:
            out.append([i])
    return out


def device_provenance(device: torch.device) -> dict[str, Any]:
    """The compute device's part of a backend's provenance (the vLLM backend records its engine's device, not the
    host where its HF copy rests)."""
    return {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cpu_threads": torch.get_num_threads() if device.type == "cpu" else None,
    }


class HFBackend:
    kind = "hf"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        device: DevicePolicy = "auto",
        cpu_threads: int | None = None,
        batch_size: int = 256,
        place: bool = True,
    ):
        """`place=False` leaves the model where it is: the vLLM backend keeps its HF copy on the host while its
        engine holds the weights, and moves it to the device itself when it computes (`VLLMBackend.hf_placement`)."""
        self.device_policy = device
        resolved = resolve_device(device)
        if resolved == "cpu" and cpu_threads is not None:
            torch.set_num_threads(cpu_threads)  # results depend on it on CPU: the cell spec fixes it
        self.model = model.to(resolved) if place else model
        self.model.eval()
        self.tokenizer = tokenizer
        self.stop_token_ids = stop_token_ids(model, tokenizer)  # before any `neutral_decoding` swap
        self.batch_size = batch_size  # sequences per generate call (prompts per call = batch_size // n)

    @property
    def device(self) -> torch.device:
        first: torch.nn.Parameter = next(self.model.parameters())
        return first.device

    @property
    def dtype(self) -> torch.dtype:
        first: torch.nn.Parameter = next(self.model.parameters())
        return first.dtype

    # ---------------------------------------------------------------------------------------------------------
    # decoding

    def generation_config(self, temperature: float, top_p: float, max_new_tokens: int, n: int) -> Any:
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
            eos_token_id=list(self.stop_token_ids),
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

    # ---------------------------------------------------------------------------------------------------------
    # teacher-forced scoring, in bounded memory

    # Padded tokens per transformer forward. Sequences are packed by length into chunks of at most this many
    # (longest first, so padding stays small); one longer sequence runs alone. 8192 keeps an H200 busy on a 0.5B–7B
    # model and keeps the body's activations (about tokens × intermediate size per layer, no grad, no KV cache) to
    # well under a GiB, whatever the batch.
    score_tokens: int = 8192
    # Logit elements (positions × vocabulary) per LM-head call: the fp32 logits and their log-softmax are the
    # largest tensors of scoring, two of this size at a time (128 MiB at 2**24). A budget in elements rather than
    # positions keeps that peak fixed across vocabularies: 110 positions per call at Qwen's 151,936, 524 at 32,000.
    # On CPU, keep it ≥ 2**23: glibc serves blocks over 32 MiB by mmap and returns them on free, while smaller
    # ones can stay resident (2**20 measured 855 MiB of RSS for 50 MiB of live tensors).
    score_logits: int = 1 << 24

    # Causal-LM classes whose forward is `lm_head(last_hidden_state)` with nothing after it (no soft-cap, no
    # scaling), checked against transformers 5.24's sources. Their body and head run apart, so the head sees only
    # the response positions, a few at a time. Any other model runs its own forward (`_body_and_head`).
    _PLAIN_HEAD = frozenset(
        {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM"}
    )

    def _body_and_head(
        self, ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
    ) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor], int]:
        """(features of positions (rows, cols) of a padded batch, the head that turns a few of them into logits,
        the vocabulary size).

        A `_PLAIN_HEAD` model runs its body alone: the features are hidden states and the head is its output
        embedding (tied to the input embedding or not, it is the module its own forward calls). Any other
        transformers model runs its own forward with `logits_to_keep` set to those positions, so its own soft-cap
        or scaling applies and it projects only them; anything else returns full logits, sliced here.
        """
        model = self.model
        if type(model).__name__ in self._PLAIN_HEAD and model.get_output_embeddings() is not None:
            head = model.get_output_embeddings()
            hidden = model.base_model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
            return hidden[rows, cols], head, getattr(head, "out_features", None) or model.config.vocab_size
        if hasattr(model, "get_output_embeddings"):
            keep = torch.zeros_like(mask, dtype=torch.bool)
            keep[rows, cols] = True
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=keep).logits
        else:
            logits = model(input_ids=ids, attention_mask=mask).logits[rows, cols]
        return logits, torch.nn.Identity(), logits.shape[-1]

    @torch.no_grad()
    def _per_token(
        self,
        prompts: Sequence[str],
        responses: Sequence[str],
        stat: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        *,
        batch_size: int | None = None,
        token_budget: int | None = None,
        logit_budget: int | None = None,
    ) -> list[torch.Tensor]:
        """stat(log-softmax rows, target ids) → one fp32 value per row, for every response token, teacher-forced at
        temperature 1 (the policy itself); an empty tensor for an empty response.

        Position t predicts token t+1, so a response after a p-token prompt is scored at positions p-1 … p+r-2 of
        prompt + response, each part tokenised alone. Sequences are right-padded (real tokens keep positions 0…,
        and causal attention never reaches the pads) and packed into chunks of at most `token_budget` padded tokens
        (and `batch_size` sequences, if given). Only the response positions go through the LM head, at most
        `logit_budget // vocabulary` at a time: peak memory grows with neither the batch nor vocabulary × length.
        """
        model, tok = self.model, self.tokenizer
        token_budget = token_budget or self.score_tokens
        logit_budget = logit_budget or self.score_logits
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        seqs, spans = [], []  # spans: (response index, prompt length, response ids)
        for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
            p_ids = tok(p, add_special_tokens=False)["input_ids"]
            r_ids = tok(r, add_special_tokens=False)["input_ids"]
            if r_ids and not p_ids:
                raise ValueError(f"response {i} has an empty prompt: its first token has no prediction to score")
            if r_ids:
                seqs.append(p_ids + r_ids)
                spans.append((i, len(p_ids), r_ids))
        out = [torch.zeros(0) for _ in prompts]
        was_training = model.training
        model.eval()
        try:
            for chunk in _pack([len(s) for s in seqs], token_budget, batch_size):
                width = len(seqs[chunk[0]])
                ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                rows: list[int] = []
                cols: list[int] = []
                targets: list[int] = []
                for b, j in enumerate(chunk):
                    _, p_len, r_ids = spans[j]
                    ids[b, : len(seqs[j])] = torch.tensor(seqs[j])
                    mask[b, : len(seqs[j])] = 1
                    rows += [b] * len(r_ids)
                    cols += range(p_len - 1, p_len - 1 + len(r_ids))
                    targets += r_ids
                dev = self.device
                feats, head, vocab = self._body_and_head(
                    ids.to(dev), mask.to(dev), torch.tensor(rows, device=dev), torch.tensor(cols, device=dev)
                )
                target_ids = torch.tensor(targets, device=dev)
                step = max(1, logit_budget // vocab)
                values = []
                for s in range(0, len(target_ids), step):
                    logp = torch.log_softmax(head(feats[s : s + step]).float(), dim=-1)
                    values.append(stat(logp, target_ids[s : s + step]).cpu())
                    del logp
                del feats
                per_response = torch.split(torch.cat(values), [len(spans[j][2]) for j in chunk])
                for j, v in zip(chunk, per_response, strict=True):
                    out[spans[j][0]] = v
        finally:
            model.train(was_training)
        return out

    def token_entropy(
        self,
        prompts: Sequence[str],
        responses: Sequence[str],
        batch_size: int | None = None,
        *,
        token_budget: int | None = None,
        logit_budget: int | None = None,
    ) -> dict[str, Any]:
        """Mean entropy (nats) of the full next-token distribution over each response's tokens, given its prompt.

        Temperature 1 (the policy itself), teacher-forced; the token-weighted mean over all responses, the count
        of tokens it averages, and `per_response`: each response's [entropy sum, tokens], so a caller can form
        per-problem means (the paired bootstrap of `esbench.claims` C3). Memory and chunking: `_per_token`.
        """

        def entropy(logp: torch.Tensor, _targets: torch.Tensor) -> torch.Tensor:
            p = logp.exp()
            return -p.mul_(logp).sum(-1)  # in place: one vocabulary-wide temporary beside logp

        rows = self._per_token(
            prompts, responses, entropy, batch_size=batch_size, token_budget=token_budget, logit_budget=logit_budget
        )
        per_response = [[float(v.double().sum()), len(v)] for v in rows]
        total, count = sum(s for s, _ in per_response), sum(n for _, n in per_response)
        return {"entropy": total / count if count else float("nan"), "tokens": count, "per_response": per_response}

    def token_logprobs(
        self,
        prompts: Sequence[str],
        responses: Sequence[str],
        batch_size: int | None = None,
        *,
        token_budget: int | None = None,
        logit_budget: int | None = None,
    ) -> list[list[float]]:
        """log π(yₜ | x, y<ₜ) of each response token, teacher-forced; [] for an empty response."""

        def logprob(logp: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return logp.gather(-1, targets[:, None])[:, 0]

        rows = self._per_token(
            prompts, responses, logprob, batch_size=batch_size, token_budget=token_budget, logit_budget=logit_budget
        )
        return [v.tolist() for v in rows]

    @contextlib.contextmanager
    def engine_released(self) -> Iterator[Path | None]:
        """An HF backend holds no inference engine: nothing to release, and no folder (TRL loads `model` itself)."""
        yield None

    def at_dtype(self, dtype: torch.dtype) -> HFBackend:
        """A fresh `dtype` model holding these weights, each tensor cast once as `cast` does (see `Backend.at_dtype`).

        Fresh, not this model cast: GRPO's fp32 master must stay fp32 under the optimizer, and it carries TRL's
        fused-head forward and accelerate's autocast wrapper (which also returns fp32 logits), so generating on it is
        neither `dtype` nor the plain model that evaluation and ES run. Costs one `dtype` copy of the weights."""
        import copy

        master = self.model
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.no_grad(), torch.random.fork_rng(devices=devices):  # the copy's init must not move TRL's RNG
            with torch.device(master.device):
                clone = type(master)._from_config(copy.deepcopy(master.config), dtype=dtype)
            clone.load_state_dict(master.state_dict())  # each tensor cast once, round to nearest, as `cast` does
        view = HFBackend(clone, self.tokenizer, device=master.device.type, batch_size=self.batch_size)
        view.score_tokens, view.score_logits = self.score_tokens, self.score_logits
        view.stop_token_ids = list(self.stop_token_ids)  # the cell's stop set, read when it was built (not the copy's)
        return view

    # ---------------------------------------------------------------------------------------------------------
    # weights

    def weight_editor(self, precision: Precision = "fp32-master", noise: str = "torch") -> WeightEditor:
        return TensorEditor(self.parameters(), precision, noise)

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

    def lm_eval_model(self) -> Any:
        from esbench.backends.lm_eval_adapter import BackendLM

        return BackendLM(self)

    def provenance(self) -> dict[str, Any]:
        where = device_provenance(self.device)
        return {
            "kind": self.kind,
            "device_policy": self.device_policy,
            "device": where["device"],
            "device_name": where["device_name"],
            "dtype": str(self.dtype).removeprefix("torch."),
            "cpu_threads": where["cpu_threads"],
            "sampler": NEUTRAL_SAMPLER,
            "stop_token_ids": list(self.stop_token_ids),
        }
