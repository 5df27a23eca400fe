"""Helpers shared by the leaderboard tests (imported by module name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from run_helpers import shared_once


def esbench(*args: str, env: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "esbench.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def rehash(sub: Path) -> None:
    """What a careful tamperer does after editing: recompute the manifest so every file hash matches."""
    from esbench.leaderboard.verify import MANIFEST, manifest_for

    (sub / MANIFEST).write_text(json.dumps(manifest_for(sub), indent=2))


def edit_json(path: Path, fn) -> None:
    obj = json.loads(path.read_text())
    fn(obj)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True))


def cells(sub: Path) -> dict[str, Path]:
    """Cell folders by cell name (model/dataset/method/bBUDGET/sSEED)."""
    out = {}
    for d in sorted((sub / "cells").iterdir()):
        out[json.loads((d / "cell.json").read_text())["name"]] = d
    return out


def reforge(cell: Path) -> None:
    """What a forger who also rewrites the record does after editing samples: re-score every response with the
    task verifier, recompute the record's metrics from them, and re-bind the samples' hashes and cell.json."""
    import hashlib

    from esbench.evaluation import answer_entropy, summarise
    from esbench.tasks import get_task

    record = json.loads((cell / "record.json").read_text())
    ev = record["cell"]["spec"]["eval"]

    def rescored(name):
        rows = [json.loads(x) for x in (cell / "samples" / name).read_text().splitlines()]
        task = get_task(name.split(".")[0])
        for r in rows:
            verdicts = [task.verify(x, r["doc"]["answer"]) for x in r["resps"]]
            r["answers"] = [v.answer for v in verdicts]
            r["correct"] = [v.correct for v in verdicts]
        (cell / "samples" / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        return sorted(rows, key=lambda r: r["doc_id"])

    for t in ev["tasks"]:
        sampled = rescored(f"{t}.jsonl")
        greedy = rescored(f"{t}.greedy.jsonl") if ev["greedy"] else None
        old = record["metrics"][t]
        record["metrics"][t] = {**old, **summarise(sampled, greedy, ev["k"])}
        if "answer_entropy" in old:
            record["metrics"][t]["answer_entropy"] = answer_entropy(sampled)
    record["samples_sha256"] = {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted((cell / "samples").glob("*.jsonl"))
    }
    (cell / "record.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    (cell / "cell.json").write_text(json.dumps(record["cell"], indent=2, sort_keys=True))


def copy_as_seed(sub: Path, name: str, seed: int, **provenance) -> Path:
    """A forger's copy of cell `name` as another seed: spec, id, name, folder, provenance seeds and the
    submission's cell list all made consistent (the manifest is left to `rehash`)."""
    import shutil

    from esbench.records import eval_seed
    from esbench.spec import cell_id

    src = cells(sub)[name]
    record = json.loads((src / "record.json").read_text())
    old = record["cell"]["spec"]["seed"]
    spec = {**record["cell"]["spec"], "seed": seed}
    new_id = cell_id(spec)
    record["cell"].update(spec=spec, id=new_id, name=record["cell"]["name"].replace(f"/s{old}", f"/s{seed}"))
    record["provenance"].update(**provenance)
    # the forger knows the public rule: the eval seed is derived from the seed and the (claimed) final weights
    derived = eval_seed(seed, record["provenance"]["final_weights_sha256"])
    record["provenance"]["seeds"] = {"cell": seed, "train": seed, "eval": derived}
    dst = src.parent / new_id
    shutil.copytree(src, dst)
    (dst / "record.json").write_text(json.dumps(record))
    (dst / "cell.json").write_text(json.dumps(record["cell"]))
    entry = {"id": new_id, "name": record["cell"]["name"], "method": record["cell"]["labels"]["method"]}
    edit_json(sub / "submission.json", lambda s: s["cells"].append(entry))
    return dst


REPO = Path(__file__).resolve().parents[2]
PLUGIN_SRC = REPO / "examples" / "esbench-random-search" / "esbench_random_search.py"

RELEASE_SUITE = """\
name: lbsmall
models: {tiny: {path: "builtin:tiny"}}
datasets: {arith: {task: tiny_arith, size: 8}}
methods:
  base: {}
  es: {method: es, population: 4, sigma: 0.05, alpha: 0.01, batch_size: 8, max_new_tokens: 40}
budgets: [2]
seeds: [0, 1]
eval:
  tasks: [tiny_arith, tiny_reverse]
  held_out: [tiny_reverse]
  limit: 6
  n: 4
  k: [1, 2, 4]
  temperature: 1.0
  max_new_tokens: 40
"""
# The same grid with the plug-in added (as examples/esbench-random-search/tiny-random-search.yaml does for tiny).
PLUGIN_METHOD = (
    "  random-search: {method: random-search, candidates: 2, sigma: 0.05, batch_size: 8, max_new_tokens: 40}\n"
)


def plugin_site(root: Path) -> Path:
    """The example plug-in as an installed-looking distribution on a private path (CI does not pip-install it)."""
    site = root / "site"
    site.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(PLUGIN_SRC, site / PLUGIN_SRC.name)
    info = site / "esbench_random_search-0.1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: esbench-random-search\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[esbench.methods]\nrandom-search = esbench_random_search:RandomSearch\n")
    return site


_GENUINE: list = []


def genuine_once(tmp_path_factory) -> tuple:
    """The `genuine` fixture's submission, built once per test session (`run_helpers.shared_once`: one build for all
    pytest-xdist workers; the leaderboard tests and the hostile-input tests in tests/security share it, read-only;
    the caller has made sure the tiny model is built)."""
    if _GENUINE:
        return _GENUINE[0]
    base = shared_once(tmp_path_factory, "lb-genuine", _build_genuine)
    root = base / "leaderboard"
    _GENUINE.append((root, root / "submissions" / "genuine", base / "runs" / "lbsmall", _plugin_env(base / "site")))
    return _GENUINE[0]


def _plugin_env(site: Path) -> dict[str, str]:
    """The environment that makes the example plug-in installed (its site folder first on PYTHONPATH)."""
    return {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _build_genuine(base: Path) -> None:
    """A test release under base/leaderboard, a run of its suite plus the plug-in, and `esbench submit`."""
    from esbench.leaderboard.release import CURRENT, write_release

    root = base / "leaderboard"
    suite = base / "lbsmall.yaml"
    suite.write_text(RELEASE_SUITE)
    ref = base / "reference"
    ref.mkdir()
    for f in ("paper_tables.json", "expected_results.json"):
        shutil.copyfile(REPO / "leaderboard" / "reference" / f, ref / f)
    write_release(root, CURRENT, [suite], ref, "2026-01-01", "test release")
    with_plugin = base / "lbsmall-plugin.yaml"
    with_plugin.write_text(RELEASE_SUITE.replace("budgets:", PLUGIN_METHOD + "budgets:"))
    run = esbench("run", str(with_plugin), "--out", str(base / "runs"), env=_plugin_env(plugin_site(base)))
    assert run.returncode == 0, run.stdout + run.stderr
    sub = esbench("submit", str(base / "runs" / "lbsmall"), "--name", "genuine", "--root", str(root))
    assert sub.returncode == 0, sub.stdout + sub.stderr


def tampered_copy(genuine: tuple, tmp_path: Path) -> tuple[Path, Path]:
    """A fresh copy of the genuine submission in its own leaderboard root (same release), to edit."""
    root, sub, _, _ = genuine
    new_root = tmp_path / "leaderboard"
    shutil.copytree(root / "releases", new_root / "releases")
    dest = new_root / "submissions" / "genuine"
    shutil.copytree(sub, dest)
    return new_root, dest
