# Every target uses the project's virtual environment; `make venv` creates it (torch CPU build first, so
# pip never resolves a multi-GB CUDA build).
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0

.PHONY: venv tools run demo test lint golden generate bench wheel smoke image image-push

# The exporter alone: no torch.
$(VENV)/.runtime: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

# Everything the tests need: torch (CPU build, pinned) first, then the project with the kubelet client (its
# `kubernetes` extra) and the dependency group `dev` (tests, frameworks, linters; pip >= 25.1 reads groups).
$(VENV)/.installed: pyproject.toml $(VENV)/.runtime
	$(PY) -m pip install -q torch==$(TORCH_VERSION)
	$(PY) -m pip install -q -e '.[kubernetes]' --group dev
	touch $@

venv: $(VENV)/.installed

run: $(VENV)/.runtime
	$(VENV)/bin/bottleneck-exporter $(ARGS)

# The exporter on a recorded GPU profile beside a real input-bound CPU training job, then its verdicts (~35 s).
demo: venv
	scripts/demo $(PY)

# Debian packages the tests use for real (prometheus, promtool, alertmanager, amtool, ...).
tools:
	scripts/install-test-tools

# PYTEST_ARGS adds pytest options: `make test PYTEST_ARGS='-m "not live and not torch and not tools"'` is the fast lane.
test: venv tools
	$(PY) -m pytest -q $(PYTEST_ARGS)

# mypy finds the package by its import name: the source folder exporter/ is linked as build/typecheck/bottleneck_exporter.
lint: venv
	$(VENV)/bin/ruff check exporter tests benchmarks deploy
	mkdir -p build/typecheck && ln -sfn ../../exporter build/typecheck/bottleneck_exporter
	$(VENV)/bin/mypy

# The wheel a person installs (dist/): the package and the whole bundle of rules, alerts and dashboards.
wheel: $(VENV)/.runtime
	rm -rf build/lib  # setuptools builds there and never removes a deleted module's copy
	$(PY) -m pip wheel -q --no-deps -w dist .

# The daemon's image, tagged with the package's version (exporter/__init__.py). IMAGE is what a release publishes
# and the kustomize base deploys (deploy/kubernetes/base/kustomization.yaml); for a private registry:
# `make image-push IMAGE=registry.example.org/ml/bottleneck-exporter`, then set that name in an overlay's images:.
IMAGE ?= ghcr.io/bottleneck-exporter/bottleneck-exporter
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' exporter/__init__.py)
image:
	docker build -f deploy/docker/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .

image-push: image
	docker push $(IMAGE):$(VERSION)

# The wheel installed into a fresh virtual environment outside the tree, then used as a person would: the exporter,
# `run` on a real script, `bundle write` checked by promtool and amtool (what CI runs after the tests).
smoke: tools
	scripts/wheel-smoke

# Regenerate the golden scrapes after an intended change; review them as a diff.
golden: venv
	$(PY) -m pytest -q -m golden --update-golden

# Side-by-side measurements (scrape cost vs node_exporter/process-exporter, hook overhead per step).
bench: venv tools
	$(PY) benchmarks/scrape_vs_node_exporter.py
	$(PY) benchmarks/procfs_vs_psutil.py
	$(PY) benchmarks/hook_overhead.py
	$(PY) benchmarks/hook_compile.py

# Regenerate every committed artefact of the heuristics catalogue: rules, alerts, runbook, promtool tests,
# dashboards, the monitoring mixin (mixin/), the Kubernetes PrometheusRule and dashboard ConfigMaps; and
# kube-prometheus-stack's Alertmanager routing from alerts/alertmanager.yml. Tests fail when a committed file differs
# from this output.
generate: venv
	$(PY) -m bottleneck_exporter.heuristics.generate
	$(PY) -m bottleneck_exporter.dashboards
	$(PY) deploy/kubernetes/generate_prometheusrule.py
	$(PY) deploy/kubernetes/generate_dashboards.py
	$(PY) deploy/kubernetes/generate_alertmanager.py
