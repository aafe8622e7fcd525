# Two commands do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv check test demo bench bench-progress bench-cleanup bench-fleet bench-scale clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

check: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict celery_tracked
	$(VENV)/bin/lint-imports

test: check
	$(VENV)/bin/pytest

demo: venv
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
	rm -rf $(VENV) .demo dist build .pytest_cache .mypy_cache .ruff_cache
