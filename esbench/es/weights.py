"""In-place ES weight edits: seed-regenerated noise, exact restore, fp32 update accumulation.

Follows the ES-for-LLMs scheme of Qiu et al. (arXiv 2509.24372, "Evolution Strategies at Scale") and the paper
this project grew from (arXiv 2608.27351, artifact yunpengba7/understanding-es): a population member is a seed,
its noise is regenerated per tensor from (seed XOR blake2b(tensor name)) in fp32, and the update is
θ += α/N · Σ zᵢ εᵢ with 1/σ folded into α.

It departs from their code in one deliberate way (ADR 0005): public code restores a perturbation by subtracting
the same noise in bf16, which leaves a residual and rounds small updates away. Here, `fp32-master` keeps an fp32
master copy: a perturbation writes master + σε into the compute weights, a restore copies the master back (bit
exact), and the update is accumulated in fp32 on the master before the compute weights are refreshed.
Two bf16 modes reproduce the public behaviour on demand so its artefacts can be measured:
- `paper-bf16`: the authors' artifact (its `worker.py`): perturb and restore add ±(σε) cast to bf16, and the update
  Σ cᵢεᵢ is accumulated in fp32 per tensor, then cast to bf16 once and added;
- `paper-bf16-per-member`: es-at-scale's accelerated variant, which adds each member's cᵢεᵢ in bf16 one at a time.

The noise comes from a named scheme (`esbench.es.noise`, chosen by the ES config's `noise`): `torch` (the default,
the artifact's seeded `torch.randn`, kept bit-identical) or `table` (block-wise slices of a shared noise table made
on CPU: the same noise on every device, and perturbing at about copy speed).

`WeightEditor` is the interface every backend's `weight_editor()` returns and ES, the analyses and plug-ins use.
`TensorEditor` implements it over any mapping of named tensors, so an HF model, a vLLM worker's model (where the
vLLM backend's `EngineEditor` forwards each call), or a toy parameter dict in a test all go through the same code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Literal, Protocol

import torch

from esbench.es import BF16_MODES
from esbench.es.noise import TorchNoise, get_scheme
from esbench.es.noise import name_key as name_key  # re-exported: the artifact's tensor-name key

Precision = Literal["fp32-master", "paper-bf16", "paper-bf16-per-member"]
_MASK63 = (1 << 63) - 1


_TORCH = TorchNoise()


def noise(seed: int, name: str, shape: torch.Size, device: torch.device | str = "cpu") -> torch.Tensor:
    """Standard-normal fp32 noise for one tensor of one member (the `torch` scheme); independent across tensors and
    seeds: `torch.randn` with a generator seeded by seed XOR blake2b(name)."""
    return _TORCH.noise(seed, name, shape, device)


def member_seed(run_seed: int, step: int, index: int) -> int:
    """The seed of population member `index` at update `step` of a run: stable, platform independent."""
    blob = f"esbench-es:{run_seed}:{step}:{index}".encode()
    return int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "little") & _MASK63


class WeightsDiverged(RuntimeError):
    """A replica's weights (a vLLM worker's, an ES actor's) no longer match what they should be."""


