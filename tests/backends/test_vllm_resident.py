"""What the vLLM backend keeps resident during and after ES (issue 25): the worker's editor is freed when training
ends, a new editor is built only once the old one is gone, and the states that leave the worker are CPU copies."""

from __future__ import annotations

import weakref

import pytest

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

    real = worker_mod.WeightEditor
    alive_at_build: list[bool] = []
    made: list[weakref.ref] = []

    def build(*a, **kw):
        alive_at_build.append(any(r() is not None for r in made))
        ed = real(*a, **kw)
        made.append(weakref.ref(ed))
        return ed

    monkeypatch.setattr(worker_mod, "WeightEditor", build)
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
