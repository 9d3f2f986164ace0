# `make quickstart` runs a real workflow through a real worker; `make test` runs the checks.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install quickstart test lint docs docs-serve bench bench-smoke fuzz

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

# The docs site (mkdocs.yml): warnings are errors, so a broken link or a stale API name fails
# (not --quiet: it drops the warnings --strict counts). `make docs-serve` serves it locally.
docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

test: lint docs
	$(PY) -m pytest -n 4 --dist worksteal

# The replay fuzzer's long profile: new generated bodies on every run (FUZZ_EXAMPLES of them).
FUZZ_EXAMPLES ?= 1000
fuzz: install
	DURABLE_FUZZ_PROFILE=long DURABLE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/test_replay_fuzz.py -q -s --hypothesis-show-statistics

bench: install
	$(PY) -m bench

bench-smoke: install
	$(PY) -m bench --smoke
	$(PY) -m bench.schema_probe --count 40 --pairs 1
