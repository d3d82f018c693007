# dynquota — see README.md. Every target installs what it needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup controlplane kwok test unit integration lint bench bench-admission bench-scale demo clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# PYTHONWARNINGS: setuptools' banner about editable installs is noise here
	PYTHONWARNINGS=ignore $(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# Builds (only when missing) and prints the directory of the control-plane binaries.
controlplane:
	@hack/controlplane/build.sh

# Builds (only when missing) and prints the directory of kwok and its stages (simulated nodes).
kwok:
	@hack/kwok/build.sh

lint: setup
	$(VENV)/bin/ruff check dynquota tests
	$(VENV)/bin/ruff format --check dynquota tests
	$(VENV)/bin/mypy

unit: setup
	$(PY) -m pytest tests/unit

integration: setup controlplane kwok
	$(PY) -m pytest -m integration tests/integration

# The full suite: lint, types, unit and integration tests against a real control plane.
test: lint controlplane kwok
	$(PY) -m pytest -m 'not bench' tests

bench: setup controlplane kwok
	$(PY) -m pytest -m 'bench and not scale' -s tests/bench

bench-admission: setup controlplane
	$(PY) -m pytest -m bench -s tests/bench -k admission

# 150,000 watched objects (run a) and pod churn on 100 kwok nodes (run b), each beside a
# plain-kopf baseline; knobs in tests/bench/test_scale_bench.py (DYNQUOTA_SCALE_*).
bench-scale: setup controlplane kwok
	$(PY) -m pytest -m scale -s tests/bench/test_scale_bench.py

demo: setup controlplane kwok
	$(PY) -m dynquota.cli demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
