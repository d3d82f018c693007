# dynquota — see README.md. Every target installs what it needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup controlplane toxiproxy test unit integration lint bench bench-admission soak demo clean

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

# Builds (only when missing) and prints the directory of the Toxiproxy server (fault tests).
toxiproxy:
	@hack/toxiproxy/build.sh

lint: setup
	$(VENV)/bin/ruff check dynquota tests
	$(VENV)/bin/ruff format --check dynquota tests
	$(VENV)/bin/mypy

unit: setup
	$(PY) -m pytest tests/unit

integration: setup controlplane toxiproxy
	$(PY) -m pytest -m integration tests/integration

# The full suite: lint, types, unit and integration tests against a real control plane.
test: lint controlplane toxiproxy
	$(PY) -m pytest -m 'not bench' tests

bench: setup controlplane
	$(PY) -m pytest -m bench -s tests/bench

bench-admission: setup controlplane
	$(PY) -m pytest -m bench -s tests/bench -k admission

# Chaos soak (not in `make test`): two replicas, 200 namespaces, random faults; 30 minutes
# unless SOAK_SECONDS says otherwise. Prints a table; exits non-zero on any invariant violation.
SOAK_SECONDS ?= 1800
soak: setup controlplane toxiproxy
	$(PY) tests/soak/soak.py --seconds $(SOAK_SECONDS)

demo: setup controlplane
	$(PY) -m dynquota.cli demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
