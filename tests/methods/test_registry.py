"""Methods are found through the `esbench.methods` entry-point group, built-ins and third-party alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from esbench.methods import Method, registry

PLUGIN = '''
"""A third-party method living outside esbench: random weight jitter, one logged row per update."""
import torch
from pydantic import BaseModel, ConfigDict

from esbench.methods import Method, TrainResult


class JitterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    scale: float = 1e-3


class Jitter(Method):
    Config = JitterConfig

    def train(self, train_data, reward, budget, config, ctx):
        gen = torch.Generator().manual_seed(ctx.seed)
        for step in range(budget):
            with torch.no_grad():
                for p in ctx.backend.parameters().values():
                    p.add_(torch.randn(p.shape, generator=gen) * config.scale)
            row = train_data[step % len(train_data)]
            ctx.log({"update": step, "reward_mean": reward("#### " + row["answer"], row["answer"])})
        return TrainResult(updates=budget)


class ReleasedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    weights: str


class Released(Method):
    """Evaluates weights someone released, named in its own config layout (`weights:`, not `path:`)."""
    trains = False
    loads_weights = True
    Config = ReleasedConfig

    @classmethod
    def weights_to_load(cls, config, dtype):
        return {"path": config["weights"], "dtype": dtype}

    def train(self, train_data, reward, budget, config, ctx):
        return TrainResult()
'''


@pytest.fixture
def plugin_path(tmp_path):
    """An installed-looking distribution (module + dist-info with entry_points.txt) on a private path."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "jitter_plugin.py").write_text(textwrap.dedent(PLUGIN))
    info = root / "jitter_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jitter-plugin\nVersion: 0.1\n")
    entries = "jitter = jitter_plugin:Jitter\nreleased = jitter_plugin:Released\n"
    (info / "entry_points.txt").write_text("[esbench.methods]\n" + entries)
    return root


def _run_with_plugin(suite, out, plugin_path):
    """`esbench run SUITE` in a child process that finds the plug-in's distribution on its path."""
    env = {**os.environ, "PYTHONPATH": f"{plugin_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "esbench.cli", "run", str(suite), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_builtin_base_is_registered_through_entry_points():
    assert "base" in registry.names()
    cls = registry.get("base")
    assert issubclass(cls, Method) and cls.trains is False


def test_unknown_method_names_the_registered_ones():
    with pytest.raises(KeyError, match="registered methods: .*base"):
        registry.get("nope")


def test_third_party_method_registers_and_runs(tmp_path, plugin_path, tiny_model_dir):
    suite = tmp_path / "plugin.yaml"
    suite.write_text(
        textwrap.dedent(
            """\
            # esbench run plugin.yaml
            name: plugin
            models: {tiny: {path: builtin:tiny}}
            datasets: {arith: {task: tiny_arith, size: 8}}
            methods:
              jitter: {scale: 0.0005}
            budgets: [3]
            seeds: [0]
            eval: {tasks: [tiny_arith], limit: 4, n: 2, k: [1, 2], temperature: 1.0, max_new_tokens: 40}
            """
        )
    )
    out = tmp_path / "runs"
    _run_with_plugin(suite, out, plugin_path)
    (cell,) = (out / "plugin").glob("*/record.json")
    record = json.loads(cell.read_text())
    assert record["cell"]["spec"]["method"] == {"kind": "jitter", "config": {"scale": 0.0005}}
    assert record["budget_used"]["updates"] == 3
    rows = [json.loads(x) for x in (cell.parent / "train.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1, 2] and all(r["reward_mean"] == 1.0 for r in rows)
    assert record["provenance"]["final_weights_sha256"] != record["provenance"]["model"]["state_sha256"]

    # Without the plugin on the path the same suite is invalid, naming the method's line and field.
    bad = subprocess.run([sys.executable, "-m", "esbench.cli", "validate", str(suite)], capture_output=True, text=True)
    assert bad.returncode == 2
    assert f"{suite}:6: methods.jitter.method: unknown method 'jitter'" in bad.stderr


def test_a_plugin_that_loads_weights_is_evaluated_on_them(tmp_path, plugin_path, tiny_model_dir):
    """`loads_weights` is the registered class's declaration, not a method name: the runner loads what the
    plug-in's `weights_to_load` names, and the record's model provenance is those weights."""
    import torch

    from esbench.models import load_model, weights_hash

    other = tmp_path / "released"
    loaded = load_model(str(tiny_model_dir))
    with torch.no_grad():
        loaded.model.model.norm.weight.mul_(0.5)  # other weights, same architecture
    loaded.model.save_pretrained(other)
    loaded.tokenizer.save_pretrained(other)
    suite = tmp_path / "released.yaml"
    suite.write_text(
        "name: released\nmodels: {tiny: {path: builtin:tiny}}\n"
        f"methods:\n  released: {{weights: {other}}}\nseeds: [0]\n"
        "eval: {tasks: [tiny_arith], limit: 4, n: 2, k: [1, 2], temperature: 1.0, max_new_tokens: 40}\n"
    )
    out = tmp_path / "runs"
    _run_with_plugin(suite, out, plugin_path)
    (cell,) = (out / "released").glob("*/record.json")
    model = json.loads(cell.read_text())["provenance"]["model"]
    assert model["path"] == str(other)
    assert model["weights_sha256"] == weights_hash(str(other)) != weights_hash(str(tiny_model_dir))
