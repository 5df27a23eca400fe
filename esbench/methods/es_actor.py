"""One ES replica on a Ray actor (`ESActor`): the actor's side of the protocol in `esbench.es.population`.

Apart from the driver's side (`esbench.methods.es_ray`, which only hands this class to Ray) because it runs in
the actor's process: it loads a model, a backend and an ES editor of its own from the folder the driver saved.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from esbench.es.population import Rollout, roll_out_members
from esbench.es.weights import Precision


class ESActor:
    """One replica (made a Ray actor by `RayPopulation`): a backend over the driver's weights, and an ES editor."""

    def __init__(
        self,
        folder: str,
        backend_spec: dict[str, Any],
        dtype: str,
        precision: Precision,
        run_seed: int,
        spec,
        noise: str = "torch",
    ):
        from safetensors.torch import load_file

        from esbench.backends import BackendSpec, build_backend
        from esbench.models import load_model
        from esbench.ray_session import pin_assigned_gpus

        self.gpus = pin_assigned_gpus()  # before CUDA starts: `cuda` is then the GPU Ray assigned this actor
        if backend_spec["device"] == "cuda" and not self.gpus:
            raise RuntimeError("an ES worker for a CUDA driver was given no GPU by Ray")
        loaded = load_model(folder, dtype=dtype)
        self.backend = build_backend(BackendSpec(**backend_spec), loaded.model, loaded.tokenizer)
        self.editor = self.backend.weight_editor(precision, noise)  # the driver's noise scheme
        self.editor.load_master_state(load_file(str(Path(folder) / "master.safetensors")))
        anchor = Path(folder) / "anchor.safetensors"
        self.anchor = load_file(str(anchor)) if anchor.exists() else None
        self.run_seed, self.spec = run_seed, Rollout(**spec)

    def roll_out(self, step: int, indices: list[int], prompts: list[str]) -> list[list[tuple[str, int]]]:
        return roll_out_members(self.backend, self.editor, self.spec, self.run_seed, step, indices, prompts)

    def update(self, seeds: list[int], coeffs: list[float], decay: float) -> str:
        self.editor.update(seeds, coeffs, decay, self.anchor)
        return self.backend.checksum()

    def checksum(self) -> str:
        return self.backend.checksum()

    def engine_state(self) -> dict[str, Any]:
        """This engine's weights (paper-bf16: the compute weights, residuals included), on the CPU."""
        return self.editor.master_state()  # CPU copies

    def load_engine(self, state: dict[str, Any]) -> str:
        """Take another engine's weights (a re-sync from engine 0, or a resumed checkpoint); returns the checksum."""
        self.editor.load_master_state(state)
        return self.backend.checksum()

    def placement(self) -> dict[str, Any]:
        """Where this replica runs: pid, node, the GPUs Ray assigned, CUDA_VISIBLE_DEVICES, the torch device."""
        import ray

        return {
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
            "gpus": self.gpus,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device": str(self.backend.device),
        }
