# steadyrl set-up. Two commands matter: `make demo` and `make test` (see README.md).
# Both create .venv when it is missing and are no-ops for the install the second time.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

# Without CUDA we pin the CPU build: an unpinned torch pulls a multi-GB CUDA build.
# Override with e.g. `make test TORCH_SPEC="torch==2.5.1"`.
HAVE_CUDA  := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo 1)
TORCH_SPEC ?= $(if $(HAVE_CUDA),torch>=2.4,torch==2.13.0)

PYTEST_ARGS ?=
# TEST_WORKERS=auto (or a number) spreads test files over the cores (pytest-xdist), a file's tests kept on one
# worker so its module fixtures are built once, at most 4 workers (the end-to-end tests take ~1 GiB each):
# 11 min 19 s instead of 19 min on 2 cores. Serial is the default: in 1 of 3 parallel runs a worker reported
# "finished" mid-test (a test's forked child reaching the worker's channel, not yet found), which fails the run.
TEST_WORKERS ?= 0
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile)

.PHONY: demo test test-fast bench venv clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.torch: | $(PY)
	$(PIP) install "$(TORCH_SPEC)"
	touch $@

$(VENV)/.base: pyproject.toml $(VENV)/.torch
	$(PIP) install -e .
	touch $@

$(VENV)/.dev: pyproject.toml $(VENV)/.torch
	$(PIP) install -e ".[dev]"
	touch $@

$(VENV)/.bench: pyproject.toml $(VENV)/.dev
	$(PIP) install -e ".[dev,bench]" "$(TORCH_SPEC)"
	touch $@

venv: $(VENV)/.dev

demo: $(VENV)/.base
	$(VENV)/bin/steadyrl train --output-dir runs/demo --overwrite

test: $(VENV)/.dev
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# The inner loop: everything but the tests marked slow (> ~20 s each: end-to-end learning,
# asynchronous rollout workers, kill-and-resume, torchrun); `make test` still runs them all.
test-fast: $(VENV)/.dev
	$(PY) -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

bench: $(VENV)/.bench
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
