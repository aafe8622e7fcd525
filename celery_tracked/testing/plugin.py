"""The pytest plugin (entry point ``pytest11``: ``celery_tracked``): fixtures for testing
tracked tasks, on Celery's own ``celery_app`` fixture (``celery.contrib.pytest``).

- ``tracked_database``: which store a test gets: ``"memory"`` (default), ``"sqlite"`` or
  a database URL. Override it (or parametrize it indirectly) to choose.
- ``tracked_config``: the ``tracked_*`` settings applied to the app for one test
  (``apps.tracked_settings``); override it to add or change some.
- ``tracked_app``: Celery's ``celery_app`` with ``tracked_config`` and the test's
  ``celery`` mark applied, a fresh tracker (store and guard) for the test, the broker's
  queues purged before and after.
- ``tracked``: the :class:`~celery_tracked.testing.TrackedTesting` helpers on it.
- ``tracked_worker``: Celery's in-process worker on it for the test.

Disable with ``-p no:celery_tracked``. See docs/testing.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from .apps import MEMORY, SqliteTemplate, tracked_settings, tracked_test_app
from .helpers import TrackedTesting

#: The name pytest-celery registers Celery's fixtures under (``celery.contrib.pytest``).
_CELERY_PLUGIN = "celery"
#: Celery's mark of a test's settings (``@pytest.mark.celery(task_always_eager=True)``).
_CELERY_MARK = "celery"


def pytest_configure(config: pytest.Config) -> None:
    """Celery's own fixtures (``celery_app``, ``celery_config``...) when pytest-celery
    did not load them."""
    manager = config.pluginmanager
    if not manager.hasplugin(_CELERY_PLUGIN) and not manager.hasplugin("celery.contrib.pytest"):
        manager.import_plugin("celery.contrib.pytest")


@pytest.fixture
def tracked_database() -> str:
    """Which store the test's app uses: ``"memory"``, ``"sqlite"`` or a database URL."""
    return MEMORY


@pytest.fixture(scope="session")
def tracked_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplate:
    """The migrated SQLite file each ``"sqlite"`` test gets a copy of (migrated once)."""
    return SqliteTemplate(tmp_path_factory.mktemp("tracked-template"))


@pytest.fixture
def tracked_config(
    tracked_database: str, tmp_path: Path, tracked_sqlite_template: SqliteTemplate
) -> dict[str, Any]:
    """The ``tracked_*`` settings of the test (a fresh guard, the chosen store)."""
    return tracked_settings(tracked_database, tmp_path, tracked_sqlite_template)


@pytest.fixture
def tracked_app(
    request: pytest.FixtureRequest, celery_app: Celery, tracked_config: dict[str, Any]
) -> Iterator[Celery]:
    """Celery's ``celery_app`` (or yours, if you override it) configured for tracking.

    The test's ``@pytest.mark.celery(...)`` settings are applied to it too (Celery's own
    ``celery_app`` applies them, an app of yours would not: ``task_always_eager`` left
    out, a ``.get()`` waits for a worker that never comes); ``tracked_config`` wins for
    the ``tracked_*`` settings. All are put back after the test."""
    mark = request.node.get_closest_marker(_CELERY_MARK)
    marked = dict(mark.kwargs) if mark is not None else {}
    with tracked_test_app(celery_app, {**marked, **tracked_config}) as app:
        yield app


@pytest.fixture
def tracked(tracked_app: Celery) -> TrackedTesting:
    """Helpers to assert on the test's jobs and run them (``TrackedTesting``)."""
    return TrackedTesting(tracked_app)


@pytest.fixture
def tracked_worker(tracked: TrackedTesting) -> Iterator[Any]:
    """Celery's in-process worker (a thread, the ``solo`` pool) for the test."""
    with tracked.worker() as worker:
        yield worker
