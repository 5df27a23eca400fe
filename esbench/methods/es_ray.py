"""The ES population on W Ray actors, the driver's side: `RayPopulation` (W identical fp32-master replicas) and
`RayEnginesPopulation` (paper-bf16's E engines), and where their actors go.

How members, updates and checksums cross between the driver and the actors, and the GPU accounting, are in
`esbench.es.population`'s docstring; the actors' side is `esbench.methods.es_actor`. Apart from the in-process
populations so that a one-process run never imports this (Ray is imported lazily here, where it is used).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from esbench.es.population import Population, Rollout, actors, blocks, roll_out_members
from esbench.es.weights import WeightsDiverged
from esbench.methods.es_actor import ESActor

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup

log = logging.getLogger(__name__)


def worker_gpus(backend) -> float:
    """GPUs each ES worker asks for: one when the driver's replica is on CUDA (one replica per GPU), else none."""
    return 1.0 if backend.device.type == "cuda" else 0.0


def driver_gpu(device) -> tuple[str, list[str]]:
    """(the id of the GPU the driver's replica is on, the other GPUs this process sees), as CUDA_VISIBLE_DEVICES
    names them (indices, or UUIDs when it lists UUIDs): the ids a private Ray instance may give the actors."""
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        ids = [str(i) for i in range(torch.cuda.device_count())]
    else:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
    mine = ids[device.index if device.index is not None else torch.cuda.current_device()]
    return mine, [i for i in ids if i != mine]


def reserved_bundles(workers: int) -> list[tuple[Any, float]] | None:
    """[(scheduling strategy, GPUs)] of bundles 1..W of the placement group the Ray executor made for this cell task
    (bundle 0 is the task itself), or None when this process is not a cell task in one."""
    from ray.util import get_current_placement_group, placement_group_table
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from esbench.ray_session import ES_WORKERS_GROUP

    group = get_current_placement_group()
    if group is None or not placement_group_table(group).get("name", "").startswith(ES_WORKERS_GROUP):
        return None
    specs = group.bundle_specs
    if len(specs) != workers + 1:
        raise RuntimeError(
            f"the Ray executor reserved GPUs for {len(specs) - 1} ES workers but this cell runs {workers}: "
            "ESBENCH_ES_WORKERS changed between the driver and the task"
        )
    return [(PlacementGroupSchedulingStrategy(group, k), float(specs[k].get("GPU", 0))) for k in range(1, workers + 1)]


