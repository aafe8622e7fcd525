"""A rate-limited task in eager mode (issue 12, item 5): a delivery that must wait for the
global limiter waits in the caller's process, one attempt, no re-publish (Celery's eager
retry would run it again at once, recursing until the slot came: ``RecursionError``)."""

from __future__ import annotations

import time

import pytest

from celery_tracked import JobStatus, tracked_task

from .conftest import AppFactory, tracker_of

INTERVAL_MS = 3000


@pytest.mark.parametrize("propagates", [False, True])
def test_an_eager_limited_call_waits_in_process_for_its_start(
    make_app: AppFactory, propagates: bool
) -> None:
    app = make_app(task_always_eager=True, task_eager_propagates=propagates)
    app.conf.tracked_redis_url = "memory://"  # the in-process limiter: its first start is free

    @tracked_task(app=app, rate_limit_global=("eager-ai", INTERVAL_MS))
    def call_provider(n: int) -> float:
        return time.time()

    first = call_provider.delay(1)
    second = call_provider.delay(2)
    gap_ms = (second.get() - first.get()) * 1000
    assert INTERVAL_MS - 5 <= gap_ms < INTERVAL_MS + 1000
    job = tracker_of(app).get_job(second.id)
    assert job is not None and job.status is JobStatus.COMPLETED and job.attempts_made == 1
    assert [e.event for e in tracker_of(app).history(second.id)] == [
        "enqueued",
        "started",
        "completed",
    ]
