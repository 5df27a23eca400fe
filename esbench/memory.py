"""The memory plan: what each cell keeps resident on a GPU, predicted before anything loads (issue 25).

A cell's first sign of not fitting used to be an out-of-memory error hours in. This module states, in one place,
the resident set the backends and method recipes keep, and `esbench plan --gpus N --gpu-memory GiB` and
`esbench run` (which refuses a cell predicted not to fit) read it from here, through the plan built on it
(`esbench.memory_plan`); so do the vLLM backend and GRPO for their engines' shares (`ENGINE_SHARE`,
`TRL_ENGINE_SHARE`).

How a prediction is built:
- The model's shape comes from its config (a local folder, the local Hugging Face cache, or, for the paper suites'
  models on a machine with neither, `esbench.models.shapes`): the parameter count and the largest tensor from a
  meta-device build (`shape_from_config`), plus layers, hidden size, KV heads and vocabulary.
- Every phase of the cell (loading, each training stage, evaluation) is a list of `Item`s on one GPU, each a named
  byte count with the code it comes from. The cell's peak is the largest phase; it fits when the peak, and each
  vLLM engine's own check (weights plus one longest sequence's KV cache inside its share), fit the GPU.

What is resident, by backend and method (P parameters, b bytes per weight at the cell's dtype, L the longest
sequence: `esbench.runner.longest_sequence`, or `PROMPT_ALLOWANCE` + the generation budget when the prompts cannot
be tokenised here):
- vLLM backend: the engine claims `ENGINE_SHARE` of the GPU (weights and KV cache inside it); the HF copy lives on
  the host while the engine owns the weights, and comes to the GPU for teacher-forced entropy and for GRPO.
- HF backend: the weights, plus the KV cache of a generate call (`HFBackend.batch_size` sequences of L tokens).
- ES (`esbench.es.weights.WeightEditor`): an fp32 master (fp32-master) or fp32 shadow (paper-bf16: on the host),
  4P; with paper-bf16 `engines: E` in one process, E−1 bf16 replicas (`add_engines`); with `--es-workers` E they are E
  processes on E GPUs instead (`RayEnginesPopulation`), none holding a replica; per update, a bf16 snapshot of the
  weights (restore-residual RMS) and the update's per-tensor temporaries on the largest tensor; an anchor for
  `decay_anchor: init`.
- GRPO (TRL, `esbench.methods.grpo`): an fp32 master, its gradients and AdamW's two moments (16 bytes per
  parameter, sharded over G GPUs by FSDP2 with `--grpo-gpus G`, `esbench.methods.grpo_processes`), a frozen fp32
  KL reference when `kl_coef > 0` (sharded too, but TRL gathers it whole for each forward), TRL's colocated vLLM
  engine (`TRL_ENGINE_SHARE`, one per GPU) on the vLLM backend, and one micro-batch's activations under gradient
  checkpointing (TRL's default; the fp32 residual stream per layer), autocast's half-precision weight cache, and
  TRL's chunked log-probability backward.
- Every GPU process: a CUDA context outside torch's allocator (`CUDA_CONTEXT`).

The same items sized for the CPU are checked against peaks measured on CPU (tests/test_memory.py): the tiny and
100M models, ES and GRPO. What only a GPU can show: the CUDA context and vLLM's own overheads (its profile run and
CUDA graphs), which are constants here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GiB = 1 << 30
# The esbench engine's share of a GPU (vLLM `gpu_memory_utilization`; ESBENCH_VLLM_MEMORY overrides) and TRL's
# colocated GRPO engine's (ESBENCH_TRL_VLLM_MEMORY). vLLM claims the share of the whole device at start.
ENGINE_SHARE = 0.35
TRL_ENGINE_SHARE = 0.25
CUDA_CONTEXT = 1 * GiB  # per GPU process: CUDA/cuBLAS/NCCL context, outside torch's allocator
VLLM_PROFILE_TOKENS = 8192  # the tokens of vLLM's start-up profile forward (its default max_num_batched_tokens)
REPLICA_MARGIN = 2 << 30  # esbench.es.weights.REPLICA_MARGIN: kept free beside replicas on a GPU
HEADROOM = 0.05  # of each GPU, kept for allocator fragmentation and what the plan cannot see
PROMPT_ALLOWANCE = 1024  # tokens, when a cell's prompts cannot be tokenised on this machine (hub data absent)
GRPO_GPUS_ENV = "ESBENCH_GRPO_GPUS"
TRL_TOKEN_CHUNK, TRL_VOCAB_CHUNK = 4096, 32768  # trl 1.16 kernels/chunked_logprob.py and trainer/utils.py


def usable(device_memory: float) -> float:
    """What a cell may plan to hold on one GPU: all of it but `HEADROOM`."""
    return device_memory * (1 - HEADROOM)


def engine_share() -> float:
    return float(os.environ.get("ESBENCH_VLLM_MEMORY", ENGINE_SHARE))


def trl_engine_share() -> float:
    return float(os.environ.get("ESBENCH_TRL_VLLM_MEMORY", TRL_ENGINE_SHARE))


# ---------------------------------------------------------------------------------------------------------------
# the model's shape


@dataclass(frozen=True)
class Shape:
    """What sizes a model: unique parameters (tied embeddings once), its largest tensor, and the attention shape."""

    params: int
    largest: int  # elements of the largest tensor (the embedding or LM head)
    layers: int
    hidden: int
    intermediate: int
    kv_heads: int
    head_dim: int
    vocab: int
    context: int | None
    tied: bool = False  # tied input and output embeddings (one tensor, two gradients summed)
    source: str = ""

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def shape_from_config(config: Any, source: str = "") -> Shape:
    """Build the model on the meta device (no memory, no weights) and count what it holds."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    seen: set[int] = set()
    params = largest = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            params += p.numel()
            largest = max(largest, p.numel())
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return Shape(
        params=params,
        largest=largest,
        layers=config.num_hidden_layers,
        hidden=config.hidden_size,
        intermediate=getattr(config, "intermediate_size", 4 * config.hidden_size),
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=head_dim,
        vocab=config.vocab_size,
        context=getattr(config, "max_position_embeddings", None),
        tied=bool(getattr(config, "tie_word_embeddings", False)),
        source=source,
    )


