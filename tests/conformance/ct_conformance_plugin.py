"""The pytest plugin ``make conformance`` adds to Celery's own ``t/integration`` run
(``-p ct_conformance_plugin``, from this directory on ``PYTHONPATH``); Celery's test files
and conftest are not changed.

- Both modes: a test's ``timeout`` mark longer than ``CONFORMANCE_TIMEOUT`` seconds is
  shortened to it, so a test that blocks forever costs minutes, not Celery's 300 s.
- ``CONFORMANCE_MODE=tracked``: Celery's ``celery_parameters`` fixture (the arguments of
  every test app, ``celery_session_app`` and ``celery_app``, both built by
  ``celery.contrib.pytest``) gains ``task_cls=TrackedTask``, so every task of the suite's
  app (its ``shared_task``s, Celery's built-in tasks) is a tracked task. The tracking
  settings come from the environment (``CELERY_TRACKED_DATABASE_URL``,
  ``CELERY_TRACKED_REDIS_URL``), set by ``run.py``.

The fixture is in ``ct_conformance_tracked.py``, registered in ``pytest_configure``: a
``-p`` module is registered before the ``pytest11`` entry points (Celery's own plugin among
them), and of two plugin fixtures of one name the one registered last wins.
"""

from __future__ import annotations

import os

import pytest

MODE = os.environ.get("CONFORMANCE_MODE", "plain")
TIMEOUT_S = float(os.environ.get("CONFORMANCE_TIMEOUT", "300"))


def pytest_configure(config: pytest.Config) -> None:
    if MODE == "tracked":
        import celery_tracked  # noqa: F401  (before any app is finalized: issue 24, 1)

        config.pluginmanager.import_plugin("ct_conformance_tracked")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        mark = item.get_closest_marker("timeout")
        given = (mark.kwargs.get("timeout") or (mark.args or [None])[0]) if mark else None
        if given is None or float(given) > TIMEOUT_S:
            item.add_marker(pytest.mark.timeout(timeout=TIMEOUT_S), append=False)


def pytest_report_header() -> str:
    return f"celery-tracked conformance: mode={MODE}, timeout cap {TIMEOUT_S:g}s"
