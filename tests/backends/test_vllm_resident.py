"""What the vLLM backend keeps resident during and after ES (issue 25): the worker's editor is freed when training
ends, a new editor is built only once the old one is gone, the states that leave the worker are CPU copies, and the
HF copy of the model rests on the host while the engine holds the weights (on the device only to compute, while
handed out to GRPO, or while the engine is released)."""

from __future__ import annotations

import weakref

import pytest
import torch

from esbench.models import load_model


@pytest.fixture(scope="module")
def vb(tiny_model_dir):
    from esbench.backends.vllm import VLLMBackend

    loaded = load_model(str(tiny_model_dir))
    backend = VLLMBackend(loaded.model, loaded.tokenizer, device="cpu", cpu_threads=1)
    yield backend
    backend.close()


def _worker_editor(vb):
    return vb.collective_rpc(lambda worker: getattr(worker, "_esb_editor", None))[0]


def test_es_leaves_no_editor_in_the_worker_and_returns_cpu_states(vb, tmp_path):
    from esbench.methods import TrainContext, registry
    from esbench.rewards import Reward
    from esbench.tasks import get_task

    task = get_task("tiny_arith")
    cls = registry.get("es")
    cfg = cls.Config(population=2, batch_size=2, max_new_tokens=8, sigma=0.01, alpha=0.005, checkpoint_every=1)
    ctx = TrainContext(seed=0, workdir=tmp_path, log_path=tmp_path / "train.jsonl", prompt=task.prompt, backend=vb)
    seen = {}
    real_new = type(vb)._rpc

    def spy(self, method, *args):
        if method == "esbench_editor" and args[1] == "update":
            seen["during"] = _worker_editor(self) is not None  # the editor is there while training
        return real_new(self, method, *args)

    type(vb)._rpc = spy
    try:
        result = cls().train(task.rows("train", 4), Reward(task), 2, cfg, ctx)
    finally:
        type(vb)._rpc = real_new
    assert seen["during"]
    assert _worker_editor(vb) is None  # its fp32 master is gone: the evaluation after training has that memory
    assert result.ideal and all(t.device.type == "cpu" for t in result.ideal.values())
    assert vb.generate(["1+2="], max_new_tokens=4)  # the engine still serves


def test_a_new_worker_editor_is_built_after_the_old_one_is_freed(vb, monkeypatch):
    """Two fp32 masters at once are what made the diversity analysis run out of memory beside a 7B engine."""
    import esbench.backends.vllm_worker as worker_mod

    real = worker_mod.TensorEditor
    alive_at_build: list[bool] = []
    made: list[weakref.ref] = []

    def build(*a, **kw):
        alive_at_build.append(any(r() is not None for r in made))
        ed = real(*a, **kw)
        made.append(weakref.ref(ed))
        return ed

    monkeypatch.setattr(worker_mod, "TensorEditor", build)
    first = vb.weight_editor("fp32-master")
    first.perturb(1, 0.01)
    first.restore()
    vb.weight_editor("fp32-master")  # e.g. the diversity analysis after ES
    assert alive_at_build == [False, False]
    with pytest.raises(RuntimeError, match="replaced by a newer one"):
        first.perturb(1, 0.01)


def test_a_closed_in_process_editor_refuses_to_work(tiny_model_dir):
    from esbench.backends.hf import HFBackend

    loaded = load_model(str(tiny_model_dir))
    editor = HFBackend(loaded.model, loaded.tokenizer, device="cpu").weight_editor("fp32-master")
    state = editor.ideal_state()
    editor.close()
    assert editor.master is None and all(t.device.type == "cpu" for t in state.values())
    with pytest.raises(RuntimeError, match="closed"):
        editor.perturb(1, 0.01)


# ---------------------------------------------------------------------------------------------------------------
# where the HF copy lives (issue 25: "the HF copy lives on the CPU while the engine owns the weights")
#
# On this CPU the host is the compute device, so a move changes nothing physically; what these tests check is the
# state machine (`hf_placement`) and, by a spy on `VLLMBackend._move_hf`, exactly which calls move the copy.


