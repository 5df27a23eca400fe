"""The typed plug-in surface of esbench: what a method plug-in (entry-point group `esbench.methods`) may use.

    from esbench.api import Method, TrainContext, TrainResult, Reward, Backend

A plug-in subclasses `Method`, declares its `Config` (a pydantic model of its suite fields), and implements
`train(train_data, reward, budget, config, ctx)`. It reaches the model only through `ctx.backend` (generation,
token entropy, the ES weight editor, parameters), so the same recipe runs on every backend and device. It logs one
row per update with `ctx.log` and returns a `TrainResult`. CONTRIBUTING.md has the worked example.
"""

from esbench.backends import Backend, Generation
from esbench.es.weights import Precision, TensorEditor, WeightEditor, member_seed, noise
from esbench.methods import Method, TrainContext, TrainResult, registry
from esbench.rewards import Reward

__all__ = [
    "Backend",
    "Generation",
    "Method",
    "Precision",
    "Reward",
    "TrainContext",
    "TensorEditor",
    "TrainResult",
    "WeightEditor",
    "member_seed",
    "noise",
    "registry",
]
