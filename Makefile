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

# The quick start installs only what it runs: the core, asyncpg and the embedded PostgreSQL
# (nothing when `make install` has already put the whole dev extra in).
$(VENV)/.quickstart: pyproject.toml
	@if [ -f $(VENV)/.installed ] && [ $(VENV)/.installed -nt pyproject.toml ]; then :; else \
		echo "make quickstart: installing durable-core[embedded] (the core, asyncpg and" \
			"pgserver, an embedded PostgreSQL) into $(VENV)"; \
		[ -x $(PY) ] || $(PYTHON) -m venv $(VENV); \
		$(PY) -m pip install --quiet -e '.[embedded]' 2> $(VENV)/quickstart-pip.log \
			|| { cat $(VENV)/quickstart-pip.log; exit 1; }; \
	fi
	@touch $@

quickstart: $(VENV)/.quickstart
	$(PY) -m examples.quickstart

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

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
	$(PY) -m bench.memory_store --smoke