def model_config(path: str, revision: str | None = None, subfolder: str | None = None) -> tuple[Any, str]:
    """The model's transformers config and where it was read: a local folder, the local HF cache, or the table
    of the paper suites' models. Nothing is downloaded."""
    from transformers import AutoConfig

    if path == "builtin:tiny":
        from esbench.models import tiny

        return tiny.config(), "builtin:tiny recipe"
    where = os.path.expanduser(path)
    if os.path.isdir(where):
        folder = Path(where, subfolder) if subfolder else Path(where)
        return AutoConfig.from_pretrained(str(folder)), f"{folder}/config.json"
    try:
        kwargs = {"subfolder": subfolder} if subfolder else {}
        cfg = AutoConfig.from_pretrained(path, revision=revision, local_files_only=True, **kwargs)
        return cfg, f"HF cache {path}@{revision or 'main'}"
    except (OSError, ValueError):
        pass
    from esbench.models.shapes import KNOWN_CONFIGS

    if path in KNOWN_CONFIGS:
        known = dict(KNOWN_CONFIGS[path])
        return AutoConfig.for_model(known.pop("model_type"), **known), f"esbench.models.shapes[{path}]"
    raise LookupError(f"{path}: no config.json in a local folder, the HF cache or esbench.models.shapes")


_SHAPES: dict[tuple, Shape] = {}


def model_shape(model: dict[str, Any]) -> Shape:
    """The shape of a cell's `model` block (path, revision, subfolder), cached per process."""
    key = (model["path"], model.get("revision"), model.get("subfolder"))
    if key not in _SHAPES:
        cfg, source = model_config(*key)
        _SHAPES[key] = shape_from_config(cfg, source)
    return _SHAPES[key]


# ---------------------------------------------------------------------------------------------------------------
# the resident set


