"""The vLLM backend's engine-side pieces: the `LLM(...)` settings esbench fixes, starting and shutting down an
in-process engine, per-prompt seeds, and `EngineEditor`, the `WeightEditor` that runs inside the engine's worker.

Apart from `esbench.backends.vllm` (the backend itself) so that each stays readable; this module does not import it:
the editor reaches its backend through `Engine`, the few members it needs.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

import torch

from esbench.es.weights import Precision, WeightEditor
from esbench.memory import engine_share

WORKER_EXTENSION = "esbench.backends.vllm_worker.ESWorkerExtension"
CPU_KV_CACHE_BYTES = 1 << 30


def engine_settings(device: str, max_model_len: int | None = None) -> dict[str, Any]:
    """The `LLM(...)` options esbench fixes; recorded in provenance.

    The KV cache is sized explicitly on CPU: vLLM's CPU worker otherwise reserves a fraction of RAM minus what the
    whole process already holds, which fails for a second engine in one process (a `cast`, or the next cell).
    `ESBENCH_VLLM_MEMORY` overrides the GPU fraction, `ESBENCH_VLLM_KV_BYTES` the CPU cache size.

    `max_model_len` is the cell's longest sequence (its longest prompt plus its largest generation budget, from
    `esbench.runner.longest_sequence`). Without it vLLM takes the model's whole context (131k tokens for
    Llama-3.2) and its start-up check wants KV cache for one sequence that long: 15 GB for Llama-3.2-3B in bf16,
    more than the engine's share of an 80 GB GPU holds beside the weights.
    """
    memory: dict[str, Any] = (
        {"kv_cache_memory_bytes": int(os.environ.get("ESBENCH_VLLM_KV_BYTES", CPU_KV_CACHE_BYTES))}
        if device == "cpu"
        else {"gpu_memory_utilization": engine_share()}  # the memory plan's share (esbench.memory)
    )
    return {
        **memory,
        **({"max_model_len": int(max_model_len)} if max_model_len else {}),
        "enable_prefix_caching": False,
        "enforce_eager": device == "cpu",  # CPU: no torch.compile warm-up (13 s for a 1M model), same kernels
        "generation_config": "vllm",
        "seed": 0,
        "disable_log_stats": True,
        "worker_extension_cls": WORKER_EXTENSION,
    }


@contextlib.contextmanager
def real_stdout() -> Iterator[None]:
    """vLLM's engine start duplicates `sys.stdout.fileno()`; a captured stdout (pytest, notebooks, a redirected
    console) has none, so the process's own stdout stands in while the engine starts."""
    try:
        sys.stdout.fileno()
        captured = False
    except (AttributeError, OSError, ValueError):
        captured = True
    saved = sys.stdout
    if captured:
        sys.stdout = sys.__stdout__
    try:
        yield
    finally:
        sys.stdout = saved


def shutdown_llm(llm: Any) -> None:
    """Shut an in-process `vllm.LLM` down now, rather than whenever it is collected: its engine core frees the
    memory and destroys the process's vLLM distributed state, so that another engine can start in this process."""
    with contextlib.suppress(Exception):
        llm.llm_engine.engine_core.shutdown()
    gc.collect()


def derive_seed(seed: int, index: int) -> int:
    """Per-prompt sampling seed: prompt `index` of a call seeded `seed` (63-bit, stable across platforms)."""
    from esbench.es.weights import member_seed

    return member_seed(seed, -2, index)


_EDITOR_KEYS = itertools.count()


class Engine(Protocol):
    """What an `EngineEditor` needs of its vLLM backend (`VLLMBackend`)."""

    setup: Any  # the current engine start's own object: a restart replaces it
    llm: Any  # the `vllm.LLM`, or None while released

    @property
    def dtype(self) -> torch.dtype: ...

    def _rpc(self, method: str, *args: Any) -> Any: ...

    def _engine_edited(self) -> None: ...


class EngineEditor(WeightEditor):
    """The `WeightEditor` interface, run inside the engine's worker (`vllm_worker.ESWorkerExtension`).

    It lives and dies with the engine it was made on: a `cast` restarts the engine, and the editor's fp32 master or
    shadow and its simulated engines go with it. Take what is needed from it (`ideal_state`) before a cast.
    """

    def __init__(self, backend: Engine, precision: Precision, noise: str = "torch") -> None:
        self.backend = backend
        self.precision = precision
        self.noise = noise
        self.key = next(_EDITOR_KEYS)
        self._engine = backend.setup  # this engine start's own object: a restart replaces it
        self._numel: int = backend._rpc("esbench_editor_new", self.key, precision, noise)

    def close(self) -> None:
        """Free this editor's state in the worker (its fp32 master or shadow and simulated engines) now, while the
        engine keeps serving: evaluation after training needs that memory."""
        if self.backend.setup is self._engine and self.backend.llm is not None:
            self.backend._rpc("esbench_editor_drop", self.key)

    def _call(self, op: str, *args: Any) -> Any:
        if self.backend.setup is not self._engine:
            raise RuntimeError(
                f"ES editor {op}(): the vLLM engine it was made on was restarted (a cast, now "
                f"{str(self.backend.dtype).removeprefix('torch.')}), and the editor went with it; take what you "
                "need from an editor before casting, or make a new one"
            )
        self.backend._engine_edited()
        return self.backend._rpc("esbench_editor", self.key, op, *args)

    def _state(self, op: str, *args: Any) -> dict[str, torch.Tensor]:
        state: dict[str, torch.Tensor] = self._call(op, *args)
        return state

    def numel(self) -> int:
        return self._numel

    def perturb(self, seed: int, sigma: float, sign: float = 1.0) -> None:
        self._call("perturb", seed, sigma, sign)

    def restore(self) -> None:
        self._call("restore")

    def update(
        self,
        seeds: Iterable[int],
        coeffs: Iterable[float],
        decay: float = 0.0,
        anchor: Mapping[str, torch.Tensor] | None = None,
    ) -> dict[str, float]:
        norms: dict[str, float] = self._call("update", list(seeds), list(coeffs), decay, anchor)
        return norms

    def rms_diff(self, before: Mapping[str, torch.Tensor]) -> float:
        rms: float = self._call("rms_diff", before)
        return rms

    def add_engines(self, engines: int) -> None:
        self._call("add_engines", engines)

    def swap_engine(self, k: int) -> None:
        self._call("swap_engine", k)

    def resync_engines(self) -> None:
        self._call("resync_engines")

    def engines_state(self) -> dict[str, torch.Tensor]:
        return self._state("engines_state")

    def load_engines_state(self, state: Mapping[str, torch.Tensor]) -> None:
        self._call("load_engines_state", state)

    def ideal_state(self) -> dict[str, torch.Tensor]:
        return self._state("ideal_state")

    def load_ideal_state(self, state: Mapping[str, torch.Tensor]) -> None:
        self._call("load_ideal_state", state)

    def master_state(self, on_device: bool = False) -> dict[str, torch.Tensor]:
        return self._state("master_state", on_device)

    def load_master_state(self, state: Mapping[str, torch.Tensor]) -> None:
        self._call("load_master_state", state)