@pytest.fixture
def moves(vb, monkeypatch):
    """Every move of the HF copy ("device" or "host"), in order; the real move still runs."""
    from esbench.backends.vllm import VLLMBackend

    real = VLLMBackend._move_hf
    seen: list[str] = []

    def spy(self, where):
        seen.append(where)
        real(self, where)

    monkeypatch.setattr(VLLMBackend, "_move_hf", spy)
    return seen


def test_the_hf_copy_rests_on_the_host_and_moves_only_to_compute(vb, moves, monkeypatch, tmp_path):
    assert vb.hf_placement == "host" and vb.hf.device == vb.host
    prov = vb.provenance()
    assert prov["hf_copy"] == "host" and prov["device"] == "cpu" and prov["cpu_threads"] == 1
    original = vb.parameters()

    # teacher-forced forwards: on the device for the call, back on the host after
    from esbench.backends.hf import HFBackend

    during: list[str] = []
    for name in ("token_entropy", "token_logprobs"):
        real = getattr(HFBackend, name)
        monkeypatch.setattr(HFBackend, name, lambda *a, _r=real, **k: (during.append(vb.hf_placement), _r(*a, **k))[1])
    entropy = vb.token_entropy(["1+2="], ["3"])
    logprobs = vb.token_logprobs(["1+2="], ["3"])
    assert entropy["tokens"] == 1 and len(logprobs[0]) == 1
    assert during == ["device", "device"] and moves == ["device", "host"] * 2 and vb.hf_placement == "host"

    # saving, hashing, the engine's edits and the syncs between the copies work on the host copy
    moves.clear()
    editor = vb.weight_editor("fp32-master")
    editor.perturb(3, 0.01)
    editor.restore()
    editor.update([5], [0.05])
    editor.close()
    vb.state_hash()  # pulls the edited weights into the HF copy, on the host
    vb.save(tmp_path / "saved")
    vb.load_parameters(original)
    vb.generate(["1+2="], max_new_tokens=2)
    assert moves == [] and vb.hf_placement == "host"

    # handed out (GRPO trains it in place): on the device until released or the engine is edited
    model = vb.model
    assert vb.hf_placement == "device" and moves == ["device"]
    vb.generate(["1+2="], max_new_tokens=2)  # the engine is refreshed from it; it stays where the caller has it
    assert vb.hf_placement == "device"
    vb.release_model()
    assert vb.hf_placement == "host" and moves == ["device", "host"]
    assert vb.model is model and vb.hf_placement == "device"
    vb.weight_editor("fp32-master").update([7], [0.05])  # an engine edit ends the hand-out
    assert vb.hf_placement == "host" and moves == ["device", "host"] * 2
    vb.load_parameters(original)

    # released: the HF copy is the only copy, on the device; back on the host when the engine restarts
    moves.clear()
    with vb.engine_released():
        assert vb.llm is None and vb.hf_placement == "device"
        assert vb.generate(["1+2="], max_new_tokens=2)
        vb.token_entropy(["1+2="], ["3"])  # already on the device: no move there and back
        vb.cast(torch.bfloat16)  # cast where it lives
        assert vb.hf_placement == "device" and vb.hf.dtype == torch.bfloat16
    assert vb.llm is not None and vb.hf_placement == "host" and moves == ["device", "host"]
    assert vb.dtype == torch.bfloat16

    # a cast with the engine up restarts it from the host copy, which stays there
    moves.clear()
    vb.cast(torch.float32)
    assert moves == [] and vb.hf_placement == "host" and vb.hf.dtype == torch.float32
    vb.load_parameters(original)
    assert all(torch.equal(vb.parameters()[n], original[n]) for n in original)


def test_a_move_puts_the_hf_copy_on_the_compute_device_and_frees_the_gpu_after(vb, monkeypatch):
    """What `_move_hf` does on a GPU node, with the model's `.to` and CUDA's cache release stood in for: to the
    compute device, back to the host, and the device memory handed back to the driver for the engine's next start."""
    calls: list = []
    model = vb.hf.model
    monkeypatch.setattr(vb, "compute", torch.device("cuda", 0))
    monkeypatch.setattr(type(model), "to", lambda self, device: calls.append(device) or self)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    vb._move_hf("device")
    assert calls == [torch.device("cuda", 0)] and vb.hf_placement == "device"
    vb._move_hf("host")
    assert calls[1:] == [torch.device("cpu"), "empty_cache"] and vb.hf_placement == "host"