@dataclass(frozen=True)
class Item:
    name: str
    bytes: float
    why: str = ""
    host: bool = False  # a CPU copy the code makes (states, checkpoints): device memory only when sizing the CPU
    during: str = ""  # "" resident through the phase; else the step it exists in (steps do not overlap)


@dataclass
class Phase:
    name: str
    items: list[Item]
    gpus: int = 1  # GPUs this phase spreads over; items are per GPU
    gpu: bool = True  # sizing a GPU (host items then live elsewhere) or the CPU (everything is one memory)

    @property
    def total(self) -> float:
        """What stays resident, plus the largest of the steps that come and go (generate, backward, update...)."""
        counted = [i for i in self.items if not (i.host and self.gpu)]
        steps: dict[str, float] = {}
        for i in counted:
            if i.during:
                steps[i.during] = steps.get(i.during, 0.0) + i.bytes
        return sum(i.bytes for i in counted if not i.during) + max(steps.values(), default=0.0)


@dataclass(frozen=True)
class Sizing:
    """What the items of a cell depend on besides its method's config."""

    shape: Shape
    dtype_bytes: int
    backend: str  # "hf" or "vllm"
    device_memory: float  # bytes of one GPU (0: sizing for the CPU)
    sequence: int  # the longest sequence, tokens
    gen_batch: int = 256  # sequences per HF generate call (`HFBackend.batch_size`)
    score_tokens: int = 8192  # `HFBackend.score_tokens`: padded tokens per teacher-forced chunk
    score_logits: int = 1 << 24  # `HFBackend.score_logits`: logits per LM-head chunk
    gpu: bool = True

    @property
    def p(self) -> int:
        return self.shape.params

    def weights(self, nbytes: int | None = None) -> float:
        return self.p * (nbytes or self.dtype_bytes)


def _context(s: Sizing) -> list[Item]:
    return [Item("CUDA context", CUDA_CONTEXT, "per GPU process, outside torch's allocator")] if s.gpu else []


def engine_items(s: Sizing, share: float | None = None, name: str = "vLLM engine") -> list[Item]:
    share = engine_share() if share is None else share
    return [Item(name, share * s.device_memory, f"gpu_memory_utilization {share:g} of the GPU, weights inside")]


def generate_items(s: Sizing, sequences: int, dtype_bytes: int | None = None, during: str = "generate") -> list[Item]:
    """An HF generate call: the KV cache of `sequences` sequences of L tokens and the last step's logits."""
    b = dtype_bytes or s.dtype_bytes
    kv = sequences * s.sequence * s.shape.kv_bytes_per_token(b)
    return [
        Item("generate KV cache", kv, f"{sequences} sequences x {s.sequence} tokens", during=during),
        Item("generate logits", sequences * s.shape.vocab * 4 * 2, "one step, fp32, and its softmax", during=during),
    ]


def scoring_items(s: Sizing) -> list[Item]:
    """Teacher-forced entropy or log-probabilities (`HFBackend._per_token`): one chunk's hidden states and one
    LM-head chunk's fp32 logits and log-softmax."""
    h = s.shape
    body = s.score_tokens * (h.hidden * 4 + h.intermediate * 2) * s.dtype_bytes
    why = "HFBackend.score_tokens/score_logits chunks"
    return [Item("scoring forward", body + s.score_logits * 4 * 3, why, during="score")]


def serving_phase(s: Sizing, eval_spec: dict[str, Any]) -> Phase:
    """Evaluation and analyses after training: the backend serving, the HF copy scoring entropy."""
    if s.backend == "vllm":
        items = [*engine_items(s), Item("HF copy", s.weights(), "on the GPU only while it scores", during="score")]
    else:
        items = [Item("weights", s.weights()), *generate_items(s, s.gen_batch)]
    if eval_spec.get("entropy", True) or eval_spec.get("probe"):
        items += scoring_items(s)
    if eval_spec.get("diversity"):
        why = "WeightEditor fp32-master around the result"
        items.append(Item("diversity editor master", s.weights(4), why, during="diversity"))
    return Phase("evaluate", items + _context(s), gpu=s.gpu)


