# The two commands a newcomer needs: `make demo` and `make test`.  Both set up .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench system-deps proto clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Debian packages the tests drive for real (Prometheus server and promtool, Chromium).
system-deps:
	bash scripts/system-deps.sh

demo: $(STAMP)
	$(BIN)/ringtrace demo

lint: $(STAMP)
	$(BIN)/ruff check ringtrace tests deploy
	$(BIN)/lint-imports  # the layering contracts in pyproject.toml

typecheck: $(STAMP)
	$(BIN)/mypy ringtrace

pytest: $(STAMP) system-deps
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python tests/bench/bench_summary.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
