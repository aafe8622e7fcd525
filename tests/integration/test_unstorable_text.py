"""Text no database can hold as given (a lone surrogate from ``os.fsdecode``, NUL) in what
a body raises, its stage and its log lines is stored visibly escaped: the job ends
``failed`` with its real cause, never stuck in ``processing`` (trial of issue 22, F1).
PostgreSQL, SQLite and MariaDB, in the caller's process (eager); the worker's way is in
tests/acceptance/test_unstorable_text.py."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from celery_tracked import JobStatus, tracked_task
from celery_tracked.migrate import upgrade

from .conftest import AppFactory, tracker_of


def _quiet_celery_trace(caplog: pytest.LogCaptureFixture) -> None:
    """Celery's own "Task raised unexpected" line holds the raw lone surrogate, which
    pytest-xdist cannot send back from a worker process in the captured log (ours are
    escaped: tests/unit/test_printable.py)."""
    caplog.set_level(logging.CRITICAL, logger="celery.app.trace")


def test_a_failure_with_a_lone_surrogate_is_stored_escaped(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    _quiet_celery_trace(caplog)
    app = make_app(task_always_eager=True, task_eager_propagates=False)

    @tracked_task(app=app, bind=True, shared=False, max_attempts=1)
    def read_upload(self: Any, name: str) -> None:
        path = os.fsdecode(bytes.fromhex(name))
        self.set_progress(10, stage=f"reading {path}")
        self.log(f"opening {path}")
        raise ValueError(f"bad file {path}")

    result = read_upload.apply(args=(b"/tmp/x\xff.pdf".hex(),))
    tracker = tracker_of(app)
    job = tracker.get_job(result.id)
    assert job is not None and job.status is JobStatus.FAILED, job
    assert (job.error_type, job.error_message) == ("ValueError", "bad file /tmp/x\\udcff.pdf")
    assert job.stage == "reading /tmp/x\\udcff.pdf"
    messages = [e.message or "" for e in tracker.history(result.id)]
    assert "opening /tmp/x\\udcff.pdf" in messages, messages


@pytest.fixture
def maria_app(mariadb_url: str, redis_url: str) -> Iterator[Celery]:
    upgrade(mariadb_url)
    app = Celery("unstorable_maria", broker=redis_url, set_as_current=False)
    app.conf.update(tracked_database_url=mariadb_url, tracked_redis_url=redis_url)
    app.conf.update(broker_connection_retry_on_startup=False, task_always_eager=True)
    app.conf.update(task_eager_propagates=False)
    yield app
    tracker_of(app).close()
    app.close()


def test_the_same_on_mariadb(maria_app: Celery, caplog: pytest.LogCaptureFixture) -> None:
    _quiet_celery_trace(caplog)

    @tracked_task(app=maria_app, bind=True, shared=False, max_attempts=1)
    def read_upload(self: Any, name: str, api_token: str) -> None:
        path = os.fsdecode(bytes.fromhex(name))
        self.set_progress(10, stage=f"reading {path}")
        self.log(f"opening {path}")
        raise ValueError(f"bad file {path}")

    result = read_upload.apply(args=(b"/tmp/x\xff.pdf".hex(), "tok-very-secret-1"))
    tracker = tracker_of(maria_app)
    job = tracker.get_job(result.id)
    assert job is not None and job.status is JobStatus.FAILED, job
    assert (job.error_type, job.error_message) == ("ValueError", "bad file /tmp/x\\udcff.pdf")
    assert job.stage == "reading /tmp/x\\udcff.pdf"
    messages = [e.message or "" for e in tracker.history(result.id)]
    assert "opening /tmp/x\\udcff.pdf" in messages, messages
    assert "UPDATE" not in caplog.text and "tok-very-secret-1" not in caplog.text