def es_phase(s: Sizing, cfg: dict[str, Any], workers: int) -> Phase:
    """One ES stage (`esbench.methods.es`): the editor's state, snapshots and update temporaries."""
    precision = cfg.get("precision", "fp32-master")
    engines = int(cfg.get("engines") or 1)
    real_engines = precision == "paper-bf16" and engines > 1 and workers == engines
    bf16 = precision != "fp32-master"
    items = engine_items(s) if s.backend == "vllm" else [Item("weights", s.weights())]
    if s.backend != "vllm":
        rollout = int(cfg.get("batch_size", 32))
        items += generate_items(s, rollout, during="roll out")
    if bf16:  # WeightEditor's fp32 trajectory; paper-bf16 keeps it on the host (`esbench.es.weights.shadow_device`)
        host = precision == "paper-bf16"
        items.append(Item("ES fp32 shadow", s.weights(4), "the unrounded trajectory, for drift", host=host))
    else:
        items.append(Item("ES fp32 master", s.weights(4), "WeightEditor fp32-master: the exact master"))
    if precision == "paper-bf16" and engines > 1 and not real_engines:
        replicas = (engines - 1) * s.weights()
        rest = Phase("", [*items, *_context(s)], gpu=s.gpu).total + s.weights() + s.shape.largest * 14
        host = s.gpu and rest + replicas + REPLICA_MARGIN > usable(s.device_memory)  # WeightEditor.add_engines
        why = "add_engines: in host memory, each copied in for its shard" if host else "add_engines: on the GPU"
        items.append(Item(f"{engines - 1} simulated engine replicas", replicas, why, host=host))
    if bf16:
        items.append(Item("per-update snapshot", s.weights(), "master_state(on_device=True), restore-residual RMS"))
    if cfg.get("weight_decay") and cfg.get("decay_anchor") == "init":
        items.append(Item("decay anchor", s.weights(4 if not bf16 else None), "θ₀ for decay_anchor: init"))
    temporaries = s.shape.largest * (4 * 3 + (s.dtype_bytes if bf16 else 0))  # fp32 before, delta, noise; bf16 step
    items.append(Item("update temporaries", temporaries, "largest tensor: before, delta, noise", during="update"))
    why = "ideal_state / checkpoint master_state: CPU copies"
    items.append(Item("state copy", s.weights(4), why, host=True, during="checkpoint"))
    gpus = engines if real_engines else (1 + workers if workers > 1 else 1)
    return Phase("train es", items + _context(s), gpus, s.gpu)