class RayPopulation(Population):
    """W `ESActor`s on Ray, each a replica of the driver's backend (see `esbench.es.population`'s docstring)."""

    precisions: tuple[str, ...] = ("fp32-master",)  # replicas stay identical: checked after every update

    def __init__(self, backend, editor, spec: Rollout, run_seed: int, workers: int, workdir: Path, anchor=None):
        import ray
        import torch
        from safetensors.torch import save_file

        from esbench.ray_session import session

        if editor.precision not in self.precisions:
            raise ValueError(
                f"--es-workers {workers} needs precision fp32-master: {editor.precision} restores leave residuals "
                "that depend on which members a replica evaluated, so replicas would diverge; run it with 1 worker "
                "(paper-bf16 with `engines: E` runs its engines 1..E-1 as --es-workers E-1 actors)"
            )
        self.backend, self.workers, self.spec, self.run_seed = backend, workers, spec, run_seed
        folder = Path(workdir) / "es-replica"
        backend.save(folder)
        save_file({k: v.contiguous() for k, v in editor.master_state().items()}, str(folder / "master.safetensors"))
        if anchor is not None:
            save_file({k: v.contiguous() for k, v in anchor.items()}, str(folder / "anchor.safetensors"))
        gpus, driver, others = worker_gpus(backend), None, None
        if gpus and not ray.is_initialized() and not os.environ.get("ESBENCH_RAY_ADDRESS"):
            driver, others = driver_gpu(backend.device)  # our own instance: the driver's GPU is not Ray's to give
        self._group: PlacementGroup | None = None
        self._session: AbstractContextManager[str | None] | None = session(gpus=others)
        private = self._session.__enter__() is not None
        try:
            backend_spec = {
                "kind": backend.kind,
                "device": backend.device.type,
                "cpu_threads": torch.get_num_threads(),
            }
            actor = ray.remote(ESActor)
            dtype = str(backend.dtype).removeprefix("torch.")
            args = (str(folder), backend_spec, dtype, editor.precision, run_seed, asdict(spec), editor.noise)
            # handles whose methods are called as `.remote` (Ray types a handle as the class itself)
            self.actors: list[Any] = [
                actor.options(num_cpus=0, num_gpus=g, scheduling_strategy=where).remote(*args)
                for where, g in self._place(workers, gpus, private, driver)
            ]
            self.placement = ray.get([a.placement.remote() for a in self.actors])
            log.info("ES workers placed: %s", json.dumps({"driver": _driver_placement(), "workers": self.placement}))
            self.check(backend.checksum(), step=None)
        except BaseException:
            self.close()
            raise

    def _place(self, workers: int, gpus: float, private: bool, driver: str | None) -> list[tuple[Any, float]]:
        """Where each actor goes and the GPUs it holds (`esbench.es.population`'s docstring: GPU accounting)."""
        import ray
        from ray.util import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from esbench.ray_session import cluster_gpus, wait_ready

        reserved = reserved_bundles(workers)
        if reserved is not None:  # reserved by the executor together with this task's own GPU: nothing to wait for
            return reserved
        if not gpus:
            return [(None, 0.0)] * workers
        need = workers * gpus
        what = f"--es-workers {workers} asks Ray for {need:g} GPUs ({gpus:g} per worker) besides the driver's"
        total, _ = cluster_gpus()
        if private and total < need:
            raise RuntimeError(
                f"{what} (GPU {driver}), but this machine has {total:g} other GPUs: run with fewer --es-workers "
                "or on more GPUs"
            )
        if not private and not ray.get_gpu_ids():
            log.warning(
                "the driver's replica is on a GPU this Ray cluster does not account for (this process is not a Ray "
                "task holding it): an ES worker may land on the same GPU; run the suite with --executor ray"
            )
        self._group = placement_group([{"GPU": gpus}] * workers, strategy="PACK")
        wait_ready(self._group, what)
        return [(PlacementGroupSchedulingStrategy(self._group, k), gpus) for k in range(workers)]

    def roll_out(self, step: int, prompts: Sequence[str]) -> list[list[tuple[str, int]]]:
        """Every member's generations, in member order, as (text, tokens) per prompt."""
        import ray

        parts = blocks(self.spec.population, self.workers)
        refs = [a.roll_out.remote(step, idx, list(prompts)) for a, idx in zip(self.actors, parts, strict=True)]
        return [member for part in ray.get(refs) for member in part]

    def update(self, seeds: list[int], coeffs: list[float], decay: float, step: int) -> None:
        """Every actor applies the update the driver has applied; their checksums must equal the driver's."""
        import ray

        sums = ray.get([a.update.remote(seeds, coeffs, decay) for a in self.actors])
        self._compare(sums, self.backend.checksum(), step)

    def check(self, expected: str, step: int | None) -> None:
        import ray

        self._compare(ray.get([a.checksum.remote() for a in self.actors]), expected, step)

    def _compare(self, sums: list[str], expected: str, step: int | None) -> None:
        bad = [k for k, s in enumerate(sums) if s != expected]
        if bad:
            when = "at start" if step is None else f"after update {step}"
            raise WeightsDiverged(
                f"ES worker(s) {bad} of {self.workers} diverged from the driver {when}: weight checksums "
                f"{[sums[k] for k in bad]} != {expected}"
            )

    def close(self) -> None:
        import ray

        for a in getattr(self, "actors", []):
            ray.kill(a)
        self.actors = []
        if getattr(self, "_group", None) is not None:
            from ray.util import remove_placement_group

            remove_placement_group(self._group)
            self._group = None
        if self._session is not None:
            self._session.__exit__(None, None, None)
            self._session = None


