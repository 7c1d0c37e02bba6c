# coreburst developer entry points. `make demo` and `make test` work on a fresh clone.
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3

.PHONY: setup demo plan lint test unit integration bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

## The main job on the embedded default: offline evaluation of the dev stack with costs.
demo: setup
	$(BIN)/coreburst plan --stack dev

plan: setup
	$(BIN)/coreburst plan --stack $(or $(STACK),dev)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

## The whole test suite: lint, types, unit and integration tests.
test: lint
	$(BIN)/pytest -q

unit: setup
	$(BIN)/pytest -q tests/unit

integration: setup
	$(BIN)/pytest -q -m integration tests/integration

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
