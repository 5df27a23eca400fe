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

The Ray populations live a floor up, beside the ES recipe, so that the in-process ones and the plan all of them share
stay free of Ray and of the backends an actor builds: `esbench.methods.es_ray` is the driver's side (`RayPopulation`,
`RayEnginesPopulation`, the GPU accounting above), `esbench.methods.es_actor` the actor's (`ESActor`, one replica).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from esbench.es.weights import member_seed


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
