"""Shared fixtures. Tests run offline, on one thread (shared 2-core machines), with HF caches in a temp dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _one_thread(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf_home"))


@pytest.fixture(scope="session")
def tiny_model_dir():
    """The real `builtin:tiny` from the user cache (built once per machine, about two minutes)."""
    from esbench.models import tiny

    return tiny.ensure_built()


TINY_SUITE = """\
# esbench run {path}
name: {name}
models:
  tiny: {{path: builtin:tiny}}
methods:
  base: {{}}
seeds: [0]
eval:
  tasks: [tiny_arith, tiny_reverse]
  held_out: [tiny_reverse]
  limit: 6
  n: 4
  k: [1, 4]
  temperature: 1.0
  max_new_tokens: 40
"""


@pytest.fixture
def small_suite(tmp_path, tiny_model_dir) -> Path:
    """A base-only suite on the real tiny model with a few problems: the pipeline in seconds."""
    path = tmp_path / "small.yaml"
    path.write_text(TINY_SUITE.format(path=path, name="small"))
    return path


@pytest.fixture
def repo() -> Path:
    return REPO
