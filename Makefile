# Two commands for a fresh machine: `make repro` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# --no-compile: a stage compiles what it imports on first use; byte-compiling every installed
# file up front costs ~30 s of `make repro` on 2 cores
PIP    := $(PY) -m pip install --quiet --disable-pip-version-check --no-compile

export DVC_NO_ANALYTICS := 1
export GX_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export PYTHONHASHSEED := 0
# The same CPU kernels on every x86-64 machine, so a seed's DQN trains to the same weights:
# torch's vectorised ops, MKL's BLAS and oneDNN are capped at AVX2 (docs/reproducibility.md)
export ATEN_CPU_CAPABILITY := avx2
export MKL_CBWR := AVX2
export ONEDNN_MAX_CPU_ISA := AVX2
# numpy's own SIMD kernels (np.exp, np.log, ...) differ in the last bit between AVX2 and AVX-512:
# keep numpy on its AVX2 paths so a seed's workload is the same bytes on every x86-64 machine
export NPY_DISABLE_CPU_FEATURES := X86_V4 AVX512_ICL AVX512_SPR
# mkdocs-gen-files and Material each print a banner about MkDocs 2 on every docs build
export DISABLE_MKDOCS_2_WARNING := true
export NO_MKDOCS_2_WARNING := 1
# dvc.yaml runs `python -m stages.<name>`: that python must be the venv's
export PATH := $(abspath $(VENV))/bin:$(PATH)
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# pip's find-links on this machine points at index dirs; its "is ignored" warnings are noise
PIPFILTER := 2>&1 | { grep -v "is ignored: it is neither" || true; }

.PHONY: repro test test-fast lint docs bench params browser system-deps serve clean-venv docs-tables
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0 $(PIPFILTER)
	$(PIP) -c constraints.txt -e '.[dev]' $(PIPFILTER)
	$(PIP) --no-deps hydra-optuna-sweeper==1.3.0 $(PIPFILTER)
	# its cloudpickle<3 pin would downgrade what joblib needs (STACK.md)
	$(PIP) --no-deps hydra-ray-launcher==1.2.2 $(PIPFILTER)
	$(PY) -c "import torch, hybridsched, dvc, hydra, numba"
	touch $@

# `dvc plots diff` template with Vega inlined (from npm), so reports render offline
PLOTS_TEMPLATE := .dvc/offline_plots.html
$(PLOTS_TEMPLATE): src/hybridsched/report_template.py | $(STAMP)
	$(PY) -m hybridsched.report_template $@

# Debian packages the tests use: headless Chromium (browser tests), PostgreSQL and Redis
# (real-server tests; each test starts and stops its own server). Skipped, with a note, where
# they cannot be installed; the tests that need them then skip.
SYSTEM_PKGS := chromium postgresql redis-server
system-deps:
	@missing=""; command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	  command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	  [ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing) >/dev/null 2>&1; } || \
	  echo "note: could not install$$missing; the tests that need them will be skipped"
browser: system-deps

repro: $(STAMP) $(PLOTS_TEMPLATE)
	dvc repro

# the suite runs on every core (pytest-xdist); a test module stays on one worker, so module
# fixtures (a scratch clone, a trained model) are built once. TEST_WORKERS=0 runs it serially.
TEST_WORKERS ?= auto
test: $(STAMP) $(PLOTS_TEMPLATE) browser
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow"

# ruff (pyflakes and syntax rules) and mypy, both configured in pyproject.toml; CI runs this
# before the tests (.ci/run)
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m mypy

# the docs as a site under site/ (mkdocs.yml; strict: a broken link or anchor fails)
docs: $(STAMP)
	$(PY) -m mkdocs build --strict

# The docs' tables copied from metrics/ (between `<!-- generated: NAME -->` markers), rebuilt
# from the metrics of the last `make repro`; tests/test_docs_tables.py fails while one is stale.
docs-tables: $(STAMP)
	$(PY) scripts/docs_tables.py

# Every benchmark runs, even after one misses a target (printed MISSED, exit 0) or crashes;
# non-zero exit only if one crashed. `make bench BENCH_ARGS=--smoke`: tiny sizes, nothing saved.
BENCH_ARGS ?=
bench: $(STAMP)
	@crashed=""; for b in benchmarks/bench_*.py; do m=$$(basename $$b .py); echo "== $$m"; \
	  $(PY) -m benchmarks.$$m $(BENCH_ARGS) || crashed="$$crashed $$m"; done; \
	  if [ -n "$$crashed" ]; then echo "make bench: crashed:$$crashed" >&2; exit 1; fi; echo "make bench: all ran"

# The live service: the trained schedulers race on one task stream (docs/service.md).
# `make serve PORT=8001`; needs models/ from `make repro` for the learned policies.
PORT ?= 8000
HOST ?= 127.0.0.1
serve: $(STAMP)
	$(VENV)/bin/hybridsched serve --host $(HOST) --port $(PORT)

# Compose conf/ into params.yaml exactly as `dvc exp run` does.
params: $(STAMP)
	$(PY) -c "from dvc.utils.hydra import compose_and_dump as c; import os; c('params.yaml', os.path.abspath('conf'), None, 'config', '.', [])"

clean-venv:
	rm -rf $(VENV)
