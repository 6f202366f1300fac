# Two commands do all set-up on a fresh machine:
#   make demo   -- a Nemotron-shaped MoE layer through the auto backend, checked against the reference
#   make test   -- the test suite (CPU tests + Triton interpreter tests; GPU tests run where a GPU is)
#
# A venv is created in .venv. torch is installed only if the venv has none: on our CPU machines
# `pip install torch==2.13.0` takes the local CPU build; a GPU user keeps the torch already there
# (the venv sees the system site-packages, so an installed CUDA torch is used as is).

PYTHON ?= .venv/bin/python
VENV_STAMP := .venv/.fusedmoe-installed
TORCH_CPU_VERSION ?= 2.13.0

.PHONY: demo test test-gpu venv clean

$(VENV_STAMP): pyproject.toml
	@test -x .venv/bin/python || python3 -m venv --system-site-packages .venv
	@.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q "torch==$(TORCH_CPU_VERSION)"
	@.venv/bin/python -c "import triton" 2>/dev/null || .venv/bin/pip install -q "triton==3.6.0"
	@.venv/bin/python -c "import transformers" 2>/dev/null || .venv/bin/pip install -q "transformers==5.17.0"
	.venv/bin/pip install -q "numpy<2.4" pytest pytest-xdist hypothesis rich matplotlib safetensors "setuptools>=61"
	.venv/bin/pip install -q --no-deps --no-build-isolation -e .
	@touch $(VENV_STAMP)

venv: $(VENV_STAMP)

demo: $(VENV_STAMP)
	$(PYTHON) -m fusedmoe demo

test: $(VENV_STAMP)
	$(PYTHON) -m pytest -q -n 2 tests

test-gpu:
	$(PYTHON) -m pytest -q -m gpu tests

clean:
	rm -rf .venv build src/*.egg-info .pytest_cache