def test_a_failed_move_to_the_device_leaves_the_hf_copy_on_the_host(vb, moves, monkeypatch):
    """An out-of-memory error half-way through the move must not leave part of the model on the GPU."""
    from esbench.backends.vllm import VLLMBackend

    real = VLLMBackend._move_hf

    def oom(self, where):
        if where == "device":
            moves.append("device")
            raise torch.OutOfMemoryError("CUDA out of memory")
        real(self, where)

    monkeypatch.setattr(VLLMBackend, "_move_hf", oom)
    with pytest.raises(torch.OutOfMemoryError):
        vb.token_entropy(["1+2="], ["3"])
    assert vb.hf_placement == "host" and vb.hf.device == vb.host


def test_es_keeps_the_hf_copy_on_the_host(vb, moves, tmp_path):
    """The acceptance's resident set during and after ES: the HF copy is off the engine's device throughout."""
    from esbench.backends.vllm import VLLMBackend
    from esbench.methods import TrainContext, registry
    from esbench.rewards import Reward
    from esbench.tasks import get_task

    task = get_task("tiny_arith")
    cls = registry.get("es")
    cfg = cls.Config(population=2, batch_size=2, max_new_tokens=8, sigma=0.01, alpha=0.005, checkpoint_every=1)
    ctx = TrainContext(seed=0, workdir=tmp_path, log_path=tmp_path / "train.jsonl", prompt=task.prompt, backend=vb)
    original = vb.parameters()
    placements: list[str] = []
    real_rpc = VLLMBackend._rpc

    def spy(self, method, *args):
        if method == "esbench_editor":
            placements.append(self.hf_placement)
        return real_rpc(self, method, *args)

    VLLMBackend._rpc = spy
    try:
        cls().train(task.rows("train", 4), Reward(task), 2, cfg, ctx)
    finally:
        VLLMBackend._rpc = real_rpc
    try:
        assert placements and set(placements) == {"host"}
        assert moves == [] and vb.hf_placement == "host"
    finally:
        vb.load_parameters(original)


class _TextReward:
    """A CRC of the text: differs between different responses, so a GRPO group has an advantage (see
    tests/methods/test_grpo_vllm.py). Records where the HF copy is while TRL trains."""

    def __init__(self, backend):
        self.backend = backend
        self.seen: list[tuple[str, bool]] = []

    def with_values(self, correct: float, formatted: float) -> _TextReward:
        return self

    def __call__(self, response: str, gold: str) -> float:
        import zlib

        self.seen.append((self.backend.hf_placement, self.backend.llm is None))
        return zlib.crc32(response.encode()) / 2**32


def test_grpo_trains_the_hf_copy_on_the_device_and_leaves_it_on_the_host(vb, moves, tmp_path):
    from esbench.methods import TrainContext, registry
    from esbench.tasks import get_task

    task = get_task("tiny_arith")
    cls = registry.get("grpo")
    cfg = cls.Config(
        prompts_per_rollout=2,
        num_generations=2,
        ppo_minibatch_prompts=2,
        micro_batch=4,
        learning_rate=1e-4,
        max_completion_length=4,
        checkpoint_every=100,
    )
    ctx = TrainContext(seed=0, workdir=tmp_path, log_path=tmp_path / "train.jsonl", prompt=task.prompt, backend=vb)
    reward = _TextReward(vb)
    original = vb.parameters()
    try:
        cls().train(task.rows("train", 2), reward, 1, cfg, ctx)
        assert reward.seen and set(reward.seen) == {("device", True)}, "TRL trains the only copy, on the device"
        assert moves == ["device", "host"], "to the device when handed out, back when the engine restarts"
        assert vb.llm is not None and vb.hf_placement == "host"
        trained, hf = vb.parameters(), vb.hf.parameters()
        assert all(torch.equal(trained[k], hf[k]) for k in trained), "the restarted engine holds the trained weights"
    finally:
        vb.load_parameters(original)
