"""One CUDA stack: the gpu image's base, the GPU lock, the README and esbench.gpu name one CUDA major and one minimum
driver. The image once sat on CUDA 12.8 under a CUDA 13 lock; a drift like that fails here."""

from __future__ import annotations

import re
from pathlib import Path

from esbench import gpu

REPO = Path(__file__).resolve().parent.parent


def _gpu_base() -> re.Match:
    text = (REPO / "Dockerfile").read_text()
    m = re.search(
        r"^ARG GPU_BASE=\S*nvidia/cuda:(?P<tag>(?P<major>\d+)\.(?P<minor>\d+)\.\d+-(?P<flavour>\w+))-", text, re.M
    )
    assert m, "Dockerfile has no ARG GPU_BASE=...nvidia/cuda:X.Y.Z-FLAVOUR-..."
    return m


def _lock() -> dict[str, str]:
    text = (REPO / "locks" / "gpu.txt").read_text()
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M))


def test_the_image_base_is_the_cuda_major_and_minor_torch_was_built_for():
    base, lock = _gpu_base(), _lock()
    assert base["major"] == gpu.CUDA_MAJOR
    toolkit = lock["cuda-toolkit"].split(".")  # what torch pulls: the CUDA it was built with
    assert (base["major"], base["minor"]) == (toolkit[0], toolkit[1]), (base["tag"], lock["cuda-toolkit"])
    assert base["flavour"] in ("base", "runtime", "devel")


def test_the_locks_cuda_packages_are_all_one_major():
    lock = _lock()
    assert lock["cuda-toolkit"].split(".")[0] == gpu.CUDA_MAJOR
    assert lock["nvidia-cuda-runtime"].split(".")[0] == gpu.CUDA_MAJOR
    # packages that carry the CUDA major in their name; nvidia-cutlass-dsl depends on its cu12 and cu13 libraries
    # both and picks one by the driver at import, so those two are not a second stack
    suffixed = {p: m for p in lock if (m := re.search(r"-cu(\d+)$", p)) and not p.startswith("nvidia-cutlass-dsl-libs")}
    assert suffixed, "no -cuNN package in locks/gpu.txt"
    assert {p: m[1] for p, m in suffixed.items() if m[1] != gpu.CUDA_MAJOR} == {}


def test_the_readme_states_the_same_cuda_major_minimum_driver_and_image():
    text = (REPO / "README.md").read_text()
    m = re.search(r"\*\*GPU requirements\.\*\*(?P<p>.*?)\n\n", text, re.S)
    assert m, "README has no **GPU requirements.** paragraph"
    para = " ".join(m["p"].split())
    assert re.search(r"CUDA (\d+)", para)[1] == gpu.CUDA_MAJOR, para
    assert re.search(r"driver >= (\d+)", para)[1] == gpu.MIN_DRIVER, para
    assert f"nvidia/cuda:{_gpu_base()['tag']}" in para, para
    assert "esbench doctor --device cuda" in para


def test_the_constant_is_the_minimum_driver_of_its_cuda_major():
    assert gpu.MIN_DRIVER == gpu.min_driver_for_cuda(gpu.CUDA_MAJOR)
