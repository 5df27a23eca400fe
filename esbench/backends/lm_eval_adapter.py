"""An lm-eval `LM` over any esbench backend, so `lm_eval.simple_evaluate` samples through the cell's own sampler.

lm-eval's `HFLM` merges the model folder's generation_config.json into its decoding and its `VLLM` class only takes
a path; neither can serve a model whose weights ES has edited in place through esbench's sampler. This adapter
implements `generate_until` (the only request type esbench's tasks use) on `Backend.generate`.

With `repeats: n` lm-eval sends n identical requests per document. The adapter groups them and asks the backend
for n samples of one prompt (`num_return_sequences` in HF, `SamplingParams.n` in vLLM), so the prompt is encoded
once. It keeps lm-eval's own stop-sequence handling (`until` plus the EOS text); the backend cuts each text with
lm-eval's post-processing.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from lm_eval.api.model import LM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

if TYPE_CHECKING:
    import torch

    from esbench.backends import Backend

DEFAULT_MAX_GEN_TOKS = 256


class BackendLM(LM):  # type: ignore[misc]  # lm-eval is not followed by the type checker (pyproject)
    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self.backend = backend
        self.tokenizer = backend.tokenizer
        self.requests_seen = 0  # lm-eval requests answered (tests count them)

    @property
    def device(self) -> torch.device:
        return self.backend.device

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", "esbench")).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.tokenizer, "chat_template", None) or ""

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        text: str = self.tokenizer.apply_chat_template(
            chat_history,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )
        return text

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        args = [req.args for req in requests]
        self.requests_seen += len(args)
        # identical (context, kwargs) requests are one prompt with n samples; first-seen order is kept
        keys = [(ctx, json.dumps(kw, sort_keys=True, default=str)) for ctx, kw in args]
        counts = Counter(keys)
        groups: dict[tuple[str, int], list[str]] = {}  # (kwargs, n) -> contexts
        for key in dict.fromkeys(keys):
            groups.setdefault((key[1], counts[key]), []).append(key[0])
        answers: dict[tuple[str, str], list[str]] = {}
        eos = self.tokenizer.decode([self.tokenizer.eos_token_id], skip_special_tokens=False)
        for (kw_json, n), contexts in groups.items():
            kwargs = normalize_gen_kwargs(json.loads(kw_json), DEFAULT_MAX_GEN_TOKS)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            sampled = bool(kwargs.get("do_sample")) and kwargs.get("temperature", 0.0) > 0
            gens = self.backend.generate(
                contexts,
                n=n,
                temperature=float(kwargs["temperature"]) if sampled else 0.0,
                top_p=float(kwargs.get("top_p", 1.0)),
                max_new_tokens=int(kwargs["max_gen_toks"]),
                stop=until,
            )
            for ctx, g in zip(contexts, gens, strict=True):
                answers[(ctx, kw_json)] = [x.text for x in g]  # already cut at `until` by the backend
        cursor: Counter[tuple[str, str]] = Counter()
        out = []
        for key in keys:
            out.append(answers[key][cursor[key]])
            cursor[key] += 1
        return out

    def loglikelihood(self, requests: list[Any]) -> list[tuple[float, bool]]:
        raise NotImplementedError("esbench tasks are generate_until; loglikelihood is not served by esbench backends")

    def loglikelihood_rolling(self, requests: list[Any]) -> list[float]:
        raise NotImplementedError("esbench tasks are generate_until; loglikelihood is not served by esbench backends")

    def get_model_info(self) -> dict[str, Any]:
        return self.backend.provenance()