class RayEnginesPopulation(RayPopulation):
    """The artifact's engine topology with real engines: `paper-bf16`, `engines: E`, `--es-workers E`.

    Engine 0 is the cell's own process (its backend and editor, as in `EnginesPopulation`); engines 1..E-1 are
    `ESActor`s (E-1 of them: `actors`), each a replica on a device of its own (one GPU each on a GPU node: E GPUs in
    all with the driver's, the artifact's 8 x A100 for E = 8), holding its own restore residuals. Every engine rolls
    out its own contiguous shard (the artifact's ceil(N/E) members each) at the same time, applies the same cast
    update to its own weights, and every `sync_every` completed updates takes engine 0's weights (the artifact's
    broadcast from rank 0; the checksums must then agree). Shards, per-engine arithmetic and re-syncs are
    `EnginesPopulation`'s, so a run is bit-identical to the one-process simulation of the same topology, without
    E-1 replicas beside engine 0.
    """

    precisions = ("paper-bf16",)

    def __init__(
        self,
        backend,
        editor,
        spec: Rollout,
        run_seed: int,
        engines: int,
        sync_every: int,
        workers: int,
        workdir: Path,
        anchor=None,
    ):
        size = -(-spec.population // engines)  # the artifact's shard_seeds, as EnginesPopulation deals them
        self.shards = [list(range(s, min(s + size, spec.population))) for s in range(0, spec.population, size)]
        if workers != len(self.shards):
            raise ValueError(
                f"engines: {engines} deal {spec.population} members to {len(self.shards)} engines, one per process "
                f"(engine 0 is the cell's): run it with --es-workers {len(self.shards)} (not {workers})"
            )
        self.editor, self.sync_every = editor, sync_every
        super().__init__(backend, editor, spec, run_seed, actors(workers, engines), workdir, anchor)

    def roll_out(self, step: int, prompts: Sequence[str]) -> list[list[tuple[str, int]]]:
        """Engine 0's shard here while the actors roll out theirs; every member's generations, in member order."""
        import ray

        refs = [
            a.roll_out.remote(step, shard, list(prompts)) for a, shard in zip(self.actors, self.shards[1:], strict=True)
        ]
        mine = roll_out_members(self.backend, self.editor, self.spec, self.run_seed, step, self.shards[0], prompts)
        return mine + [member for part in ray.get(refs) for member in part]

    def update(self, seeds: list[int], coeffs: list[float], decay: float, step: int) -> None:
        """Each engine adds the update to its own weights (they differ by their residuals); re-sync when due."""
        import ray

        ray.get([a.update.remote(seeds, coeffs, decay) for a in self.actors])
        if self.sync_every and (step + 1) % self.sync_every == 0:
            self._send_engine_zero(step)

    def _send_engine_zero(self, step: int) -> None:
        import ray

        state = ray.put(self.editor.master_state())  # CPU copies
        self._compare(ray.get([a.load_engine.remote(state) for a in self.actors]), self.backend.checksum(), step)

    def state(self) -> dict[str, Any]:
        """Engines 1..E-1's weights, keyed as `EnginesPopulation.state` keys them (a checkpoint resumes either)."""
        import ray

        parts = ray.get([a.engine_state.remote() for a in self.actors])
        return {f"engine{k}/{n}": t for k, part in enumerate(parts, 1) for n, t in part.items()}

    def load_state(self, state: dict[str, Any]) -> None:
        import ray

        ray.get(
            [
                a.load_engine.remote(
                    {n[len(f"engine{k}/") :]: t for n, t in state.items() if n.startswith(f"engine{k}/")}
                )
                for k, a in enumerate(self.actors, 1)
            ]
        )


def _driver_placement() -> dict[str, Any]:
    """The driver's side of the placement log line: pid, the GPUs Ray assigned it (a cell task), its visible GPUs."""
    import ray

    return {
        "pid": os.getpid(),
        "gpus": [str(i) for i in ray.get_gpu_ids()],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
