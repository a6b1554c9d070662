# Verified kernel archive: `make build-archive` on a GPU box (BACKEND=cpu elsewhere), `make test` anywhere.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
KA := $(VENV)/bin/kernel-archive
# The CPU wheel of torch is pinned so that a CPU machine never pulls CUDA packages.
TORCH_CPU_PIN ?= torch==2.13.0
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)

BACKEND ?= $(if $(HAS_GPU),cuda,)
BUILD_DIR ?= builds/archive
DATASET_DIR ?= builds/dataset
GENERATOR ?= auto
LEVELS ?= 1,2,3
TASKS ?=
HF_REPO_ID ?=

.PHONY: setup test test-slow test-gpu build-archive explore bench lint clean

$(VENV)/.installed: pyproject.toml
	@if [ -n "$(HAS_GPU)" ]; then \
	  $(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
	  $(PYTHON) -m venv $(VENV) && $(PY) -m pip install -q --upgrade pip && \
	  $(PY) -m pip install -q "$(TORCH_CPU_PIN)"; \
	fi
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

# `make test`: every test but those marked slow (real CPU builds of whole streams, a Ray cluster, the bundled
# candidates' verdicts); `make test-slow` runs those, and CI runs both.
test: setup
	$(PY) -m pytest -q -m "not slow"

test-slow: setup
	$(PY) -m pytest -q -m slow

test-gpu: setup
	$(PY) -m pytest -q -m gpu

build-archive: setup
	@if [ -z "$(BACKEND)" ]; then \
	  echo "No NVIDIA GPU found: the archive is built on a GPU box. Run 'make build-archive BACKEND=cpu' for the same pipeline on the CPU backend."; \
	  exit 3; \
	fi
	$(KA) build --out $(BUILD_DIR) --generator $(GENERATOR) --backend $(BACKEND) --levels $(LEVELS) $(if $(TASKS),--tasks '$(TASKS)',)
	$(KA) export $(BUILD_DIR) --out $(DATASET_DIR)
	$(KA) embed $(DATASET_DIR)
	@if [ -n "$(HF_REPO_ID)" ]; then $(KA) publish $(DATASET_DIR) --repo-id $(HF_REPO_ID); \
	else echo "HF_REPO_ID not set: dataset left in $(DATASET_DIR) (set HF_REPO_ID=org/name to publish)"; fi

explore: setup
	$(KA) explore $(SOURCE)

bench: setup
	@for script in benchmarks/bench_*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

lint: setup
	$(VENV)/bin/ruff check builder explorer schemas tests benchmarks
	$(VENV)/bin/ruff format --check builder explorer schemas tests benchmarks

clean:
	rm -rf $(VENV) builds .pytest_cache