def grpo_phase(s: Sizing, cfg: dict[str, Any], gpus: int, probe: bool) -> Phase:
    """One GRPO stage through TRL (`esbench.methods.grpo`); with `gpus` > 1, FSDP full shard over them."""
    h = s.shape
    g = max(1, gpus)
    compute = s.dtype_bytes if s.dtype_bytes < 4 else 4  # autocast in the model's half dtype, else fp32
    shard = f" / {g} GPUs (FSDP)" if g > 1 else ""
    items = [
        Item("fp32 master" + shard, s.weights(4) / g),
        Item("gradients" + shard, s.weights(4) / g, during="backward"),
        Item("AdamW moments" + shard, s.weights(8) / g),
    ]
    if cfg.get("kl_coef"):
        items.append(Item("KL reference (fp32)" + shard, s.weights(4) / g, "TRL ref_model, beta > 0"))
        if g > 1:  # TRL 1.16's prepare_fsdp shards the reference as one unit: each forward gathers all of it
            why = "trl/models/utils.py prepare_fsdp: fully_shard(ref) once, no per-layer units"
            items.append(Item("KL reference gathered", s.weights(4), why, during="reference forward"))
    if g > 1:
        unit = 2 * 4 * _layer_params(h)
        items.append(Item("FSDP gathered unit", unit, "one decoder layer, fp32, and its grads", during="backward"))
    completion = int(cfg.get("max_completion_length", 256))
    micro = int(cfg.get("micro_batch", 2))
    tokens = micro * s.sequence
    # each layer's input, kept for the recomputation: the fp32 residual stream (measured 4h bytes per token and
    # layer for Qwen2.5-1.5B/3B and Llama-3.2-3B under bf16 autocast), plus one layer's activations recomputed
    checkpointed = tokens * h.layers * h.hidden * 4
    layer = tokens * (6 * h.hidden + 2 * h.kv_heads * h.head_dim + 4 * h.intermediate) * compute
    why = f"micro-batch {micro} x {s.sequence} tokens, gradient checkpointing"
    items.append(Item("activations", checkpointed + 2 * layer, why, during="backward"))
    if compute < 4:  # autocast caches each fp32 weight's half-precision cast until the forward's autocast exits
        why = "torch autocast's cast cache of the fp32 master"
        items.append(Item("autocast weight cache", s.weights(), why, during="backward"))
    # TRL's log-probabilities (trl/kernels/chunked_logprob.py): a [min(N, 4096), 32768] tile in the compute dtype
    # whatever the vocabulary, an fp32 head gradient and hidden gradient; N is every position of the micro-batch
    # without Triton (CPU), the completion's with it. A tied head's gradient is summed with the embedding's.
    n = micro * (completion if s.gpu else s.sequence)
    head = h.vocab * h.hidden * 4
    logprob = min(n, TRL_TOKEN_CHUNK) * TRL_VOCAB_CHUNK * compute + head + n * h.hidden * 4 + (head if h.tied else 0)
    items.append(Item("log-prob backward", logprob, "TRL ChunkedLogProbFunction", during="backward"))
    if s.backend == "vllm" and s.gpu:
        items += engine_items(s, trl_engine_share(), "TRL colocated vLLM engine")
    else:
        sequences = int(cfg.get("prompts_per_rollout", 64)) * int(cfg.get("num_generations", 8))
        items += generate_items(s, sequences, compute, during="roll out")
    if probe and s.dtype_bytes < 4 and g == 1:  # probes are off on several processes
        items.append(Item("probe copy", s.weights(), "dtype_copy: the master at the suite's dtype", during="probe"))
    return Phase("train grpo", items + _context(s), g, s.gpu)


def _layer_params(h: Shape) -> int:
    attn = h.hidden * (h.hidden + 2 * h.kv_heads * h.head_dim) + h.hidden * h.hidden
    return attn + 3 * h.hidden * h.intermediate


# ---------------------------------------------------------------------------------------------------------------
# a cell's sizing


def _dtype_bytes(dtype: str) -> int:
    return {"float32": 4, "bfloat16": 2, "float16": 2}[dtype]


def generation_budget(spec: Any, method: dict[str, Any]) -> int:
    """The largest number of new tokens any part of the cell asks for: evaluation (probes and diversity use the
    same budget) and the method's rollouts (`max_new_tokens`, `max_completion_length`, in any stage)."""
    found = [spec.eval.max_new_tokens]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("max_new_tokens", "max_completion_length") and isinstance(v, int):
                    found.append(v)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(method)
    return max(found)


def sizing_for(cell: Any, shape: Shape, device_memory: float, sequence: int | None) -> Sizing:
    spec = cell.spec
    if sequence is None:
        sequence = PROMPT_ALLOWANCE + generation_budget(cell.typed, spec["method"])
    return Sizing(
        shape=shape,
        dtype_bytes=_dtype_bytes(spec["model"].get("dtype", "float32")),
        backend=(spec.get("backend") or {}).get("kind", "hf"),
        device_memory=device_memory,
        sequence=sequence,
        gpu=device_memory > 0,
    )


# ---------------------------------------------------------------------------------------------------------------
# measuring on the CPU what the plan predicts


def cpu_peak(fn: Any) -> tuple[Any, int]:
    """Run `fn()` and return (its result, the peak bytes torch's CPU allocator held above the level at the start).

    Read from the profiler's memory events (`profile_memory=True`: every allocation and free with its size), so
    the peak is exact for tensors, whatever the timing, and blind to what is not a tensor (Python objects, the
    tokenizer), which the plan does not predict either. The profiler slows the run several times."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    level = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        level += e.nbytes()
        peak = max(peak, level)
    return result, peak
