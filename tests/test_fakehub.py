"""The fake Hub (`tests/fakehub.py`) serves real huggingface_hub / transformers / datasets downloads, and what they
fetch loads again offline.

The HF libraries read `HF_ENDPOINT`, `HF_HUB_OFFLINE`, `HF_DATASETS_OFFLINE` and the cache paths into module
constants at import time, and conftest.py has already set both offline flags (and imported torch) in this process.
So every online or offline step runs in a fresh subprocess with an explicit environment (`FakeHub.env`) and a fresh
per-test HF_HOME: nothing depends on what this process imported, and each step sees exactly the flags it names. Only
`test_api_in_process` talks to the server from this process, through `HfApi(endpoint=...)` with the offline
constant patched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fakehub import FakeHub

MODEL, DATASET, NEVER = "org/tiny-llama", "org/tiny-qa", "org/never-fetched"
REV, DREV = "1" * 40, "2" * 40
ROWS = [{"question": f"Q {i}+{i}=?", "answer": str(2 * i)} for i in range(5)]
README = """\
---
configs:
- config_name: main
  data_files:
  - split: test
    path: main/test.jsonl
---
# tiny-qa
"""


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A tiny random Llama with the project's character tokenizer, and a one-config JSON-lines data set."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from esbench.models.tiny import build_tokenizer

    root = tmp_path_factory.mktemp("fakehub_src")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    LlamaForCausalLM(config).save_pretrained(root / "model")
    build_tokenizer(128).save_pretrained(root / "model")
    (root / "data" / "main").mkdir(parents=True)
    (root / "data" / "README.md").write_text(README)
    (root / "data" / "main" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return root


@pytest.fixture(scope="module")
def hub(sources):
    with FakeHub() as hub:
        hub.add_model(MODEL, REV, sources / "model")
        hub.add_dataset(DATASET, DREV, sources / "data")
        yield hub


def run_hf(hub: FakeHub, hf_home, code: str, *, offline: bool) -> dict:
    """Run `code` in a subprocess pointed at `hub`, with caches under `hf_home`; it prints one JSON line last.

    An offline step must not reach the server at all: that is checked here too.
    """
    before = len(hub.requests)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=hub.env(hf_home, offline=offline),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    if offline:
        assert hub.requests[before:] == [], "an offline step reached the hub"
    else:
        assert len(hub.requests) > before, "an online step never reached the hub"
    assert "FakeHub: UNHANDLED" not in proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_snapshot_download_then_offline(hub, sources, tmp_path):
    hf_home = tmp_path / "hf"
    online = run_hf(
        hub,
        hf_home,
        f"""
        import json
        from huggingface_hub import snapshot_download
        print(json.dumps({{
            "model": snapshot_download("{MODEL}", revision="{REV}"),
            "data": snapshot_download("{DATASET}", revision="{DREV}", repo_type="dataset"),
            "main": snapshot_download("{MODEL}", revision="main"),  # resolved through /api/models/<repo>/revision/main
        }}))
        """,
        offline=False,
    )
    for key, src in (("model", sources / "model"), ("data", sources / "data")):
        assert str(hf_home / "hub") in online[key]
        files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
        got = Path(online[key])
        assert sorted(p.relative_to(got) for p in got.rglob("*") if p.is_file()) == files
        assert all((got / f).read_bytes() == (src / f).read_bytes() for f in files)
    assert online["main"] == online["model"]

    offline = run_hf(
        hub,
        hf_home,
        f"""
        import json
        from huggingface_hub import snapshot_download, try_to_load_from_cache
        from huggingface_hub.errors import LocalEntryNotFoundError
        out = {{
            "model": snapshot_download("{MODEL}", revision="{REV}", local_files_only=True),
            "data": snapshot_download("{DATASET}", revision="{DREV}", repo_type="dataset", local_files_only=True),
            "config": try_to_load_from_cache("{MODEL}", "config.json", revision="{REV}"),
            "jsonl": try_to_load_from_cache("{DATASET}", "main/test.jsonl", revision="{DREV}", repo_type="dataset"),
            "never_config": try_to_load_from_cache("{NEVER}", "config.json", revision="{REV}"),
        }}
        try:
            snapshot_download("{NEVER}", revision="{REV}", local_files_only=True)
        except LocalEntryNotFoundError as e:
            out["never"] = type(e).__name__
        print(json.dumps(out))
        """,
        offline=True,
    )
    assert offline["model"] == online["model"] and offline["data"] == online["data"]
    assert offline["config"] == f"{online['model']}/config.json"
    assert offline["jsonl"] == f"{online['data']}/main/test.jsonl"
    assert offline["never_config"] is None
    assert offline["never"] == "LocalEntryNotFoundError"


TRANSFORMERS_LOAD = f"""
import json, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("{MODEL}", revision="{REV}")
tok = AutoTokenizer.from_pretrained("{MODEL}", revision="{REV}")
ids = tok("Q 1+2=?")["input_ids"]
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits
out = {{"ids": ids, "logits": round(logits.double().sum().item(), 6), "layers": model.config.num_hidden_layers}}
"""


def test_transformers_online_then_offline(hub, tmp_path):
    hf_home = tmp_path / "hf"
    online = run_hf(hub, hf_home, TRANSFORMERS_LOAD + "print(json.dumps(out))", offline=False)
    assert online["layers"] == 1 and len(online["ids"]) == len("Q 1+2=?")
    assert (hf_home / "hub" / "models--org--tiny-llama" / "snapshots" / REV / "model.safetensors").is_file()

    never = f"""
