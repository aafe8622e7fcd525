"""The project's test fixtures: its own app (eager), its tables created once."""

from __future__ import annotations

import pytest
from celery import Celery
from proj import celery_app as app

from celery_tracked.store.migrate import upgrade


@pytest.fixture(scope="session")
def celery_app() -> Celery:
    """The project's app (task_always_eager, task_eager_propagates), not a test app."""
    upgrade(app.conf.tracked_database_url)  # the tables, once per test database
    return app
