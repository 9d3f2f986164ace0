# `make quickstart` runs a real workflow through a real worker; `make test` runs the checks.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install quickstart test lint bench bench-smoke

$(VENV)/.installed: pyproject.toml tests/example_store_plugin/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -e tests/example_store_plugin
	touch $@

install: $(VENV)/.installed

quickstart: install
	$(PY) -m examples.quickstart

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -n 2 --dist loadfile

bench: install
	$(PY) -m bench

bench-smoke: install
	$(PY) -m bench --smoke
