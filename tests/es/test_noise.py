"""ES noise schemes (esbench.es.noise): `torch` stays the original seeded randn bit for bit; `table` gives the same
noise for any chunking, thread count and device, is standard normal, independent across members and tensors, and
not periodic within a tensor larger than its table. Statistical bounds are 5 standard errors of the sample size."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys

import pytest
import torch

from esbench.es import noise as N
from esbench.es.weights import TensorEditor, member_seed, noise

Z = 5.0  # standard errors allowed in the statistical checks (two-sided p ≈ 6e-7 per check)


def _randn_reference(seed: int, name: str, shape, device="cpu") -> torch.Tensor:
    """The original `noise()`: randn with a generator seeded by seed XOR blake2b-8(name), 63 bits."""
    key = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") & ((1 << 63) - 1)
    gen = torch.Generator(device=device).manual_seed((seed ^ key) & ((1 << 63) - 1))
    return torch.randn(shape, generator=gen, dtype=torch.float32, device=device)


def _offsets_reference(seed: int, name: str, numel: int, size: int, block: int) -> list[int]:
    """The table scheme's offsets, written from its definition in the module docstring."""
    key = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") & ((1 << 63) - 1)
    out = []
    for b in range(math.ceil(numel / block)):
        blob = (
            b"esbench-noise-table/1" + seed.to_bytes(8, "little") + key.to_bytes(8, "little") + b.to_bytes(8, "little")
        )
        h = int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "little")
        out.append(h * (size - block + 1) // 2**64)
    return out


def params(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "layer.weight": (torch.randn(64, 48, generator=g) * 0.05).to(dtype),
        "norm.weight": (1 + 0.01 * torch.randn(48, generator=g)).to(dtype),
        "big.weight": (torch.randn(3, 1000, 400, generator=g) * 0.02).to(dtype),  # 1.2M: two blocks
    }


SMALL = dict(size=1 << 14, block=1 << 8)  # a small table, so tests of block structure and periodicity are fast


# ---- torch: unchanged ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1000,), (17, 33), (2, 3, 5)])
def test_torch_scheme_is_the_original_seeded_randn_bit_for_bit(shape):
    scheme = N.get_scheme("torch")
    for seed in (0, 7, member_seed(3, 1, 2), (1 << 63) - 1):
        for name in ("a", "model.layers.0.mlp.up_proj.weight"):
            ref = _randn_reference(seed, name, shape)
            assert torch.equal(scheme.noise(seed, name, torch.Size(shape)), ref)
            assert torch.equal(noise(seed, name, torch.Size(shape)), ref)


@pytest.mark.parametrize("precision", ["fp32-master", "paper-bf16", "paper-bf16-per-member"])
def test_torch_scheme_editor_does_the_original_arithmetic(precision):
    """The editor's perturb, restore and update with `torch` equal the pre-scheme code's expressions bit for bit."""
    dtype = torch.float32 if precision == "fp32-master" else torch.bfloat16
    p, ref = params(dtype), params(dtype)
    master = {k: v.float().clone() for k, v in ref.items()}
    ed = TensorEditor(p, precision)  # noise="torch" is the default
    assert ed.noise == "torch"
    seed, sigma, sign = member_seed(0, 0, 1), 3e-3, -1.0
    ed.perturb(seed, sigma, sign)
    for k, v in ref.items():
        eps = _randn_reference(seed, k, v.shape)
        if precision == "fp32-master":
            v.copy_(master[k] + (sign * sigma) * eps)
        else:
            v.add_(((sign * sigma) * eps).to(v.dtype))
        assert torch.equal(p[k], v), k
    ed.restore()
    for k, v in ref.items():
        if precision == "fp32-master":
            v.copy_(master[k])
        else:
            v.sub_(((sign * sigma) * _randn_reference(seed, k, v.shape)).to(v.dtype))
        assert torch.equal(p[k], v), k
    seeds, coeffs = [11, 22, 33], [1e-3, -2e-3, 5e-4]
    ed.update(seeds, coeffs)
    for k, v in ref.items():
        if precision == "paper-bf16-per-member":
            for s, c in zip(seeds, coeffs, strict=True):
                v.add_((c * _randn_reference(s, k, v.shape)).to(v.dtype))
        else:
            delta = torch.zeros(v.shape)
            for s, c in zip(seeds, coeffs, strict=True):
                delta.add_(_randn_reference(s, k, v.shape), alpha=c)
            if precision == "fp32-master":
                master[k].add_(delta)
                v.copy_(master[k])
            else:
                v.add_(delta.to(v.dtype))
        assert torch.equal(p[k], v), k


# ---- table: definition and chunking ----------------------------------------------------------------------------


def test_table_scheme_constants_and_offsets_follow_the_documented_definition():
    scheme = N.get_scheme("table")
    assert (scheme.size, scheme.block) == (N.TABLE_SIZE, N.BLOCK) == (1 << 26, 1 << 20)
    assert N.TABLE_KEY == 260827351
    for seed, name, numel in [(0, "a", 1), (member_seed(0, 5, 3), "model.embed_tokens.weight", 24_576_000)]:
        got = scheme.offsets(seed, name, numel)
        assert got == _offsets_reference(seed, name, numel, N.TABLE_SIZE, N.BLOCK)
        assert len(got) == math.ceil(numel / N.BLOCK) and all(0 <= o <= N.TABLE_SIZE - N.BLOCK for o in got)


def test_default_table_is_philox_standard_normal_with_its_pinned_digest():
    import numpy as np

    table = N.noise_table()
    assert table.dtype == torch.float32 and table.numel() == N.TABLE_SIZE and table.device.type == "cpu"
    head = np.random.Generator(np.random.Philox(key=N.TABLE_KEY)).standard_normal(1000, dtype=np.float32)
    assert torch.equal(table[:1000], torch.from_numpy(head))
    assert hashlib.sha256(table.numpy().data).hexdigest() == N.TABLE_SHA256
    assert N.noise_table() is table, "made once per process"


def _by_definition(scheme: N.TableNoise, seed: int, name: str, shape) -> torch.Tensor:
    """ε assembled block by block straight from the table and the reference offsets."""
    numel = math.prod(shape)
    table = scheme.table()
    offs = _offsets_reference(seed, name, numel, scheme.size, scheme.block)
    parts = [table[o : o + min(scheme.block, numel - b * scheme.block)] for b, o in enumerate(offs)]
    return torch.cat(parts).view(shape)


@pytest.mark.parametrize("table", [SMALL, {}], ids=["small-table", "default-table"])
def test_table_noise_is_the_same_for_any_chunking(table):
    block = table.get("block", N.BLOCK)
    shape = (3, 2 * block + 123) if table else (2, block + 4321)  # partial last block
    seed, name = member_seed(1, 2, 3), "w"
    ref = _by_definition(N.TableNoise(**table), seed, name, shape)
    for chunk in (7, 1000, block, 1 << 20) if table else (1000, 1 << 16, block):
        scheme = N.TableNoise(**table, chunk=chunk)
        assert torch.equal(scheme.noise(seed, name, torch.Size(shape)), ref)
        acc = torch.zeros(shape)
        scheme.accumulate(acc, seed, name, 1.0)  # 0 + fl(1·ε) = ε
        assert torch.equal(acc, ref), chunk
        out = torch.empty(shape)
        scheme.add_scaled(out, torch.zeros(shape), seed, name, 1.0)
        assert torch.equal(out, ref), chunk
        # a non-contiguous tensor takes the materialised path: the same values
        out_t = torch.empty(shape[::-1]).t()
        scheme.add_scaled(out_t, torch.zeros(shape), seed, name, 1.0)
        assert torch.equal(out_t, ref)
    # elements depend only on their flat index: a tensor of another shape with the same name shares its prefix
    assert torch.equal(N.TableNoise(**table).noise(seed, name, torch.Size([ref.numel()])), ref.flatten())


def test_table_arithmetic_is_two_correctly_rounded_fp32_operations():
    """out = fl(base + fl(s·ε)) and acc = fl(acc + fl(c·ε)): no fused multiply-add, so every device agrees."""
    scheme = N.TableNoise(**SMALL, chunk=1000)
    g = torch.Generator().manual_seed(0)
    scale = 1.2345e-3
    base = torch.randn(5000, generator=g) * scale  # of the size of s·ε, where a fused multiply-add would differ
    eps = scheme.noise(9, "t", torch.Size([5000]))
    out = torch.empty(5000)
    scheme.add_scaled(out, base, 9, "t", scale)
    assert torch.equal(out, base + scale * eps)
    out16 = torch.empty(5000, dtype=torch.bfloat16)
    scheme.add_scaled(out16, base, 9, "t", scale)
    assert torch.equal(out16, (base + scale * eps).to(torch.bfloat16))
    acc = base.clone()
    scheme.accumulate(acc, 9, "t", -scale)
    assert torch.equal(acc, base + (-scale) * eps)
    p = base.to(torch.bfloat16)
    scheme.add_scaled_cast(p, 9, "t", scale)
    assert torch.equal(p, base.to(torch.bfloat16) + (scale * eps).to(torch.bfloat16))


_THREADS_SCRIPT = r"""
import hashlib, json, sys, torch
from esbench.es.noise import TableNoise
torch.set_num_threads(int(sys.argv[1]))
scheme = TableNoise()
h = {}
shape = torch.Size([3, 1 << 20])  # three blocks, each big enough for intra-op parallelism
eps = scheme.noise(42, "layer.weight", shape)
h["noise"] = hashlib.sha256(eps.numpy().tobytes()).hexdigest()
base = torch.linspace(-1, 1, shape.numel()).view(shape)
out = torch.empty(shape)
scheme.add_scaled(out, base, 42, "layer.weight", 1e-3)
h["perturbed"] = hashlib.sha256(out.numpy().tobytes()).hexdigest()
scheme.accumulate(base, 43, "layer.weight", -2e-4)
h["accumulated"] = hashlib.sha256(base.numpy().tobytes()).hexdigest()
print(json.dumps({"threads": torch.get_num_threads(), **h}))
"""


def test_table_noise_and_arithmetic_do_not_depend_on_the_thread_count():
    runs = []
    for threads in (1, 2):
        out = subprocess.run(
            [sys.executable, "-c", _THREADS_SCRIPT, str(threads)], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert [r.pop("threads") for r in runs] == [1, 2]
    assert runs[0] == runs[1]


def test_cpu_and_cuda_give_the_same_table_noise_and_the_same_perturbed_weights():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: compares the table scheme's noise and arithmetic on CPU and CUDA")
    scheme = N.get_scheme("table")
    shape = torch.Size([3, 700_001])
    cpu = scheme.noise(5, "x", shape)
    gpu = scheme.noise(5, "x", shape, "cuda")
    assert torch.equal(cpu, gpu.cpu())
    # the editor on both devices: perturbed weights and updates agree bit for bit (no FMA in the scheme's arithmetic)
    p_cpu = params()
    p_gpu = {k: v.cuda() for k, v in params().items()}
    eds = [TensorEditor(p_cpu, noise="table"), TensorEditor(p_gpu, noise="table")]
    for ed in eds:
        ed.perturb(member_seed(0, 0, 0), 1e-3, -1.0)
    assert all(torch.equal(p_cpu[k], p_gpu[k].cpu()) for k in p_cpu)
    for ed in eds:
        ed.restore()
        ed.update([1, 2, 3], [1e-3, -5e-4, 2e-4])
    assert all(torch.equal(p_cpu[k], p_gpu[k].cpu()) for k in p_cpu)
    # the torch scheme's CUDA noise is another stream altogether (and differs between GPU models)
    assert not torch.equal(noise(5, "x", shape), noise(5, "x", shape, "cuda").cpu())


# ---- table: statistics -----------------------------------------------------------------------------------------


def _ks_statistic(x: torch.Tensor) -> float:
    """Kolmogorov–Smirnov distance between the sample and N(0, 1)."""
    x = x.double().sort().values
    n = x.numel()
    cdf = torch.special.ndtr(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return float(torch.maximum(i / n - cdf, cdf - (i - 1) / n).max())


def test_table_noise_is_standard_normal():
    scheme = N.get_scheme("table")
    x = scheme.noise(member_seed(0, 0, 0), "model.embed_tokens.weight", torch.Size([2 * N.BLOCK + 12345]))
    n = x.numel()
    assert abs(float(x.double().mean())) < Z / math.sqrt(n)
    assert abs(float(x.double().var()) - 1) < Z * math.sqrt(2 / n)  # SE of a normal sample's variance
    kurt = float((x.double() ** 4).mean())
    assert abs(kurt - 3) < Z * math.sqrt(96 / n)  # 4th moment of N(0,1) is 3, its SE √(96/n)
    # KS at level α = 1e-6: D < √(−ln(α/2)/2) / √n
    assert _ks_statistic(x) < math.sqrt(-math.log(1e-6 / 2) / 2) / math.sqrt(n)
    # the whole table, too
    t = N.noise_table().double()
    m = t.numel()
    assert abs(float(t.mean())) < Z / math.sqrt(m) and abs(float(t.var()) - 1) < Z * math.sqrt(2 / m)


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([a.flatten().double(), b.flatten().double()]))[0, 1])


def test_table_noise_is_uncorrelated_across_members_and_tensors():
    scheme = N.get_scheme("table")
    n = N.BLOCK + 5000
    members = [scheme.noise(member_seed(4, 0, i), "a", torch.Size([n])) for i in range(6)]
    tensors = [scheme.noise(member_seed(4, 0, 0), name, torch.Size([n])) for name in ("b", "c", "d")]
    draws = members + tensors
    bound = Z / math.sqrt(n)  # SE of a correlation of independent samples: 1/√n
    for i in range(len(draws)):
        for j in range(i):
            assert abs(_corr(draws[i], draws[j])) < bound, (i, j)
    assert torch.equal(members[0], scheme.noise(member_seed(4, 0, 0), "a", torch.Size([n]))), "regenerated"


def test_table_noise_is_not_periodic_in_a_tensor_larger_than_the_table():
    scheme = N.TableNoise(**SMALL)
    size, block = SMALL["size"], SMALL["block"]
    n = 3 * size
    x = scheme.noise(member_seed(5, 0, 0), "huge", torch.Size([n]))
    assert torch.equal(x, _by_definition(scheme, member_seed(5, 0, 0), "huge", (n,)))
    # a table read end to end and wrapped would repeat with period T; block-wise offsets do not repeat at any lag
    m = n - size
    assert abs(_corr(x[:m], x[size:])) < Z / math.sqrt(m), "lag T"
    for lag in range(block, n - size + 1, block):  # every lag where whole blocks could line up
        m = n - lag  # (slack: up to two pairs of blocks may draw the same offset by chance)
        assert abs(_corr(x[:m], x[lag:])) < Z / math.sqrt(m) + 2 * block / m, lag
    offs = scheme.offsets(member_seed(5, 0, 0), "huge", n)
    assert len(set(offs)) > 0.9 * len(offs)


# ---- table: the editor -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp32_master_restores_are_bit_exact_with_the_table_scheme(dtype):
    p = params(dtype)
    original = {k: v.clone() for k, v in p.items()}
    ed = TensorEditor(p, "fp32-master", noise="table")
    for i in range(20):
        seed, sign = member_seed(0, 0, i), (1.0 if i % 2 else -1.0)
        ed.perturb(seed, sigma=3e-3, sign=sign)
        for k in p:  # p = fl(master + fl(±σ·ε)), cast
            eps = ed.scheme.noise(seed, k, p[k].shape)
            assert torch.equal(p[k], (original[k].float() + (sign * 3e-3) * eps).to(dtype)), k
        ed.restore()
    assert all(torch.equal(p[k], original[k]) for k in p)


def test_table_update_is_the_fp32_sum_of_c_times_eps():
    p = params()
    start = {k: v.clone() for k, v in p.items()}
    ed = TensorEditor(p, "fp32-master", noise="table")
    seeds, coeffs = [11, 22, 33], [0.1, -0.2, 0.05]
    ed.update(seeds, coeffs)
    for k in p:
        delta = torch.zeros(p[k].shape)
        for s, c in zip(seeds, coeffs, strict=True):
            delta = delta + c * ed.scheme.noise(s, k, p[k].shape)
        assert torch.equal(p[k], start[k] + delta), k


def test_paper_bf16_with_the_table_scheme_leaves_its_residual():
    p = params(torch.bfloat16)
    original = {k: v.clone() for k, v in p.items()}
    ed = TensorEditor(p, "paper-bf16", noise="table")
    for i in range(10):
        ed.perturb(member_seed(0, 0, i), sigma=1e-3)
        ed.restore()
    assert not all(torch.equal(p[k], original[k]) for k in p)
    assert ed.rms_diff(original) > 0


def test_unknown_schemes_are_refused():
    from pydantic import ValidationError

    from esbench.methods.es import ESConfig

    with pytest.raises(ValueError, match="unknown noise scheme 'bogus'"):
        TensorEditor(params(), noise="bogus")
    with pytest.raises(ValidationError):
        ESConfig(noise="bogus")
    assert ESConfig().noise == "torch" and ESConfig(noise="table").noise == "table"


# ---- the recipe ------------------------------------------------------------------------------------------------


def test_an_es_run_with_the_table_scheme_trains_and_records_it(tmp_path, tiny_model_dir):
    from run_helpers import only_record, small_suite

    from esbench.cli import main

    suite = tmp_path / "es.yaml"
    suite.write_text(small_suite("es-table", budget=3, es_extra=", noise: table"))
    assert main(["run", str(suite), "--out", str(tmp_path / "o"), "--only", "*/es/*"]) == 0
    record, cell_dir = only_record(tmp_path / "o")
    assert record["cell"]["spec"]["method"]["config"]["noise"] == "table"
    assert record["budget_used"]["updates"] == 3
    assert record["provenance"]["final_weights_sha256"] != record["provenance"]["model"]["state_sha256"]
    rows = [json.loads(x) for x in (cell_dir / "train.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1, 2]
    assert any(r["update_norm"] > 0 for r in rows), rows
