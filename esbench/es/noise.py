"""ES noise schemes: how member `seed`'s standard-normal noise ε(seed, tensor) is made, selected per ES config.

- `torch` (the default, and the only scheme of the authors' artifact yunpengba7/understanding-es and of Qiu et al.,
  arXiv 2509.24372): `torch.randn` on the tensor's device with a `torch.Generator` seeded by seed XOR
  blake2b-8(tensor name). Existing records use it, so it stays bit-identical to esbench's original `noise()`.
  Its two costs: seeded CUDA `randn` depends on the GPU (an H100 PCIe and an H100 SXM, with different SM counts, give
  different noise for one seed), so "same seed, same noise" holds only on identical hardware; and generating the
  noise is the bottleneck of an ES step on CPU (perturb + restore ran at 4 GB/s against 75 GB/s for a copy).
- `table`: the shared noise table of Salimans et al. 2017 ("Evolution Strategies as a Scalable Alternative to
  Reinforcement Learning", arXiv 1703.03864, section 2.1), made block-wise so that no tensor's noise is periodic.
  A table of `TABLE_SIZE` standard-normal fp32 values is generated once per process, on CPU, by a counter-based
  generator, and copied to each device that needs it; a member's noise is read from it, so it is the same on every
  device, and perturbing costs about what a copy costs.

The `table` scheme, exactly (changing any of this is a new scheme with a new name):

1. Table: `numpy.random.Generator(numpy.random.Philox(key=TABLE_KEY)).standard_normal(TABLE_SIZE, dtype=float32)`,
   with `TABLE_KEY` = 260827351 (the paper's arXiv id, 2608.27351) and counter 0, `TABLE_SIZE` = 2^26 values
   (256 MiB). It is made on CPU, so its bits do not depend on the accelerator; its SHA-256 is checked against
   `TABLE_SHA256`, so a numpy release that changed its normal sampler would fail loudly instead of drifting.
2. Blocks: a tensor's flattened (row-major) index space is cut into blocks of `BLOCK` = 2^20 elements; block b holds
   elements [b·BLOCK, min((b+1)·BLOCK, numel)).
3. Offsets: block b of tensor `name` for member `seed` is `table[o : o + len(block)]`, with
   h = little-endian uint64 of blake2b(b"esbench-noise-table/1" ‖ u64le(seed mod 2^64) ‖ u64le(name_key(name)) ‖
   u64le(b), digest_size=8) and o = ⌊h · (TABLE_SIZE − BLOCK + 1) / 2^64⌋, uniform on [0, TABLE_SIZE − BLOCK] (a
   counter-based draw: a keyed hash of the block counter; the multiply-shift's bias is below 4e-12). `name_key` is
   the torch scheme's 63-bit blake2b-8 of the name. Seed and name are hashed as separate fields, so two (seed, name)
   pairs never share offsets because seed XOR key happens to coincide.

So an element's noise depends only on (seed, name, element index): not on how the work is chunked, on the thread
count or on the device. Different blocks draw independent offsets, so a tensor larger than the table is not
periodic, and two members or two tensors line up on the same table entries only when two offsets coincide
(probability 1/(TABLE_SIZE − BLOCK + 1) per pair of blocks).

Arithmetic. The fast paths never build a whole noise tensor on CPU: they walk the blocks in cache-sized chunks.
Every element is computed as two correctly rounded IEEE fp32 operations, `s = fl(scale·ε)` then `fl(base + s)` (a
fused `add(..., alpha=)` would be one FMA on some devices and two roundings on others), so perturbed weights and
fp32 updates are bit-identical on every device too; a bf16 cast after that is round-to-nearest-even everywhere.
On a GPU a tensor's noise is gathered from the table with one `cat` and then used whole (launches, not bytes, bound
a GPU there); the elementwise arithmetic, and so the result, is the same.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Protocol

import torch

SCHEMES = ("torch", "table")
_MASK63 = (1 << 63) - 1
_MASK64 = (1 << 64) - 1

TABLE_SIZE = 1 << 26  # values in the table: 256 MiB of fp32
BLOCK = 1 << 20  # elements per block of a tensor's flattened index space
TABLE_KEY = 260827351  # numpy Philox key of the table (arXiv 2608.27351)
TABLE_SHA256 = "7bc605bd67f8d2a6b10c09f593db40282fbb33066f3a993568aabc512bedf5ef"  # of the default table's bytes
_OFFSET_TAG = b"esbench-noise-table/1"
CPU_CHUNK = 1 << 18  # elements per step of the CPU fast paths (1 MiB of fp32: stays in L2)


def name_key(name: str) -> int:
    """A stable 63-bit key for a tensor name (blake2b, as the paper's artifact does)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") & _MASK63


class NoiseScheme(Protocol):
    """What `WeightEditor` asks of a scheme. ε is standard normal fp32, a function of (seed, name, element index).

    `out`, `p` and `acc` are modified in place; `base` and `acc` are fp32.
    """

    name: str

    def noise(self, seed: int, name: str, shape: torch.Size, device: torch.device | str = "cpu") -> torch.Tensor:
        """ε for one tensor of one member, materialised as an fp32 tensor."""
        ...

    def add_scaled(self, out: torch.Tensor, base: torch.Tensor, seed: int, name: str, scale: float) -> None:
        """out ← base + scale·ε: fl(base + fl(scale·ε)) in fp32, then cast to out's dtype."""
        ...

    def add_scaled_cast(self, p: torch.Tensor, seed: int, name: str, scale: float) -> None:
        """p ← p + (scale·ε cast to p's dtype): the public code's perturb (and, with −scale, its restore)."""
        ...

    def accumulate(self, acc: torch.Tensor, seed: int, name: str, coeff: float) -> None:
        """acc ← acc + coeff·ε (the fp32 sum of an update)."""
        ...


class TorchNoise:
    """Seeded `torch.randn` per tensor, on the tensor's device: the artifact's noise (device dependent on CUDA)."""

    name = "torch"

    def noise(self, seed: int, name: str, shape: torch.Size, device: torch.device | str = "cpu") -> torch.Tensor:
        gen = torch.Generator(device=device).manual_seed((seed ^ name_key(name)) & _MASK63)
        return torch.randn(shape, generator=gen, dtype=torch.float32, device=device)

    def add_scaled(self, out: torch.Tensor, base: torch.Tensor, seed: int, name: str, scale: float) -> None:
        out.copy_(base + scale * self.noise(seed, name, out.shape, out.device))

    def add_scaled_cast(self, p: torch.Tensor, seed: int, name: str, scale: float) -> None:
        p.add_((scale * self.noise(seed, name, p.shape, p.device)).to(p.dtype))

    def accumulate(self, acc: torch.Tensor, seed: int, name: str, coeff: float) -> None:
        acc.add_(self.noise(seed, name, acc.shape, acc.device), alpha=coeff)


_TABLES: dict[tuple[int, int, str], torch.Tensor] = {}
_TABLES_LOCK = threading.Lock()


def _cpu_table(size: int, key: int) -> torch.Tensor:
    import numpy as np

    values = np.random.Generator(np.random.Philox(key=key)).standard_normal(size, dtype=np.float32)
    if size == TABLE_SIZE and key == TABLE_KEY:
        digest = hashlib.sha256(values.data).hexdigest()
        if digest != TABLE_SHA256:
            raise RuntimeError(
                f"the ES noise table differs from the scheme's definition (sha256 {digest}, expected {TABLE_SHA256}): "
                f"numpy {np.__version__}'s Philox standard_normal has changed; noise: table would not match other "
                "machines"
            )
    return torch.from_numpy(values)


def noise_table(size: int = TABLE_SIZE, device: torch.device | str = "cpu", key: int = TABLE_KEY) -> torch.Tensor:
    """The shared table on `device`: made once per process on CPU, copied once per device, then cached."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    with _TABLES_LOCK:
        cache = (size, key, str(device))
        if cache not in _TABLES:
            cpu = _TABLES.get((size, key, "cpu"))
            if cpu is None:
                cpu = _cpu_table(size, key)
                if device.type == "cpu":
                    _TABLES[(size, key, "cpu")] = cpu
            if device.type != "cpu":
                _TABLES[cache] = cpu.to(device)
        return _TABLES[cache]


class TableNoise:
    """Block-wise slices of a shared noise table (Salimans et al. 2017); see the module docstring for the definition.

    `size` and `block` are the scheme's constants; other values exist for tests (a small table shows that tensors
    larger than the table are not periodic). `chunk` only sets how the CPU fast paths walk a block: it does not
    change any result.
    """

    name = "table"

    def __init__(self, size: int = TABLE_SIZE, block: int = BLOCK, chunk: int = CPU_CHUNK, key: int = TABLE_KEY):
        if not 0 < block <= size:
            raise ValueError(f"block {block} must be in 1..table size {size}")
        self.size, self.block, self.chunk, self.key = size, block, chunk, key
        self._local = threading.local()

    def table(self, device: torch.device | str = "cpu") -> torch.Tensor:
        return noise_table(self.size, device, self.key)

    def offsets(self, seed: int, name: str, numel: int) -> list[int]:
        """The table offset of each block of a `numel`-element tensor `name`, for member `seed`."""
        span = self.size - self.block + 1
        prefix = _OFFSET_TAG + (seed & _MASK64).to_bytes(8, "little") + name_key(name).to_bytes(8, "little")
        out = []
        for b in range(-(-numel // self.block)):
            h = hashlib.blake2b(prefix + b.to_bytes(8, "little"), digest_size=8).digest()
            out.append((int.from_bytes(h, "little") * span) >> 64)
        return out

    def _pieces(self, seed: int, name: str, numel: int, chunk: int):
        """(start, end, table start) for consecutive pieces of at most `chunk` elements, never crossing a block."""
        for b, off in enumerate(self.offsets(seed, name, numel)):
            lo, hi = b * self.block, min((b + 1) * self.block, numel)
            for start in range(lo, hi, chunk):
                end = min(start + chunk, hi)
                yield start, end, off + start - lo

    def noise(self, seed: int, name: str, shape: torch.Size, device: torch.device | str = "cpu") -> torch.Tensor:
        shape = torch.Size(shape)
        table = self.table(device)
        numel = shape.numel()
        if numel == 0:
            return torch.empty(shape, dtype=torch.float32, device=table.device)
        parts = [table[t : t + end - start] for start, end, t in self._pieces(seed, name, numel, self.block)]
        return (parts[0].clone() if len(parts) == 1 else torch.cat(parts)).view(shape)

    def _scratch(self, n: int, device: torch.device) -> torch.Tensor:
        bufs = self._local.__dict__.setdefault("bufs", {})
        buf = bufs.get(device)
        if buf is None or buf.numel() < n:
            buf = bufs[device] = torch.empty(n, dtype=torch.float32, device=device)
        return buf[:n]

    @staticmethod
    def _fast(*tensors: torch.Tensor) -> bool:
        """Chunked CPU paths need flat views; a GPU (or an odd layout) takes the materialised path."""
        return all(t.device.type == "cpu" and t.is_contiguous() for t in tensors)

    def add_scaled(self, out: torch.Tensor, base: torch.Tensor, seed: int, name: str, scale: float) -> None:
        if not self._fast(out, base) or base.dtype != torch.float32:
            eps = self.noise(seed, name, out.shape, out.device)
            torch.add(base, eps.mul_(scale), out=out)
            return
        table, o, b = self.table("cpu"), out.view(-1), base.view(-1)
        direct = out.dtype == torch.float32 and out.data_ptr() != base.data_ptr()
        for start, end, t in self._pieces(seed, name, o.numel(), self.chunk):
            if direct:  # s = fl(scale·ε) written into out, then out = fl(s + base): the same two roundings
                torch.mul(table[t : t + end - start], scale, out=o[start:end])
                o[start:end].add_(b[start:end])
            else:
                s = self._scratch(end - start, o.device)
                torch.mul(table[t : t + end - start], scale, out=s)
                torch.add(b[start:end], s, out=o[start:end])

    def add_scaled_cast(self, p: torch.Tensor, seed: int, name: str, scale: float) -> None:
        if not self._fast(p):
            p.add_(self.noise(seed, name, p.shape, p.device).mul_(scale).to(p.dtype))
            return
        table, flat = self.table("cpu"), p.view(-1)
        for start, end, t in self._pieces(seed, name, flat.numel(), self.chunk):
            s = self._scratch(end - start, flat.device)
            torch.mul(table[t : t + end - start], scale, out=s)
            flat[start:end].add_(s.to(p.dtype))

    def accumulate(self, acc: torch.Tensor, seed: int, name: str, coeff: float) -> None:
        if not self._fast(acc) or acc.dtype != torch.float32:
            acc.add_(self.noise(seed, name, acc.shape, acc.device).mul_(coeff))
            return
        table, flat = self.table("cpu"), acc.view(-1)
        for start, end, t in self._pieces(seed, name, flat.numel(), self.chunk):
            s = self._scratch(end - start, flat.device)
            torch.mul(table[t : t + end - start], coeff, out=s)
            flat[start:end].add_(s)


_SCHEMES: dict[str, NoiseScheme] = {"torch": TorchNoise(), "table": TableNoise()}


def get_scheme(noise: str) -> NoiseScheme:
    """The scheme named `noise` (`torch` or `table`)."""
    try:
        return _SCHEMES[noise]
    except KeyError:
        raise ValueError(f"unknown noise scheme {noise!r}; choose one of {', '.join(SCHEMES)}") from None
