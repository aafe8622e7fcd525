"""A database without the tracking tables says "run `celery -A proj tracked migrate`", at
enqueue and in the worker's log (PostgreSQL, SQLite, MariaDB)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from celery_tracked import EnqueueError, StoreError, Tracker, tracked_task
from celery_tracked.core.outcomes import Postponed
from celery_tracked.store import JobStore

from .conftest import AppFactory
from .test_lease_judgement import deliver

HINT = "run `celery -A proj tracked migrate`"


@pytest.fixture(params=["postgres", "sqlite", "mariadb"])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database where nobody ran the migrations."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'unmigrated.sqlite3'}"
    return str(request.getfixturevalue(f"{request.param}_url"))


def test_enqueue_says_run_migrate(make_app: AppFactory, unmigrated_url: str) -> None:
    app = make_app(tracked_database_url=unmigrated_url)

    @tracked_task(app=app, queue="q")
    def work(n: int) -> None: ...

    with pytest.raises(EnqueueError) as info:
        work.enqueue(n=1)
    assert HINT in str(info.value)
    assert "background_jobs" in str(info.value)


def test_the_worker_log_says_run_migrate(
    make_app: AppFactory, unmigrated_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    tracker = Tracker.for_app(make_app(tracked_database_url=unmigrated_url))
    caplog.set_level(logging.INFO)
    verdict = deliver(tracker, "00000000-0000-0000-0000-000000000001", lambda: None)
    assert isinstance(verdict, Postponed)
    assert HINT in caplog.text


def test_a_store_read_says_run_migrate(unmigrated_url: str) -> None:
    store = JobStore(unmigrated_url)
    try:
        with pytest.raises(StoreError, match="tracked migrate"):
            store.get("00000000-0000-0000-0000-000000000001")
    finally:
        store.dispose()
