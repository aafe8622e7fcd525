"""One way to build a :class:`~celery_tracked.jobs.Job` for the pure-logic tests."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from celery_tracked.core.jobs import Job, JobStatus

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)

_BASE = Job(
    id="j-1",
    queue_name="q",
    job_type="t",
    task_name="app.t",
    celery_task_id="j-1",
    status=JobStatus.PENDING,
    attempts_made=0,
    max_attempts=3,
    idempotency_key=None,
    correlation_id="j-1",
    parent_job_id=None,
    owner_id=None,
    progress=0,
    stage=None,
    worker=None,
    error_type=None,
    error_message=None,
    created_at=NOW,
    started_at=None,
    finished_at=None,
    updated_at=NOW,
)


def a_job(**changes: Any) -> Job:
    """A pending job ``j-1`` created at :data:`NOW`, with ``changes`` applied."""
    return replace(_BASE, **changes)