def tensor_checksums(params: Mapping[str, torch.Tensor], chunk: int = 1 << 22) -> dict[str, int]:
    """Per tensor: Σ bits(x_i)·(i mod 65521 + 1) over its elements, as an int. A flipped bit or a swap changes it.

    Computed in chunks, so the int64 temporaries stay small beside a large embedding on a GPU.
    """
    out = {}
    for name, t in params.items():
        flat = t.detach().contiguous().view(-1)
        ints = flat.view({8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[flat.element_size()])
        total = 0
        for start in range(0, ints.numel(), chunk):
            part = ints[start : start + chunk]
            w = torch.arange(start, start + part.numel(), device=part.device, dtype=torch.int64) % 65521 + 1
            total += int((part.to(torch.int64) * w).sum())
        out[name] = total
    return out


def weights_digest(sums: Mapping[str, int]) -> str:
    blob = ",".join(f"{k}={v}" for k, v in sorted(sums.items()))
    return hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()


class WeightEditor(Protocol):
    """An ES editor over one backend's weights: perturb by a member's seeded noise, restore exactly, apply an update.

    Implemented in-process by `TensorEditor`, and inside a vLLM worker by `esbench.backends.vllm_engine.EngineEditor`;
    the members are `TensorEditor`'s, documented there. State dicts cross as CPU tensors under HF names."""

    precision: Precision
    noise: str

    def numel(self) -> int: ...
    def perturb(self, seed: int, sigma: float, sign: float = 1.0) -> None: ...
    def restore(self) -> None: ...
    def update(
        self,
        seeds: Iterable[int],
        coeffs: Iterable[float],
        decay: float = 0.0,
        anchor: Mapping[str, torch.Tensor] | None = None,
    ) -> dict[str, float]: ...
    def rms_diff(self, before: Mapping[str, torch.Tensor]) -> float: ...
    def add_engines(self, engines: int) -> None: ...
    def swap_engine(self, k: int) -> None: ...
    def resync_engines(self) -> None: ...
    def engines_state(self) -> dict[str, torch.Tensor]: ...
    def load_engines_state(self, state: Mapping[str, torch.Tensor]) -> None: ...
    def ideal_state(self) -> dict[str, torch.Tensor]: ...
    def load_ideal_state(self, state: Mapping[str, torch.Tensor]) -> None: ...
    def master_state(self, on_device: bool = False) -> dict[str, torch.Tensor]: ...
    def load_master_state(self, state: Mapping[str, torch.Tensor]) -> None: ...
    def close(self) -> None: ...


class TensorEditor(WeightEditor):
    """Perturb / restore / update a set of named tensors in place, in one of three precision modes, with the noise of
    scheme `noise` (`torch` or `table`, see `esbench.es.noise`)."""

    def __init__(self, params: Mapping[str, torch.Tensor], precision: Precision = "fp32-master", noise: str = "torch"):
        self.params = dict(params)
        self.precision = precision
        self.noise = noise
        self.scheme = get_scheme(noise)
        self.master: dict[str, torch.Tensor] | None = None
        self.shadow: dict[str, torch.Tensor] | None = None
        if precision == "fp32-master":
            self.master = {n: p.detach().to(torch.float32).clone() for n, p in self.params.items()}
        elif precision in BF16_MODES:
            # the fp32 trajectory the same coefficients would give without rounding, to measure what rounding adds.
            # paper-bf16's lives on the host (`shadow_device`): it is only read for drift and checkpoints, and on a
            # GPU it would take 4 bytes per parameter beside the engine (28 GB for a 7B model)
            where = shadow_device(precision, next(iter(self.params.values())).device if self.params else None)
            self.shadow = {n: p.detach().to(where, torch.float32, copy=True) for n, p in self.params.items()}
        else:
            raise ValueError(f"unknown precision {precision!r}")
        self._active: tuple[int, float] | None = None
        self.replicas: list[dict[str, torch.Tensor]] = []
        self.closed = False

    @classmethod
    def for_model(
        cls, model: torch.nn.Module, precision: Precision = "fp32-master", noise: str = "torch"
    ) -> TensorEditor:
        """All trainable tensors of a model, de-duplicated (tied embeddings are one tensor, one noise draw)."""
        seen: set[int] = set()
        params = {}
        for name, p in model.named_parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params[name] = p.data
        return cls(params, precision, noise)

    def numel(self) -> int:
        return sum(p.numel() for p in self.params.values())

    @torch.no_grad()
    def perturb(self, seed: int, sigma: float, sign: float = 1.0) -> None:
        """θ ← θ + sign·σ·ε(seed). One perturbation may be active at a time."""
        if self.closed:
            raise RuntimeError("this TensorEditor was closed (its master is gone); make a new one")
        if self._active is not None:
            raise RuntimeError("perturb() called twice without restore()")
        for name, p in self.params.items():
            if self.master is not None:  # p ← master + σε (fp32), cast to p's dtype
                self.scheme.add_scaled(p, self.master[name], seed, name, sign * sigma)
            else:  # public code: add the noise in the compute dtype
                self.scheme.add_scaled_cast(p, seed, name, sign * sigma)
        self._active = (seed, sign * sigma)

    @torch.no_grad()
    def restore(self) -> None:
        """Undo the active perturbation: an exact copy from the master, or (paper-bf16) a bf16 subtraction."""
        if self._active is None:
            raise RuntimeError("restore() without an active perturbation")
        seed, scale = self._active
        for name, p in self.params.items():
            if self.master is not None:
                p.copy_(self.master[name])
            else:  # the artifact's restore: add the noise times −σ, cast (equal to subtracting the cast +σε)
                self.scheme.add_scaled_cast(p, seed, name, -scale)
        self._active = None

    @torch.no_grad()
    def update(
        self,
        seeds: Iterable[int],
        coeffs: Iterable[float],
        decay: float = 0.0,
        anchor: Mapping[str, torch.Tensor] | None = None,
    ) -> dict[str, float]:
        """θ ← θ + Σ cᵢ εᵢ (cᵢ = α/N · zᵢ, the caller's convention), then weight decay.

        `decay` shrinks θ (or θ − θ₀ when `anchor` is given) by a factor (1 − decay). Simulated engines
        (`add_engines`) get the same cast update added to their own values. Returns the realised update's L2 norm on
        the compute weights and the fraction of compute coordinates that changed at all.
        """
        replicas = self.replicas
        if self.closed:
            raise RuntimeError("this TensorEditor was closed (its master is gone); make a new one")
        if self._active is not None:
            raise RuntimeError("update() during an active perturbation")
        seeds, coeffs = list(seeds), list(coeffs)
        sq, changed, total = 0.0, 0, 0
        for name, p in self.params.items():
            before = p.detach().to(torch.float32).clone()
            if self.master is not None:
                delta = torch.zeros_like(self.master[name])
                for s, c in zip(seeds, coeffs, strict=True):
                    self.scheme.accumulate(delta, s, name, c)
                m = self.master[name]
                m.add_(delta)
                if decay:
                    base = anchor[name].to(torch.float32) if anchor is not None else 0.0
                    m.sub_((m - base) * decay)
                p.copy_(m)
            else:
                sh = self._fp32()[name]
                if self.precision == "paper-bf16":  # the artifact: Σ cᵢεᵢ in fp32, one cast, one add per copy
                    delta = torch.zeros(p.shape, dtype=torch.float32, device=p.device)
                    for s, c in zip(seeds, coeffs, strict=True):
                        self.scheme.accumulate(delta, s, name, c)
                    step = delta.to(p.dtype)
                    for copy in (p, *(r[name] for r in replicas)):
                        copy.add_(step.to(copy.device))
                    sh.add_(delta.to(sh.device))  # elementwise fp32 adds: the same bits on either device
                else:  # es-at-scale's accelerated code: each member's scaled noise added in bf16, one at a time
                    for s, c in zip(seeds, coeffs, strict=True):
                        eps = self.scheme.noise(s, name, p.shape, p.device)
                        p.add_((c * eps).to(p.dtype))
                        sh.add_(eps, alpha=c)
                if decay:
                    base = anchor[name].to(p.dtype) if anchor is not None else 0.0
                    for copy in (p, *(r[name] for r in replicas)):
                        here = base.to(copy.device) if isinstance(base, torch.Tensor) else base
                        copy.sub_(((copy - here) * decay).to(p.dtype))
                    sh.sub_((sh - (anchor[name].to(sh.device, torch.float32) if anchor is not None else 0.0)) * decay)
            diff = torch.sub(p.detach(), before, out=before)  # in place: no full-size temporaries, same values
            changed += int(torch.count_nonzero(diff))
            sq += float(diff.pow_(2).sum())
            total += diff.numel()
        return {"update_norm": sq**0.5, "changed_fraction": changed / max(total, 1)}

    # -- the artifact's engines (paper-bf16): replicas of the compute weights beside these, one per extra engine ----
    def add_engines(self, engines: int) -> None:
        """Hold engines 1..E−1 as bf16 copies of the weights (engine 0 is `params`): each keeps its own residuals.

        On a GPU they stay beside the weights when they fit (`replica_device`), else in host memory, and each is
        copied in for its shard (`swap_engine`) and updated where it lives: the update's cast step is the same
        bf16 tensor for every engine, and an elementwise bf16 add rounds alike on either device."""
        if self.precision != "paper-bf16":
            raise ValueError(f"simulated engines reproduce paper-bf16, not {self.precision}")
        size = sum(p.numel() * p.element_size() for p in self.params.values()) * (engines - 1)
        where = replica_device(next(iter(self.params.values())).device if self.params else None, size)
        self.replicas = [
            {n: p.detach().to(where, copy=True) for n, p in self.params.items()} for _ in range(engines - 1)
        ]

    @torch.no_grad()
    def swap_engine(self, k: int) -> None:
        """Exchange the weights with engine k's (k ≥ 1); calling it again swaps back."""
        replica = self.replicas[k - 1]
        for name, p in self.params.items():
            tmp = p.to(replica[name].device, copy=True)
            p.copy_(replica[name])
            replica[name].copy_(tmp)

    @torch.no_grad()
    def resync_engines(self) -> None:
        """Every engine takes engine 0's weights (the artifact's NCCL broadcast from rank 0)."""
        for replica in self.replicas:
            for name, p in self.params.items():
                replica[name].copy_(p)

    def engines_state(self) -> dict[str, torch.Tensor]:
        """Engines 1..E−1's weights, as CPU copies (for a checkpoint): no second device copy on the way."""
        return {f"engine{k + 1}/{n}": _cpu(t) for k, r in enumerate(self.replicas) for n, t in r.items()}

    @torch.no_grad()
    def load_engines_state(self, state: Mapping[str, torch.Tensor]) -> None:
        for k, r in enumerate(self.replicas):
            for n, t in r.items():
                t.copy_(state[f"engine{k + 1}/{n}"])

    @torch.no_grad()
    def rms_diff(self, before: Mapping[str, torch.Tensor]) -> float:
        """RMS over all coordinates of (compute weights − `before`): what bf16 subtract-restores leave behind."""
        sq, n = 0.0, 0
        for name, p in self.params.items():
            d = p.detach().to(torch.float32) - before[name].to(device=p.device, dtype=torch.float32)
            sq += float(d.pow(2).sum())
            n += d.numel()
        return (sq / max(n, 1)) ** 0.5

    def ideal_state(self) -> dict[str, torch.Tensor]:
        """fp32 weights the update rule intended: the master (exact mode) or the shadow (paper-bf16), as CPU copies
        (the record's drift and checkpoints read them there; a device clone of a 7B fp32 master is 28 GB)."""
        return {n: _cpu(t) for n, t in self._fp32().items()}

    def load_ideal_state(self, state: Mapping[str, torch.Tensor]) -> None:
        for name, t in self._fp32().items():
            t.copy_(state[name])

    def _fp32(self) -> dict[str, torch.Tensor]:
        """The fp32 trajectory: the master (exact mode) or the shadow (bf16 modes); gone once closed."""
        held = self.master if self.master is not None else self.shadow
        if held is None:
            raise RuntimeError("this TensorEditor was closed (its master is gone); make a new one")
        return held

    def master_state(self, on_device: bool = False) -> dict[str, torch.Tensor]:
        """What a checkpoint must hold to resume exactly: the fp32 master, else the compute weights. CPU copies,
        unless `on_device` (a per-update snapshot compared on the device, as the restore-residual RMS is)."""
        copy = (lambda t: t.detach().clone()) if on_device else _cpu
        if self.master is not None:
            return {n: copy(t) for n, t in self.master.items()}
        return {n: copy(p) for n, p in self.params.items()}

    def close(self) -> None:
        """Drop the master or shadow and the simulated engines (training is over); the compute weights stay."""
        self.master, self.shadow, self.replicas = None, None, []
        self.closed = True

    @torch.no_grad()
    def load_master_state(self, state: Mapping[str, torch.Tensor]) -> None:
        for name, p in self.params.items():
            if self.master is not None:
                self.master[name].copy_(state[name])
            p.copy_(state[name].to(p.dtype))


def shadow_device(precision: str, weights: torch.device | None) -> torch.device:
    """Where a bf16 mode keeps its fp32 shadow: `paper-bf16` on the host (one transfer of the summed update per
    tensor and update); `paper-bf16-per-member` beside the weights (it adds every member's noise to it)."""
    if precision == "paper-bf16" or weights is None:
        return torch.device("cpu")
    return weights


REPLICA_MARGIN = 2 << 30  # bytes a GPU keeps free beside the replicas (the update's temporaries, the KV cache)


def replica_device(weights: torch.device | None, size: int) -> torch.device:
    """Where simulated engines' replicas go: beside the weights when `size` bytes fit the GPU's free memory with
    `REPLICA_MARGIN` to spare, else the host (pageable: torch's pinned allocator rounds each block up to a power
    of two and keeps it for the process)."""
    if weights is None or weights.type != "cuda":
        return weights or torch.device("cpu")
    free, _ = torch.cuda.mem_get_info(weights)
    return weights if size + REPLICA_MARGIN <= free else torch.device("cpu")


def _cpu(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy of `t`, made without a second copy on its device."""
    return t.detach().to("cpu", copy=True)
