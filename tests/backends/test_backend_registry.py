"""Backends are found through the entry-point group `esbench.backends`, as methods are: a plug-in backend is one module
and one entry point, and a suite names it by that entry point's name."""

from __future__ import annotations

import textwrap

import pytest

from esbench.backends import BackendSpec, build_backend, registry


def _install(tmp_path, monkeypatch, name: str, entry: str, module: str) -> None:
    """An installed distribution on sys.path: its module `name` and a dist-info folder declaring one
    `esbench.backends` entry point (importlib.metadata finds it as it finds a pip-installed plug-in)."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(module))
    info = tmp_path / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[esbench.backends]\n{entry}\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_the_builtin_backends_are_entry_points():
    assert {"hf", "vllm"} <= set(registry.names())
    assert registry.get("hf").__name__ == "HFBackend"
    with pytest.raises(KeyError, match="registered backends: .*hf"):
        registry.get("sglang")


def test_a_plugin_backend_is_validated_and_built_by_its_entry_point_name(tmp_path, monkeypatch):
    from esbench.models import load_model

    _install(
        tmp_path,
        monkeypatch,
        "esbench_counting_backend",
        "counting = esbench_counting_backend:Counting",
        """
        from esbench.backends.hf import HFBackend

        class Counting(HFBackend):
            kind = "counting"
            built = 0

            def __init__(self, model, tokenizer, **kw):
                type(self).built += 1
                super().__init__(model, tokenizer, **kw)
        """,
    )
    with pytest.raises(ValueError, match="unknown backend 'nope'; known: .*counting"):
        BackendSpec(kind="nope")
    spec = BackendSpec(kind="counting", device="cpu")
    loaded = load_model("builtin:tiny")
    backend = build_backend(spec, loaded.model, loaded.tokenizer)
    assert type(backend).__name__ == "Counting" and type(backend).built == 1
    assert backend.kind == "counting" and backend.provenance()["kind"] == "counting"
    assert len(backend.generate(["+1+2="], max_new_tokens=4)[0]) == 1


def test_an_entry_point_that_is_not_a_class_is_refused(tmp_path, monkeypatch):
    entry = "broken = esbench_broken_backend:build"
    _install(tmp_path, monkeypatch, "esbench_broken_backend", entry, "def build(): ...\n")
    with pytest.raises(TypeError, match="'broken'.*esbench.backends.*not a class"):
        registry.get("broken")