try:
    AutoModelForCausalLM.from_pretrained("{NEVER}", revision="{REV}")
except OSError as e:
    out["never"] = type(e).__name__
print(json.dumps(out))
"""
    offline = run_hf(hub, hf_home, TRANSFORMERS_LOAD + never, offline=True)
    assert offline.pop("never") == "OSError"
    assert offline == online


DATASETS_LOAD = f"""
import json, datasets
rows = datasets.load_dataset("{DATASET}", "main", revision="{DREV}", split="test").to_list()
out = {{"rows": rows}}
"""


def test_datasets_online_then_offline(hub, tmp_path):
    hf_home = tmp_path / "hf"
    online = run_hf(hub, hf_home, DATASETS_LOAD + "print(json.dumps(out))", offline=False)
    assert online["rows"] == ROWS
    assert (hf_home / "hub" / "datasets--org--tiny-qa" / "snapshots" / DREV / "main" / "test.jsonl").is_file()

    # datasets 5.2 offline reloads its own prepared copy (HF_DATASETS_CACHE), not the hub snapshot.
    never = f"""
try:
    datasets.load_dataset("{NEVER}", "main", revision="{DREV}", split="test")
except Exception as e:  # ConnectionError("Couldn't reach ... (OfflineModeIsEnabled)") in datasets 5.2
    out["never"] = type(e).__name__
print(json.dumps(out))
"""
    offline = run_hf(hub, hf_home, DATASETS_LOAD + never, offline=True)
    assert offline["rows"] == ROWS
    assert "never" in offline, "loading a never-fetched data set offline did not fail"


def test_api_in_process(hub, sources, tmp_path, monkeypatch):
    """The endpoints directly: listings, paths-info, ranged reads, and the Hub's error codes."""
    from huggingface_hub import HfApi, HfFileSystem, constants
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # conftest set HF_HUB_OFFLINE=1 before the import
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)  # else it asks huggingface.co for agent ids
    api = HfApi(endpoint=hub.endpoint, token=False)

    assert api.dataset_info(DATASET, revision="main").sha == DREV
    tree = {(e.path, type(e).__name__) for e in api.list_repo_tree(DATASET, revision=DREV, repo_type="dataset")}
    assert tree == {("README.md", "RepoFile"), ("main", "RepoFolder")}
    deep = [e.path for e in api.list_repo_tree(DATASET, revision=DREV, repo_type="dataset", recursive=True)]
    assert sorted(deep) == ["README.md", "main", "main/test.jsonl"]
    info = api.get_paths_info(DATASET, ["main/test.jsonl", "missing.txt"], revision=DREV, repo_type="dataset")
    assert [(i.path, i.size) for i in info] == [("main/test.jsonl", (sources / "data/main/test.jsonl").stat().st_size)]

    fs = HfFileSystem(endpoint=hub.endpoint, token=False)
    with fs.open(f"datasets/{DATASET}@{DREV}/main/test.jsonl", "rb") as f:
        f.seek(3)
        assert f.read(10) == (sources / "data/main/test.jsonl").read_bytes()[3:13]

    with pytest.raises(RepositoryNotFoundError):
        api.model_info(NEVER)
    with pytest.raises(RevisionNotFoundError):
        api.model_info(MODEL, revision="3" * 40)
    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download(MODEL, "nope.bin", revision=REV, cache_dir=tmp_path / "cache")
