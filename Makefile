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
# The test files are spread over the cores with pytest-xdist (a file's tests kept on one worker, so its module
# fixtures are built once). TEST_WORKERS=auto, the default: one worker per core, at most 4 and at most one per
# TEST_WORKER_MIB of available memory (the largest process of a measured run peaked at 4.0 GiB resident), a
# container's cgroup limits on memory and CPU counted (tools/xdist_workers.py); where that comes to 1 (a 1-core
# or small machine) the tests run in this process, one at a time. TEST_WORKERS=0 or 1 runs serially anyway,
# TEST_WORKERS=N runs N workers (at most 4). On 2 cores: 10 min 17 s with 2 workers (fresh clone), 19 min 6 s serially
# (README.md, "make test").
TEST_WORKERS    ?= auto
TEST_WORKER_MIB ?= 4096
AUTO_WORKERS = $(shell $(PYTHON) tools/xdist_workers.py $(TEST_WORKER_MIB) 2>/dev/null || echo 1)
WORKERS = $(if $(filter auto,$(TEST_WORKERS)),$(AUTO_WORKERS),$(TEST_WORKERS))
XDIST = $(if $(filter 0 1,$(WORKERS)),,-n $(WORKERS) --maxprocesses 4 --dist loadfile)

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
