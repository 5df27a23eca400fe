"""GRPO on the vLLM backend: TRL's colocated engine loads the cell's own weights (not a hub revision, offline), the
backend's engine is shut down while TRL's lives and comes back with the trained weights, and TRL's rollouts follow
the cell seed although every vLLM engine start reseeds the process with 0.

TRL's colocate mode runs only on a GPU: on vLLM's CPU build its weight sync (`load_weights`) fails on the repacked
CPU linears, so esbench rolls out with TRL's HF generation there (`grpo.trl_vllm_rollouts`). These tests take the GPU
branch on this CPU: TRL's own colocate code builds its engine through `trl.generation.vllm_generation.LLM`, which
`_ColocatedOnCPU` replaces by a real vLLM engine started from TRL's arguments (its model path, its seed 0) with
CPU memory settings; only TRL's per-tensor `load_weights` is routed through esbench's worker extension, by the same
HF names TRL pushes. What only a GPU shows: TRL's `load_weights` into vLLM's fused CUDA layers, the GPU memory the
shut-down engine frees, and vLLM's CUDA sampler (Model Runner V2) drawing each unseeded request's seed from
`np.random` (the CPU sampler draws from torch's generator; both are reseeded at an engine start, and both are covered
by the reseed).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from esbench.backends.vllm import VLLMBackend
from esbench.backends.vllm_engine import engine_settings
from esbench.backends.vllm_worker import read_checkpoint
from esbench.methods import TrainContext, registry
from esbench.models import load_model
from esbench.tasks import get_task

HUB_ID = "esbench-test/pinned-model"  # what `load_model` leaves in name_or_path for a hub model; not on any hub


class _ColocatedOnCPU:
    """`vllm.LLM` as TRL's colocate mode calls it, on this CPU (see the module docstring)."""

    def __init__(self, backend: VLLMBackend, **kwargs):
        from vllm import LLM

        self.kwargs = kwargs
        self.backend_engine_up = backend.llm is not None
        self.loaded = read_checkpoint(kwargs["model"]) if Path(kwargs["model"]).is_dir() else None
        settings = {**engine_settings("cpu"), "seed": kwargs["seed"]}
        for key in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "logprobs_mode"):
            settings[key] = kwargs[key]
        self.llm = LLM(model=kwargs["model"], **settings)  # offline: a hub id fails here, as it would on a GPU
        self.llm.collective_rpc("esbench_setup", args=(kwargs["model"],))
        self.pushed: dict[str, torch.Tensor] = {}
        self.syncs: list[set[str]] = []
        self.completions: list[list[tuple[int, ...]]] = []
        self.shut_down = False
        model = SimpleNamespace(load_weights=lambda weights: self.pushed.update(weights))
        self.llm_engine = SimpleNamespace(
            engine_core=SimpleNamespace(shutdown=self._shutdown),
            model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=model))),
        )

    def _shutdown(self) -> None:
        self.shut_down = True
        self.llm.llm_engine.engine_core.shutdown()

    def generate(self, prompts, sampling_params=None, use_tqdm=False):
        outs = self.llm.generate(prompts, sampling_params=sampling_params, use_tqdm=use_tqdm)
        self.completions.append([tuple(c.token_ids) for o in outs for c in o.outputs])
        return outs

    def reset_prefix_cache(self) -> None:
        """TRL calls it at the end of each weight sync: load what was pushed, by HF name, into the engine."""
        self.llm.collective_rpc("esbench_load", args=({k: v.detach().cpu() for k, v in self.pushed.items()},))
        self.syncs.append(set(self.pushed))
        self.pushed = {}
        self.llm.reset_prefix_cache()


@pytest.fixture
def colocate(monkeypatch):
    """Take the GPU branch here, build TRL's engines with `_ColocatedOnCPU`, and undo TRL's process-env writes."""
    import trl.generation.vllm_generation as vg

    import esbench.methods.grpo as grpo

    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)  # TRL sets them for vLLM; restored to unset afterwards
    # a free port of our own: accelerate falls back to 29500 once TRL has set WORLD_SIZE, and two test processes
    # (pytest-xdist) would then both listen on it
    import socket

    with socket.socket() as sock:
        sock.bind(("localhost", 0))  # an ephemeral port (TRL's own finder tries 29500 first: racy across processes)
        monkeypatch.setenv("MASTER_ADDR", "localhost")
        monkeypatch.setenv("MASTER_PORT", str(sock.getsockname()[1]))
    monkeypatch.setattr(grpo, "trl_vllm_rollouts", lambda backend: True)
    built: list[_ColocatedOnCPU] = []

    def use(backend: VLLMBackend) -> list[_ColocatedOnCPU]:
        def make(**kwargs):
            built.append(_ColocatedOnCPU(backend, **kwargs))
            return built[-1]

        monkeypatch.setattr(vg, "LLM", make)
        return built

    return use


class _TextReward:
    """Differs between any two different responses (a CRC of the text), so every group whose samples differ has a
    non-zero advantage whatever the model knows. A length reward does not: the real tiny model never stops within
    `max_completion_length`, so each response is 16 characters, every group's reward std is 0 and GRPO's loss and
    gradient are exactly 0."""

    def with_values(self, correct: float, formatted: float) -> _TextReward:
        return self

    def __call__(self, response: str, gold: str) -> float:
        return zlib.crc32(response.encode()) / 2**32


