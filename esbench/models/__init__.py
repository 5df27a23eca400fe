"""Model loading: `builtin:tiny`, a local directory and a Hugging Face id all go through `load_model`.

The embedded tiny model is just a cached local directory, so the code path that loads it is the one that loads
Qwen2.5 or Llama on a GPU machine; only the name resolution differs.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUILTINS = ("tiny",)
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_model_path(path: str) -> None:
    """Raise ValueError for a model reference that cannot be loaded (checked without network access)."""
    if path.startswith("builtin:"):
        if path.removeprefix("builtin:") not in BUILTINS:
            raise ValueError(f"unknown builtin model {path!r}; known: {', '.join('builtin:' + b for b in BUILTINS)}")
        return
    local = Path(os.path.expanduser(path))
    if local.exists():
        if not (local / "config.json").exists():
            raise ValueError(f"local model directory {path!r} has no config.json")
        return
    if path.startswith(("/", ".", "~")) or not _HF_ID.match(path):
        raise ValueError(
            f"unknown model {path!r}: not a builtin (builtin:tiny), an existing local directory, "
            "or a Hugging Face id of the form org/name"
        )


def resolve(path: str) -> str:
    """A directory or hub id that `from_pretrained` accepts; builds the tiny model on first use."""
    if path == "builtin:tiny":
        from esbench.models import tiny

        return str(tiny.ensure_built())
    check_model_path(path)
    return os.path.expanduser(path)


def weights_hash(directory: str | Path) -> str:
    """SHA-256 over the weight files of a model directory (names and bytes), for provenance."""
    h = hashlib.sha256()
    files = sorted(p for p in Path(directory).iterdir() if p.suffix in (".safetensors", ".bin", ".gguf"))
    for p in files:
        h.update(p.name.encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def state_hash(model) -> str:
    """SHA-256 of a model's parameters in memory (name, dtype, shape, bytes): the final-weights fingerprint."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    provenance: dict[str, Any]


def load_model(path: str, revision: str | None = None, dtype: str = "float32") -> Loaded:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = resolve(path)
    kwargs = {} if os.path.isdir(where) else {"revision": revision}
    tokenizer = AutoTokenizer.from_pretrained(where, padding_side="left", **kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(where, dtype=getattr(torch, dtype), **kwargs)
    model.eval()
    prov: dict[str, Any] = {"path": path, "revision": revision, "dtype": dtype}
    if os.path.isdir(where):
        prov["weights_sha256"] = weights_hash(where)
    else:
        prov["resolved_revision"] = getattr(model.config, "_commit_hash", None)
    prov["parameters"] = sum(p.numel() for p in model.parameters())
    prov["state_sha256"] = state_hash(model)  # same fingerprint as the record's final_weights_sha256
    return Loaded(model, tokenizer, prov)
