# Two entry points: `make run` (scripted/expert over every task, guided and not, into $(RUNS)) and `make test`.
# Without a GPU the venv gets the CPU build of torch; with a GPU and a torch already installed,
# the venv sees that torch (--system-site-packages) instead of downloading another.
VENV    ?= .venv
PY      := $(VENV)/bin/python
# The CPU build by its local version: found where a wheel folder or mirror holds it (CI), else on PyTorch's
# CPU index (PyPI's torch for Linux is the CUDA build, several GB).
TORCH   ?= torch==2.13.0+cpu
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# The H200's Triton, installed apart for the tests that compile every expert with it as well (no GPU needed)
DEVICE_TRITON ?= triton==3.6.0
RUNS    ?= runs/default
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && python3 -c "import torch" >/dev/null 2>&1 && echo yes)

.PHONY: run test lint clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(if $(HAS_GPU),--system-site-packages,) $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(if $(HAS_GPU),,$(PY) -m pip install -q "$(TORCH)" || $(PY) -m pip install -q "$(TORCH)" --extra-index-url $(TORCH_CPU_INDEX))
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip install -q --no-deps --target $(VENV)/device-triton "$(DEVICE_TRITON)"
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/d2k run --model scripted/expert --tasks all --configs none,L1+L2+L3 --out $(RUNS)

test: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests
	D2K_DEVICE_TRITON=$(VENV)/device-triton $(PY) -m pytest -q -n 2

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
