# `make run` and `make test` set everything up on a fresh machine, then do their job.
# Both are idempotent: the venv is rebuilt only when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# llama-cpp-python compiles from source; the default (native) build crashed here with
# "Illegal instruction", these flags build a portable AVX2 binary.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON

.PHONY: setup run test check bench docs lint golden clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The counterfactual metrics' oracle; its own pins (numpy<2, rich==13.8) would downgrade ours.
	$(BIN)/python -m pip install --quiet --no-deps langfair==0.8.0
	touch $(STAMP)

run: setup
	$(BIN)/biasim run emergency_response

# Two workers for most of the suite, then a serial pass for what times things (tests/conftest.py).
test: setup
	$(BIN)/python -m pytest -q -n 2 --dist worksteal -m "not serial" --durations=60
	$(BIN)/python -m pytest -q -m serial --durations=20

# The fast tier while working: lint, the import contract (import-linter, pyproject.toml's
# [tool.importlinter]; `make test` checks it too, in tests/unit/architecture) and the unit tests
# (no slow calibration, real model or browser), on two workers as `make test`, then the unit
# tests that time things, serially.
FAST := not slow and not model and not browser
check: setup
	$(BIN)/ruff check .
	$(BIN)/python -m tests.lint_imports
	$(BIN)/python -m pytest -q -n 2 --dist worksteal tests/unit -m "$(FAST) and not serial"
	$(BIN)/python -m pytest -q tests/unit -m "$(FAST) and serial"

docs: setup
	$(BIN)/python -m biasim.simulator.cli.reference_docs
	$(BIN)/mkdocs build --strict

# Rewrite the golden tables (tests/golden) after a deliberate change to what a study writes;
# prints what changed, table by table (tests/e2e/test_builtin_outputs.py compares them).
golden: setup
	$(BIN)/python -m tests.golden --update

bench: setup
	$(BIN)/python -m benchmarks

lint: setup
	$(BIN)/ruff check .
	$(BIN)/python -m tests.lint_imports

clean:
	rm -rf $(VENV) runs bench-results site
