"""Runs in the caller's process: ``task_always_eager`` and ``apply()`` are tracked.

A tracked ``.delay()`` in eager mode returns Celery's ``EagerResult``, the body's own
exception propagates with ``task_eager_propagates``, retries run inline, and the row
(never deleted) reads ``completed``/``failed`` with its events.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from celery import Celery
from celery.result import EagerResult

from celery_tracked import JobStatus, tracked_task

from .conftest import AppFactory, queue_messages, tracker_of


class Boom(Exception):
    pass


def events(app: Celery, job_id: str) -> list[tuple[str, str]]:
    return [(e.event, e.status.value) for e in tracker_of(app).history(job_id)]


def eager_app(make_app: AppFactory, propagates: bool = True) -> Celery:
    return make_app(task_always_eager=True, task_eager_propagates=propagates)


def test_eager_delay_returns_the_value_and_the_row_completes(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    app = eager_app(make_app)

    @tracked_task(app=app, queue="eager_q")
    def add(x: int, y: int) -> int:
        return x + y

    result = add.delay(2, 3)
    assert isinstance(result, EagerResult)
    assert result.get() == 5
    job = tracker_of(app).get_job(result.id)
    assert job is not None and job.status is JobStatus.COMPLETED
    assert (job.result, job.attempts_made, job.published_at is not None) == (5, 1, True)
    assert events(app, result.id) == [
        ("enqueued", "pending"),
        ("started", "processing"),
        ("completed", "completed"),
    ]
    assert queue_messages(broker, "eager_q") == []  # nothing went to the broker
    assert add.apply_async((1, 1), idempotency_key="k").get() == 2


def test_eager_failure_raises_the_bodys_own_exception_and_keeps_the_row(
    make_app: AppFactory,
) -> None:
    app = eager_app(make_app)
    calls: list[str] = []

    @tracked_task(app=app, bind=True)  # the default: 3 attempts, run inline one by one
    def fail(self: Any, name: str) -> None:
        calls.append(self.request.id)
        raise Boom(f"no {name}")

    started = time.monotonic()
    with pytest.raises(Boom, match="no j-1"):
        fail.delay("j-1")
    assert time.monotonic() - started < 5  # inline retries do not wait for a backoff
    assert len(calls) == 3 and len(set(calls)) == 1
    job = tracker_of(app).get_job(calls[0])
    assert job is not None and job.status is JobStatus.FAILED
    assert (job.attempts_made, job.error_type) == (3, "Boom")
    assert events(app, job.id) == [
        ("enqueued", "pending"),
        ("started", "processing"),
        ("retrying", "retrying"),
        ("started", "processing"),
        ("retrying", "retrying"),
        ("started", "processing"),
        ("failed", "failed"),
    ]


def test_eager_failure_without_propagation_is_a_failed_eager_result(
    make_app: AppFactory,
) -> None:
    app = eager_app(make_app, propagates=False)

    @tracked_task(app=app, max_attempts=1)
    def fail() -> None:
        raise Boom("once")

    result = fail.delay()
    assert isinstance(result, EagerResult) and result.failed()
    assert isinstance(result.get(propagate=False), Boom)
    job = tracker_of(app).get_job(result.id)
    assert job is not None and job.status is JobStatus.FAILED
    assert [e for e, _ in events(app, result.id)] == ["enqueued", "started", "failed"]


@pytest.mark.parametrize("propagates", [True, False])
def test_eager_retries_run_inline_until_the_job_completes(
    make_app: AppFactory, propagates: bool
) -> None:
    app = eager_app(make_app, propagates)
    calls: list[int] = []

    @tracked_task(app=app, max_attempts=3, backoff_ms=10_000)
    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("not yet")
        return "done"

    started = time.monotonic()
    result = flaky.delay()
    assert result.get() == "done" and time.monotonic() - started < 5
    job = tracker_of(app).get_job(result.id)
    assert job is not None and job.status is JobStatus.COMPLETED
    assert (job.attempts_made, job.result) == (3, "done")
    assert [e for e, _ in events(app, result.id)] == [
        "enqueued",
        *["started", "retrying"] * 2,
        "started",
        "completed",
    ]


def test_eager_self_retry_runs_inline(make_app: AppFactory) -> None:
    app = eager_app(make_app)

    @tracked_task(app=app, bind=True, max_attempts=2)
    def once_more(self: Any) -> int:
        if self.request.retries == 0:
            raise self.retry(countdown=60)
        return int(self.request.retries)

    result = once_more.delay()
    assert result.get() == 1
    job = tracker_of(app).get_job(result.id)
    assert job is not None and (job.status, job.attempts_made) == (JobStatus.COMPLETED, 2)


def test_apply_is_tracked(make_app: AppFactory, broker: redis.Redis) -> None:
    app = make_app()  # not eager: apply() runs here anyway

    @tracked_task(app=app, queue="apply_q")
    def add(x: int, y: int) -> int:
        return x + y

    @tracked_task(app=app, max_attempts=1)
    def fail() -> None:
        raise Boom("applied")

    result = add.apply((2, 3))
    assert isinstance(result, EagerResult) and result.get() == 5
    job = tracker_of(app).get_job(result.id)
    assert job is not None and (job.status, job.result) == (JobStatus.COMPLETED, 5)
    assert [e for e, _ in events(app, result.id)] == ["enqueued", "started", "completed"]
    assert queue_messages(broker, "apply_q") == []

    failed = fail.apply()
    assert failed.failed() and isinstance(failed.result, Boom)
    job = tracker_of(app).get_job(failed.id)
    assert job is not None and job.status is JobStatus.FAILED
    with pytest.raises(Boom):
        fail.apply(throw=True)

    again = add.apply((2, 3), idempotency_key="same")
    duplicate = add.apply((4, 4), idempotency_key="same")
    assert (duplicate.id, duplicate.get()) == (again.id, 5)  # the existing job's outcome


def test_with_options_and_the_legacy_keywords_are_one_enqueue(make_app: AppFactory) -> None:
    app = eager_app(make_app)

    @tracked_task(app=app, queue="eager_q")
    def double(n: int) -> int:
        return 2 * n

    tracker = tracker_of(app)
    typed = double.with_options(idempotency_key="k", owner_id="u", max_attempts=2)(n=4)
    assert typed.created and tracker.wait(typed, timeout=10) == 8  # wait takes the result
    legacy = double.enqueue(n=5, _idempotency_key="k")  # type: ignore[call-arg]
    assert (legacy.job_id, legacy.created) == (typed.job_id, False)
    job = tracker.get_job(typed.job_id)
    assert job is not None and (job.owner_id, job.max_attempts) == ("u", 2)
