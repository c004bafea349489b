# The two set-up commands are `make run` and `make test`; both install what they need first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint typecheck pytest migrate demo clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

run: install
	$(BIN)/dealbase migrate
	$(BIN)/dealbase demo
	$(BIN)/dealbase serve

test: install lint typecheck pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo

typecheck: install
	$(BIN)/mypy

pytest: install
	$(BIN)/pytest

migrate: install
	$(BIN)/dealbase migrate

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
