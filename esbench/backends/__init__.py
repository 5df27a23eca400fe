"""Generation backends: the only door to a model.

Every sample esbench draws (training rollouts, evaluation through lm-eval, the probe, diversity, sparsity) and every
weight edit (ES perturbations, thresholded updates) goes through one `Backend` per cell, which the runner builds and
hands to the method (`TrainContext.backend`), the evaluation and the analyses. The backend owns:

- device placement (`device: auto` picks CUDA when present) and the compute dtype;
- decoding with an explicit, complete sampler (`NEUTRAL_SAMPLER`): temperature, top_p and seed, with top-k off,
  repetition penalty 1, no n-gram blocking and no minimum length, one stop set (`stop_token_ids`: the EOS ids of
  the tokenizer, the model config and the model folder's `generation_config.json`), and nothing else read from
  that file (Qwen2.5 ships a top-k and a repetition penalty that the paper's vLLM decoding does not use);
- token scoring (entropy), the ES weight editor, parameters, the state hash and saving;
- an lm-eval `LM` adapter, so `simple_evaluate` samples through the same sampler as training.

A backend kind is chosen by the suite's `backend.kind` and is part of each cell's id. Kinds are the entry points of
the group `esbench.backends` (`esbench.registry`; the built-ins `hf` and `vllm` are registered in pyproject.toml),
loaded only when a cell uses one, so importing this package imports no torch. A new backend is one module that
implements `Backend` (and its `WeightEditor`) plus one entry point: docs/architecture.md, "Adding a backend".
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from esbench.registry import EntryPointRegistry

if TYPE_CHECKING:
    import torch

    from esbench.es.weights import Precision, WeightEditor

# The decoding contract every backend implements, named so a record can say which one produced it. Changing what a
# backend does for these settings means a new name (and a new leaderboard release).
NEUTRAL_SAMPLER: Final = "neutral/1"
SAMPLER_SETTINGS: dict[str, Any] = {
    "top_k": None,  # off
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_new_tokens": 0,
    "generation_config_json": "eos_token_id only",  # its sampling defaults are ignored
}

GROUP = "esbench.backends"
DevicePolicy = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class Generation:
    text: str
    tokens: int  # generated tokens, excluding padding and the prompt


@runtime_checkable
class Backend(Protocol):
    """What methods, evaluation and analyses may ask of a model: every member any of them uses is declared here, so
    the type checker (`make test`) holds each backend and each caller to it. See the module docstring."""

    kind: str  # the entry-point name, as in the suite's `backend.kind`
    tokenizer: Any  # a transformers tokenizer (the paper's chat template is applied with it)

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        device: DevicePolicy = "auto",
        cpu_threads: int | None = None,
        **options: Any,
    ) -> None:
        """How `build_backend` constructs every kind: the loaded transformers model, its tokenizer, the device policy,
        the CPU threads of a CPU cell, and kind-specific options (vLLM's `max_model_len`)."""
        ...

    @property
    def stop_token_ids(self) -> list[int]:
        """`stop_token_ids(model, tokenizer)`, computed once when the backend is built (before any swap)."""
        ...

    @property
    def device(self) -> torch.device:
        """Where generation computes (a vLLM engine's device, not the host its HF copy rests on)."""
        ...

    @property
    def dtype(self) -> torch.dtype:
        """The weights' dtype as generation sees it (after `cast`; a released vLLM engine's: the one it restarts at)."""
        ...

    @property
    def model(self) -> Any:
        """The in-memory transformers model that training edits in place (GRPO through TRL or FSDP): an HF backend's
        own; a vLLM backend's HF copy, on the compute device, pushed into the engine before the engine's next use."""
        ...

    def engine_released(self) -> AbstractContextManager[Path | None]:
        """For the block, any inference engine this backend holds is shut down, so that another (TRL's colocated vLLM)
        can have its memory; yields a folder holding the current weights for that engine, or None when the backend
        holds no engine (HF). On exit the engine comes back with whatever was trained into `model` meanwhile."""
        ...

    def neutral_decoding(self) -> AbstractContextManager[None]:
        """For the block, `model.generation_config` is empty: a caller generating on `model` itself (TRL's HF
        rollouts) falls to transformers' defaults, never to the model folder's sampling settings."""
        ...

    def at_dtype(self, dtype: torch.dtype) -> Backend:
        """A new HF backend on a fresh `dtype` model holding these weights cast once (what saving the cell at `dtype`
        would hold), generating and scoring as this one does: the probe's view of GRPO's fp32 master."""
        ...

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
        """`n` completions per prompt; greedy when temperature is 0. Text is cut before the first `stop` string."""
        ...

    def token_entropy(self, prompts: Sequence[str], responses: Sequence[str]) -> dict[str, Any]:
        """Mean next-token entropy (nats) over the response tokens, teacher-forced: {"entropy", "tokens",
        "per_response"} (each response's [entropy sum, tokens])."""
        ...

    def token_logprobs(self, prompts: Sequence[str], responses: Sequence[str]) -> list[list[float]]:
        """log π(yₜ | x, y<ₜ) of each response token, teacher-forced at temperature 1 (fixed-rollout objectives)."""
        ...

    def weight_editor(self, precision: Precision = "fp32-master", noise: str = "torch") -> WeightEditor:
        """An ES editor over this backend's weights, with noise scheme `noise` (`torch` or `table`)."""
        ...

    def parameters(self) -> dict[str, torch.Tensor]:
        """The trainable tensors by name, de-duplicated (tied weights once). An HF backend's are live (edits show in
        generation); a vLLM backend's are a copy of its engine's: write them back with `load_parameters`."""
        ...

    def load_parameters(self, state: Mapping[str, torch.Tensor]) -> None:
        """Overwrite parameters in place (cast to their dtype) from a name -> tensor mapping."""
        ...

    def swapped_parameters(self, state: Mapping[str, torch.Tensor]) -> AbstractContextManager[None]:
        """Use `state` for the block, then put the current weights back exactly."""
        ...

    def cast(self, dtype: torch.dtype) -> None:
        """Cast the weights in place, each tensor rounded to nearest once (a vLLM engine restarts at `dtype`)."""
        ...

    def state_hash(self) -> str:
        """`esbench.models.state_hash` of the weights: the record's `final_weights_sha256`."""
        ...

    def checksum(self) -> str:
        """A cheap fingerprint of the weights under HF names; equal weights give equal checksums on any backend."""
        ...

    def save(self, directory: Path) -> None:
        """Save as a Hugging Face model folder (weights, config, tokenizer)."""
        ...

    def lm_eval_model(self) -> Any:
        """An `lm_eval.api.model.LM` that generates through this backend."""
        ...

    def provenance(self) -> dict[str, Any]:
        """The record's `provenance.backend`: kind, device policy and device, dtype, CPU threads, sampler, stop set."""
        ...


def _a_backend_class(cls: object) -> str | None:
    return None if isinstance(cls, type) else "a class (one that implements esbench.backends.Backend)"


registry: EntryPointRegistry[Backend] = EntryPointRegistry(GROUP, "backend", _a_backend_class)


class BackendSpec(BaseModel):
    """The suite's `backend:` block; part of every cell's id, so a vLLM cell is never mistaken for an HF one."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    kind: str = Field("hf", description=f"Generation backend: {', '.join(registry.names())}.")
    device: DevicePolicy = Field("auto", description="auto (CUDA when present, else CPU), cpu or cuda.")
    sampler: Literal["neutral/1"] = Field(NEUTRAL_SAMPLER, description="The decoding contract (module docstring).")
    cpu_threads: int = Field(
        1,
        ge=1,
        description="Torch threads when the cell runs on CPU (ignored on CUDA). Part of the id: CPU kernels reduce in "
        "thread-count-dependent order, so GRPO's weights differ bit for bit between 1 and 2 threads.",
    )

    @field_validator("kind")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in registry.entries():
            raise ValueError(f"unknown backend {v!r}; known: {', '.join(registry.names())}")
        return v


def resolve_device(policy: DevicePolicy) -> str:
    """`auto` is CUDA when torch sees a GPU, else CPU; `cuda` without a GPU is an error, not a silent CPU run.

    A GPU this torch cannot use (a driver older than torch's CUDA needs, a GPU hidden from the process) stops both
    `auto` and `cuda` with `esbench.gpu.CudaUnusable`, which names the driver, the CUDA build and the fix: a GPU
    suite never runs on the CPU unnoticed. A CPU-only torch on a GPU host (the cpu image, `make test`) and
    CUDA_VISIBLE_DEVICES="" are CPU runs on purpose: `auto` runs on the CPU (saying so once for the first).
    """
    import torch

    from esbench import gpu

    if policy == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    gpu.require_usable_cuda(cpu_build_ok=policy == "auto")
    if policy == "cuda":
        raise RuntimeError("backend.device is 'cuda' but torch sees no GPU (torch.cuda.is_available() is False)")
    if gpu.torch_cuda_build() is None and not gpu.gpus_hidden() and gpu.host_has_nvidia_gpu():
        _warn_cpu_torch_once()
    return "cpu"


@functools.cache
def _warn_cpu_torch_once() -> None:
    warnings.warn(
        "backend.device is 'auto' and this host has an NVIDIA GPU, but torch is a CPU-only build: running on the CPU",
        stacklevel=3,
    )


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The token ids that end a generation on every backend (and GRPO's rollouts), sorted.

    The union of the tokenizer's `eos_token_id`, config.json's and the model's declared ones in generation_config.json
    (`model.generation_config`, which transformers loads from that file; each an int or a list). vLLM adds the
    file's ids to every request on its own (`SamplingParams.update_from_generation_config`), and Qwen2.5-Instruct
    declares `<|endoftext|>` there beside `<|im_end|>`: an HF backend that ignored them would run on where vLLM and
    the paper's artifact stop. Only these ids are read from the file, never its sampling defaults.
    """
    generation_config = getattr(model, "generation_config", None)
    sources = (
        getattr(tokenizer, "eos_token_id", None),
        getattr(getattr(model, "config", None), "eos_token_id", None),
        getattr(generation_config, "eos_token_id", None),
    )
    ids: set[int] = set()
    for source in sources:
        ids.update(int(i) for i in (source if isinstance(source, list | tuple) else [source]) if i is not None)
    return sorted(ids)


SEQUENCE_MARGIN = 32  # tokens: lm-eval and TRL build chat prompts themselves and may add a few special tokens


def engine_context(longest_prompt: int, max_new_tokens: int, model_config: Any) -> int | None:
    """A vLLM engine's `max_model_len` for sequences of at most `longest_prompt + max_new_tokens` tokens (plus
    SEQUENCE_MARGIN), or None when that reaches the model's own context, which vLLM then takes as it would. Set
    for both esbench's engine and TRL's colocated one: without it vLLM sizes for the model's whole context (131k
    tokens for Llama-3.2) and fails its start-up KV check on an 80 GB GPU."""
    need = longest_prompt + max_new_tokens + SEQUENCE_MARGIN
    context = getattr(model_config, "max_position_embeddings", None)
    return None if context is not None and need >= context else need


def build_backend(spec: BackendSpec, model: Any, tokenizer: Any, **options: Any) -> Backend:
    """The cell's one backend over a loaded model (the runner calls this once per cell)."""
    return registry.get(spec.kind)(model, tokenizer, device=spec.device, cpu_threads=spec.cpu_threads, **options)


def chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]