def _backend(tiny_model_dir: Path, dtype: str) -> VLLMBackend:
    loaded = load_model(str(tiny_model_dir), dtype=dtype)
    loaded.model.name_or_path = loaded.model.config.name_or_path = HUB_ID
    return VLLMBackend(loaded.model, loaded.tokenizer, device="cpu", cpu_threads=1)


def _train(backend, workdir: Path, seed: int, rows, updates: int = 1):
    cls = registry.get("grpo")
    cfg = cls.Config(
        prompts_per_rollout=4,
        num_generations=4,
        ppo_minibatch_prompts=4,
        micro_batch=16,
        learning_rate=1e-4,
        max_completion_length=16,
        checkpoint_every=100,
    )
    task = get_task("tiny_arith")
    log = workdir / "train.jsonl"
    ctx = TrainContext(seed=seed, workdir=workdir, log_path=log, prompt=task.prompt, backend=backend)
    return cls().train(rows, _TextReward(), updates, cfg, ctx)


def test_trl_engine_loads_the_cells_weights_offline_while_the_backends_engine_is_down(
    tmp_path, tiny_model_dir, colocate
):
    """Items 5 and 10 of issue 21: `LLM(model=model.name_or_path)` must not name a hub id (the hub's `main`
    revision; offline, an error), and the backend's own engine must not idle beside TRL's."""
    backend = _backend(tiny_model_dir, "bfloat16")
    try:
        built = colocate(backend)
        start = backend.parameters()
        model = backend.model
        result = _train(backend, tmp_path, 0, get_task("tiny_arith").rows("train", 8), updates=2)

        (trl_engine,) = built
        folder = Path(trl_engine.kwargs["model"])
        assert folder.is_dir() and (folder / "config.json").exists() and (folder / "tokenizer.json").exists()
        assert folder.is_relative_to(backend._folder), "a folder of the backend's, removed with it"
        saved = trl_engine.loaded  # read when TRL's engine started: the backend's restart reuses the folder
        assert saved.keys() == start.keys()
        assert all(saved[k].dtype == torch.bfloat16 and torch.equal(saved[k], start[k]) for k in start), (
            "TRL's engine loads the cell's weights at the suite's dtype"
        )
        assert not trl_engine.backend_engine_up, "the backend's engine was still up beside TRL's"
        # TRL's weight sync pushed every tensor, once per rollout, by names the cell's checkpoint has
        assert trl_engine.syncs == [set(start)] * 2
        assert trl_engine.shut_down, "TRL's engine is shut down before the backend's starts again"
        assert model.name_or_path == HUB_ID

        assert result.summary["rollout_engine"] == "vllm"
        # the engine waits for the cell's cast instead of restarting at GRPO's fp32 (twice the bf16 share)
        assert backend.llm is None and backend.dtype == torch.float32
        trained = backend.parameters()  # the fp32 master, as drift reads it
        hf = backend.hf.parameters()
        assert all(torch.equal(trained[k], hf[k]) and trained[k] is not hf[k] for k in trained)  # copies
        backend.cast(torch.bfloat16)  # what the runner does before evaluation: still no engine at fp32
        assert backend.llm is None and backend.dtype == torch.bfloat16
        assert backend.generate(["1+1="], max_new_tokens=4)[0][0].tokens > 0  # the engine starts, at bf16
        assert backend.llm is not None and backend._engine_dtype == torch.bfloat16
        engine = backend.parameters()
        assert all(torch.equal(engine[k], trained[k].to(torch.bfloat16)) for k in engine), "the trained weights"
        logged = [
            row for line in (tmp_path / "train.jsonl").read_text().splitlines() if "update" in (row := json.loads(line))
        ]
        assert len(logged) == 2 and any(row["reward_std"] > 0 for row in logged), "a rollout gave GRPO an advantage"
        assert any(not torch.equal(trained[k], start[k].float()) for k in trained), "GRPO changed the weights"
        assert backend.generate(["1+1="], max_new_tokens=4)[0][0].tokens > 0
    finally:
        backend.close()


def test_trl_rollouts_follow_the_cell_seed(tmp_path, tiny_model_dir, colocate):
    """Every vLLM engine start seeds random, numpy and torch with the engine's seed (TRL passes 0), and TRL's
    requests carry no seed: without a reseed every cell seed samples the same rollouts."""
    backend = _backend(tiny_model_dir, "float32")
    try:
        built = colocate(backend)
        start = backend.parameters()
        rows = get_task("tiny_arith").rows("train", 1) * 4  # one prompt: the sampler's order cannot differ
        rollouts = {}
        for run, seed in enumerate([0, 1, 0]):
            backend.load_parameters(start)
            _train(backend, tmp_path / f"run{run}", seed, rows)
            rollouts[run] = built[-1].completions[0]
        assert len(built) == 3 and all(len(r) == 16 for r in rollouts.values())
        assert rollouts[0] == rollouts[2], "the same cell seed repeats its rollouts"
        assert rollouts[0] != rollouts[1], "another cell seed samples other rollouts"
    finally:
        backend.close()
