# Two commands on a fresh machine: `make run` and `make test` (see README).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run test install install-dev browser lint bench bench-kube bench-peers native clean-native clean kube kube-build

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall whenever pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# Quiet by default (warnings, errors and a line per cycle that changed something);
# `make run V=1` logs everything (GPUQUEUE_VERBOSE=1).
run: install
	$(if $(V),GPUQUEUE_VERBOSE=1 )$(BIN)/python -m gpuqueue.ops.launcher

# Browser tests drive Debian's chromium, the utilization reader's tests its prometheus; install
# them when missing (needs root or sudo). If that fails the browser tests skip and say why, the
# reader's tests build Prometheus from Go; the rest of the suite still runs.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && command -v prometheus >/dev/null \
		|| ./scripts/install-test-packages.sh \
		|| echo "WARNING: could not install chromium or prometheus; browser tests will be skipped" >&2

# The whole suite on the control plane of Kubernetes v1.34.4, then (a full run only) the DRA and
# PodGroup tests on v1.37.2: its control plane is built once into ~/.cache/gpuqueue beside the
# other (tests/kube/controlplane.py; GPUQUEUE_KUBE_VERSION chooses the release).
KUBE_NEXT ?= v1.37.2
KUBE_NEXT_TESTS ?= tests/kube/test_dra.py tests/kube/test_pod_groups.py
test: install-dev browser
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	$(if $(PYTEST_ARGS),,GPUQUEUE_KUBE_VERSION=$(KUBE_NEXT) $(BIN)/python -m pytest $(KUBE_NEXT_TESTS))

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy gpuqueue/scheduler

bench: install-dev
	$(BIN)/python -m gpuqueue.scheduler.bench

# 500 kwok nodes on a real control plane (tests/kube/controlplane.py; needs Go once to build it).
bench-kube: install-dev
	$(BIN)/python benchmarks/kube_scale.py

# gpuqueue and Kueue side by side on that control plane (builds Kueue once; not part of `test`):
# the contended mix, Kueue's baseline scaled, KAI's scale test; each system on a fresh cluster.
bench-peers: install-dev
	$(BIN)/python -m benchmarks.peers.side_by_side --scenario contended
	$(BIN)/python -m benchmarks.peers.side_by_side --scenario baseline --systems kueue,gpuqueue
	$(BIN)/python -m benchmarks.peers.side_by_side --scenario kai

# Optional: the engine and the trace replay compiled with mypyc (needs a C compiler and the
# Python headers); a Philly replay runs about a quarter faster. `gpuqueue` refuses to import a
# build whose sources changed since (gpuqueue/native.py); `make clean-native` removes it.
native: install-dev
	$(BIN)/python -m gpuqueue.native build

clean-native:  # gpuqueue/ holds no other compiled module
	find gpuqueue -name '*.so' -delete
	rm -rf build/mypyc gpuqueue/native.json

clean: clean-native
	rm -rf $(VENV) data

# A real Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler) with kwok
# GPU nodes, built once from Go modules into ~/.cache/gpuqueue (see docs/kubernetes.md).
kube-build: install-dev
	$(BIN)/python -m tests.kube.controlplane build

kube: install-dev
	$(BIN)/python -m tests.kube.controlplane up
