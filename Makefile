# Two commands do all set-up: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.runtime-installed

.PHONY: venv check docs lifecycle test test-durations test-fast test-unit test-db test-acceptance test-serial test-untouched-seed test-untouched-check chaos conformance demo bench bench-progress bench-cleanup bench-fleet bench-scale clean

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

# The state machine's table in docs/lifecycle.md, from store/transitions.py (a unit test
# fails when they differ).
lifecycle: venv
	$(PY) -m tests.unit.test_transitions --write

# The documentation site (mkdocs.yml): no warning allowed; into the git-ignored site/.
# Its output goes to site/build.log, which tests/acceptance/test_docs_site.py reads
# instead of building the same site a second time.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict 2>&1 | tee .docs-build.log; \
		status=$${PIPESTATUS[0]}; \
		if [ $$status = 0 ]; then mv .docs-build.log site/build.log; else rm -f .docs-build.log; fi; \
		exit $$status

# The suite in phases (tests/README.md): unit serially (xdist's start-up costs more than
# it saves there), the database tiers and the acceptance tier in parallel (each pytest
# process starts a private Redis and PostgreSQL of its own), then the timing-critical
# `serial` tests alone. The chaos tier runs once, beside the first phases (its soak waits
# on its fault schedule far more than it computes: about 45 CPU-seconds in 135 s); its
# report is printed when it ends, before the serial tests start on a quiet machine.
# Every phase runs, and the target fails if one did. TEST_WORKERS=2 make test runs fewer
# processes. Tracebacks are short (`--tb=short`): a failure's cause stays on one screen.
TEST_WORKERS ?= 4
# The acceptance tier waits on worker processes more than it computes (one core of two
# busy at -n 4): six processes there.
ACCEPTANCE_WORKERS ?= 6
PYTEST := $(VENV)/bin/pytest --tb=short
test: check
	$(MAKE) test-untouched-seed
	@echo "make chaos: in the background, its report after the parallel phases"
	@$(MAKE) --no-print-directory chaos > .chaos.log 2>&1 & soak=$$!; \
		$(MAKE) -k test-unit test-db test-acceptance; phases=$$?; \
		wait $$soak; chaos=$$?; cat .chaos.log; \
		$(MAKE) -k test-serial test-untouched-check; tail=$$?; \
		echo "phases: $$phases, chaos: $$chaos, serial and untouched check: $$tail (0 = passed)"; \
		exit $$(( phases || chaos || tail ))

test-unit: venv
	$(PYTEST) tests/unit -q -p no:xdist

test-db: venv
	$(PYTEST) tests/contract tests/integration tests/migrations -q -n $(TEST_WORKERS) \
		--dist worksteal -m "not serial"

test-acceptance: venv
	$(PYTEST) tests/acceptance -q -n $(ACCEPTANCE_WORKERS) --dist worksteal \
		-m "not serial and not untouched"

test-serial: venv
	$(PYTEST) tests -q -p no:xdist -m "serial and not untouched"

# tests/durations.json, read by tests/ordering.py (the long tests start first in each
# xdist worker's share): measured again from a run of the parallel tiers.
test-durations: venv
	$(PYTEST) tests/contract tests/integration tests/migrations tests/acceptance -q \
		-n $(TEST_WORKERS) --dist worksteal -m "not serial and not untouched" \
		--durations=0 | tee .durations.log
	$(PY) -m tests.ordering < .durations.log && rm .durations.log

# First and last: a key seeded in each database of the Redis on 6379 (someone's own) before
# the suite is still there after it.
test-untouched-seed: venv
	$(PYTEST) tests/acceptance/test_shared_redis_untouched.py -q -p no:xdist -m untouched_seed

test-untouched-check: venv
	$(PYTEST) tests/acceptance/test_shared_redis_untouched.py -q -p no:xdist -m untouched_check

# Everyday work: unit + contract on SQLite and the memory store, no service (< 1 minute).
test-fast: venv
	$(PYTEST) tests/unit tests/contract -q -p no:xdist --no-services

# The chaos tier (tests/CHAOS.md): a bounded soak under faults on private servers, then its
# invariants as a table; about 3 minutes. `CHAOS_MINUTES=60 make chaos` soaks longer.
chaos: venv
	$(PY) -m tests.chaos.soak

# The conformance tier (tests/README.md): Celery's own t/integration suite, from the sdist of
# the installed Celery, plain then with TrackedTask as the app's task_cls, on a private
# Redis; the table of both. CONFORMANCE=quick runs a few files only (CI's budget).
conformance: venv
	$(PY) -m tests.conformance.run

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
