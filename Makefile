# Two commands do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.runtime-installed

.PHONY: venv check docs test chaos demo bench bench-progress bench-cleanup bench-fleet bench-scale clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

# `make demo` needs only the runtime dependencies and psycopg (the `postgres` extra, for
# the story against services; no dev extra: a fresh clone runs it in about 40 s); nothing
# to install when `make venv` already installed everything.
$(RUNTIME_STAMP): pyproject.toml
	test -f $(STAMP) -a $(STAMP) -nt pyproject.toml || \
		{ $(PYTHON) -m venv $(VENV) && $(PY) -m pip install -q -e ".[postgres]" ; }
	touch $@

check: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict celery_tracked
	$(VENV)/bin/lint-imports
	$(MAKE) docs

# The documentation site (mkdocs.yml): no warning allowed; into the git-ignored site/.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

test: check
	$(VENV)/bin/pytest

# The chaos tier (tests/CHAOS.md): a bounded soak under faults on private servers, then its
# invariants as a table; about 3 minutes. `CHAOS_MINUTES=60 make chaos` soaks longer.
chaos: venv
	$(PY) -m tests.chaos.soak

demo: $(RUNTIME_STAMP)
	$(PY) -m example_project.demo

bench: venv
	$(PY) bench/run.py

bench-progress: venv
	$(PY) bench/progress.py

bench-cleanup: venv
	$(PY) bench/cleanup.py

bench-fleet: venv
	$(PY) bench/fleet.py

bench-scale: venv
	$(PY) bench/big_table.py

clean:
	rm -rf $(VENV) .demo dist build site .pytest_cache .mypy_cache .ruff_cache
