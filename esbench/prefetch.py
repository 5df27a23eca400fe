"""`esbench prefetch SUITE`, and the check `esbench run` makes before it schedules anything.

Compute nodes of many clusters have no internet. `prefetch`, run where the hub is reachable (a login node), downloads
every model (at its pinned revision, its subfolder only when one is named) and every hub dataset of a suite into the
Hugging Face caches, which compute nodes then share (HF_HOME on a shared file system):
- models and dataset repositories through huggingface_hub's `snapshot_download`;
- datasets also through `datasets.load_dataset` for every split the suite uses, so the Arrow cache that an offline
  load reads exists too.

`missing(artefacts)` checks the same list against the caches and, unless `HF_HUB_OFFLINE` is set, asks the hub about
whatever is not cached. `esbench run` calls it first and exits 2 with one message listing every missing model and
dataset, instead of failing cell by cell hours later. Built-in, GGUF-package and local models, synthetic and
reasoning-gym tasks, and datasets with a local mirror (`ESBENCH_DATASETS_DIR`) need nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

HUB_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Artefact:
    kind: Literal["model", "dataset"]
    repo: str
    revision: str | None
    subfolder: str | None = None  # models: the folder of the repo the cell loads
    config: str | None = None  # datasets: the `datasets` config name
    splits: tuple[str, ...] = field(default=(), compare=False)  # datasets: hub splits the suite reads

    def describe(self) -> str:
        where = f"@{self.revision[:12]}" if self.revision else "@<default branch>"
        extra = f" subfolder {self.subfolder}" if self.subfolder else ""
        extra += f" config {self.config}" if self.config else ""
        splits = f" splits {', '.join(self.splits)}" if self.splits else ""
        return f"{self.kind} {self.repo}{where}{extra}{splits}"


def is_hub_model(path: str) -> bool:
    return not path.startswith(("builtin:", "pkg:")) and not Path(os.path.expanduser(path)).exists()


def artefacts(cells) -> list[Artefact]:
    """Every hub model and dataset the cells load, in first-use order, each once (splits merged)."""
    from esbench.methods import model_to_load
    from esbench.tasks import get_task, hub

    models: dict[tuple, Artefact] = {}
    datasets: dict[tuple, set[str]] = {}
    for cell in cells:
        m = model_to_load(cell.spec["method"], cell.spec["model"])
        if is_hub_model(m["path"]):
            a = Artefact("model", m["path"], m.get("revision"), subfolder=m.get("subfolder"))
            models.setdefault((a.repo, a.revision, a.subfolder), a)
        uses = [(t, "test") for t in cell.spec["eval"]["tasks"]]
        if cell.spec["dataset"]:
            uses.append((cell.spec["dataset"]["task"], "train"))
        for name, split in uses:
            source = get_task(name).source or ""
            kind, _, key = source.partition(":")
            if kind != "hub":
                continue
            src = hub.SOURCES[key]
            if src.local_dir() is not None:
                continue
            k = (src.path, src.revision, src.name)
            datasets.setdefault(k, set()).add(src.splits[split])
    out = list(models.values())
    for (repo, rev, config), splits in datasets.items():
        out.append(Artefact("dataset", repo, rev, config=config, splits=tuple(sorted(splits))))
    return out


def cached(a: Artefact) -> bool:
    """The artefact's files are in the local Hugging Face cache (checked without network)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(a.repo, repo_type=a.kind, revision=a.revision, local_files_only=True, **_patterns(a))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        return False
    root = Path(folder) / (a.subfolder or "")
    if a.kind == "model":
        return (root / "config.json").exists() and (any(root.glob("*.safetensors")) or any(root.glob("*.bin")))
    return any(p.is_file() for p in root.rglob("*"))


def hub_error(a: Artefact) -> str | None:
    """Why the hub cannot serve the artefact now (None: it can). Offline mode counts as unreachable."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "not in the cache, and HF_HUB_OFFLINE is set"
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        info = api.model_info if a.kind == "model" else api.dataset_info
        info(a.repo, revision=a.revision, timeout=HUB_TIMEOUT_S)
    except Exception as e:  # unreachable host, unknown repo or revision, gated repo without a token
        return f"not in the cache, and the hub did not serve it ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
    return None


def missing(arts: list[Artefact]) -> list[tuple[Artefact, str]]:
    """Every artefact that is neither cached nor available from the hub, with the reason."""
    out = []
    for a in arts:
        if cached(a):
            continue
        reason = hub_error(a)
        if reason:
            out.append((a, reason))
    return out


def _patterns(a: Artefact) -> dict:
    return {"allow_patterns": [f"{a.subfolder}/*"]} if a.kind == "model" and a.subfolder else {}


def fetch(a: Artefact) -> str:
    """Download one artefact into the caches; returns its snapshot folder."""
    from huggingface_hub import snapshot_download

    folder = snapshot_download(a.repo, repo_type=a.kind, revision=a.revision, **_patterns(a))
    if a.kind == "dataset":
        import datasets

        for split in a.splits:  # builds the Arrow cache an offline `load_dataset` reads
            datasets.load_dataset(a.repo, a.config, revision=a.revision, split=split)
    return folder
