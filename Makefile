# dynquota — see README.md. Every target installs what it needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup controlplane kwok toxiproxy promtool image image-test alerts test unit integration \
	lint bench bench-admission bench-apf bench-apf-governor bench-budgets bench-cleanup bench-fit bench-plan bench-scale soak \
	demo clean \
	chart-generate dist dist-test

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# PYTHONWARNINGS: setuptools' banner about editable installs is noise here
	# demo: matplotlib for `make demo`'s picture (not an operator dependency)
	PYTHONWARNINGS=ignore $(PY) -m pip install -q -c constraints.txt -e '.[dev,demo]'
	touch $(STAMP)

# Builds (only when missing) and prints the directory of the control-plane binaries.
controlplane:
	@hack/controlplane/build.sh

# Installs (once, cached by version) and prints promtool; see hack/promtool/install.sh.
promtool:
	@hack/promtool/install.sh

# Builds the Dockerfile daemonlessly with buildah (vfs storage, chroot isolation) on a base made
# from Debian packages; needs buildah, podman and mmdebstrap (apt). See docs/install.md.
image:
	@hack/image/build.sh

# The built image run for real (its filesystem, as uid 65532) against a local control plane.
image-test: setup controlplane image
	$(PY) -m pytest tests/integration/test_image.py

# promtool check/test of the chart's alerts and their metric names against a live scrape.
alerts: setup controlplane promtool
	$(PY) -m pytest tests/integration/test_alerts.py

# Builds (only when missing) and prints the directory of the Toxiproxy server (fault tests).
toxiproxy:
	@hack/toxiproxy/build.sh

# Builds (only when missing) and prints the directory of kwok and its stages (simulated nodes).
kwok:
	@hack/kwok/build.sh

# The chart's derived files from their one source (hack/chart/generate.py, docs/chart.md):
# helm/dynquota/crds/ from crds/, values.schema.json and the values table of
# docs/configuration.md from values.yaml's annotations. A unit test fails when they are stale.
chart-generate: setup
	$(PY) hack/chart/generate.py

# The release artifacts into dist/: wheel and sdist, the chart package, the image as an OCI
# archive (hack/release/dist.sh; DYNQUOTA_DIST_IMAGE=0 skips the image). docs/install.md says
# where each is pushed. Not part of `make test`: the image build takes minutes after a change.
dist: setup controlplane
	hack/release/dist.sh

# dist/ installed as users install it: the CLI from the wheel with `uv tool` and `pipx`, the
# packaged chart on the local control plane, the installed CLI against it.
dist-test: dist
	$(PY) -m pytest tests/integration/test_dist.py

lint: setup
	$(VENV)/bin/ruff check dynquota tests hack
	$(VENV)/bin/ruff format --check dynquota tests hack
	$(VENV)/bin/mypy
	# the layer contracts of pyproject.toml ([tool.importlinter]; docs/architecture.md)
	$(VENV)/bin/lint-imports --no-cache

unit: setup
	$(PY) -m pytest tests/unit

integration: setup controlplane kwok toxiproxy
	$(PY) -m pytest -m integration tests/integration

# The full suite: lint, types, unit and integration tests against a real control plane.
# tests/integration/test_image.py uses the image `make image` built (.ci/run builds it first)
# and skips, saying why, where buildah is not installed.
# Two pytest-xdist workers, one xdist group per integration file (tests/conftest.py says why).
# A test is rerun only when the audit log shows an upstream quota race (docs/controlplane.md)
# or when the ReplicaSet controller's own backoff ended first (tests/integration/test_wake.py),
# or a paused write met a 409 before the fence could answer (tests/integration/test_lease_fence.py).
test: lint controlplane kwok promtool toxiproxy
	$(PY) -m pytest -n 2 --dist loadgroup --no-loadscope-reorder -m 'not bench' --durations=25 \
		--reruns 2 --only-rerun UpstreamQuotaRaceError \
		--only-rerun ReplicaSetBackoffRaceError --only-rerun LeaseFenceRaceError tests

bench: setup controlplane kwok
	$(PY) -m pytest -m 'bench and not scale' -s tests/bench

bench-admission: setup controlplane
	$(PY) -m pytest -m bench -s tests/bench -k admission

# API Priority and Fairness against one namespace's churn (issue 32): a tarpit priority level of
# 1-3 shares, Reject or a short queue, against no tarpit, and kube-controller-manager caught or
# not; about 10 minutes (DYNQUOTA_APF_BENCH_SECONDS per run, 15; knobs in the file).
bench-apf: setup controlplane
	$(PY) -m pytest -m bench -s tests/bench/test_apf_bench.py

# the write-rate governor on the same bed (issue 32): engage/release times, governor off vs on
bench-apf-governor: setup controlplane kwok
	$(PY) -m pytest -m bench -s tests/bench/test_apf_governor_bench.py

# tenant budgets vs a static split vs no limit (issue #13); knobs DQ_BENCH_BUDGET_* in the file.
bench-budgets: setup controlplane
	$(PY) -m pytest -m bench -s tests/bench/test_budget_bench.py tests/bench/test_budget_list_bench.py

# `dynquota cleanup` over 5,000 managed namespaces (DYNQUOTA_CLEANUP_BENCH_NAMESPACES, _RUNS).
bench-cleanup: setup controlplane
	$(PY) -m pytest -m bench -s tests/bench/test_cleanup_bench.py

# `dynquota plan -n NS` against `plan -A` at 300 namespaces (DYNQUOTA_PLAN_BENCH_NAMESPACES,
# _CONFIGMAPS, _RUNS).
bench-plan: setup controlplane
	$(PY) -m pytest -m bench -s tests/bench/test_plan_scope_bench.py

# `kubectl dynquota fit` against the apiserver's audit log over generated scenarios (issue 31;
# DYNQUOTA_FIT_BENCH_SCENARIOS (50), _PARALLEL (6), _SEED): about 15 minutes.
bench-fit: setup controlplane kwok
	$(PY) -m pytest -m bench -s tests/bench/test_fit_bench.py

# Chaos soak (not in `make test`): two replicas, 200 namespaces, random faults; 30 minutes
# unless SOAK_SECONDS says otherwise. Prints a table; exits non-zero on any invariant violation.
SOAK_SECONDS ?= 1800
soak: setup controlplane toxiproxy
	$(PY) tests/soak/soak.py --seconds $(SOAK_SECONDS)

# 150,000 watched objects (run a) and pod churn on 100 kwok nodes (run b), each beside a
# plain-kopf baseline; knobs in tests/bench/test_scale_bench.py (DYNQUOTA_SCALE_*).
bench-scale: setup controlplane kwok
	$(PY) -m pytest -m scale -s tests/bench/test_scale_bench.py

demo: setup controlplane kwok
	$(PY) -m dynquota.cli demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
