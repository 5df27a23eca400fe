"""A genuine small submission, built once per session: a test release, a run of its suite plus the
random-search plug-in, and `esbench submit`. Tamper tests work on copies of it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from lb_helpers import esbench

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


@pytest.fixture(scope="session")
def genuine(tmp_path_factory, tiny_model_dir):
    """(leaderboard root, submission folder, run folder, plug-in env) for a verified submission of 6 cells."""
    from esbench.leaderboard.release import CURRENT, write_release

    base = tmp_path_factory.mktemp("lb")
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
    env = {"PYTHONPATH": f"{plugin_site(base)}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = esbench("run", str(with_plugin), "--out", str(base / "runs"), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    sub = esbench("submit", str(base / "runs" / "lbsmall"), "--name", "genuine", "--root", str(root))
    assert sub.returncode == 0, sub.stdout + sub.stderr
    return root, root / "submissions" / "genuine", base / "runs" / "lbsmall", env


@pytest.fixture
def tampered(genuine, tmp_path):
    """A fresh copy of the genuine submission in its own leaderboard root (same release), to edit."""
    root, sub, _, _ = genuine
    new_root = tmp_path / "leaderboard"
    shutil.copytree(root / "releases", new_root / "releases")
    dest = new_root / "submissions" / "genuine"
    shutil.copytree(sub, dest)
    return new_root, dest
