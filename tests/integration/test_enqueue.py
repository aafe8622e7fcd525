"""Producer side against real Redis and real databases (PostgreSQL and SQLite)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pydantic
import pytest
import redis
from sqlalchemy import create_engine, func, select

from celery_tracked import (
    ArgumentsMismatch,
    ConfigurationError,
    EnqueueError,
    InvalidPayload,
    JobStatus,
    PayloadNotSerializable,
    PayloadTooLarge,
    tracked_task,
)
from celery_tracked.store.models import jobs

from .conftest import AppFactory, guard_keys, queue_messages, tracker_of


def row_count(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(jobs)).scalar_one())
    finally:
        engine.dispose()


class Document(pydantic.BaseModel):
    document_id: str
    pages: int = 1


def test_enqueue_creates_pending_row_and_one_message(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    """FEAT-33-01."""
    app = make_app()

    @tracked_task(app=app, queue="ocr_queue", job_type="ocr")
    def ocr(document_id: str) -> None: ...

    result = ocr.enqueue(document_id="d-1")
    assert result.status is JobStatus.PENDING and result.created
    job = tracker_of(app).get_job(result.job_id)
    assert job is not None and job.status is JobStatus.PENDING
    assert (job.queue_name, job.job_type, job.celery_task_id) == ("ocr_queue", "ocr", job.id)
    messages = queue_messages(broker, "ocr_queue")
    assert len(messages) == 1
    headers = json.loads(messages[0])["headers"]
    assert headers["id"] == result.job_id
    assert headers["tracked_job_id"] == result.job_id


def test_delay_and_apply_async_return_the_job_id(make_app: AppFactory) -> None:
    app = make_app()

    @tracked_task(app=app)
    def send(to: str) -> None: ...

    async_result = send.delay("a@b.c")
    assert tracker_of(app).get_job(async_result.id) is not None
    again = send.apply_async(kwargs={"to": "x"}, idempotency_key="k1", owner_id="u1")
    job = tracker_of(app).get_job(again.id)
    assert job is not None and job.idempotency_key == "k1" and job.owner_id == "u1"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"document_id": 5, "pages": "many"}, InvalidPayload),  # schema
        ({"document_id": "d", "pages": 1, "blob": {1, 2}}, PayloadNotSerializable),
        ({"document_id": "x" * 70_000}, PayloadTooLarge),
        ({"pages": 2}, ArgumentsMismatch),  # missing required argument
    ],
)
def test_invalid_payload_leaves_nothing_behind(
    make_app: AppFactory,
    broker: redis.Redis,
    database_url: str,
    kwargs: dict[str, Any],
    error: type[Exception],
) -> None:
    """FEAT-33-04: typed error; no row, no message, no guard key."""
    app = make_app()

    @tracked_task(app=app, queue="ocr_queue", validator=Document, idempotency_key="o:{pages}")
    def ocr(document_id: str = "", pages: int = 1, **extra: Any) -> None: ...

    if "document_id" not in kwargs:

        @tracked_task(app=app, queue="ocr_queue", name="strict")
        def strict(document_id: str, pages: int) -> None: ...

        with pytest.raises(error):
            strict.enqueue(**kwargs)
    else:
        with pytest.raises(error):
            ocr.enqueue(**kwargs)
    assert row_count(database_url) == 0
    assert queue_messages(broker, "ocr_queue") == []
    assert guard_keys(broker) == []


def test_same_key_twice_gives_one_job_and_one_message(
    make_app: AppFactory, broker: redis.Redis, database_url: str
) -> None:
    """FEAT-33-08 (producer half)."""
    app = make_app()

    @tracked_task(app=app, queue="q", idempotency_key="ocr:{document_id}")
    def ocr(document_id: str) -> None: ...

    first = ocr.enqueue(document_id="d-1")
    second = ocr.enqueue(document_id="d-1")
    third = ocr.apply_async(kwargs={"document_id": "d-1"})
    assert second == (first.job_id, JobStatus.PENDING, False)
    assert third.id == first.job_id
    assert row_count(database_url) == 1
    assert len(queue_messages(broker, "q")) == 1


def test_duplicate_found_by_the_database_when_the_guard_key_expired(
    make_app: AppFactory, broker: redis.Redis, database_url: str
) -> None:
    app = make_app()

    @tracked_task(app=app, queue="q", idempotency_key="k:{n}")
    def work(n: int) -> None: ...

    first = work.enqueue(n=1)
    broker.delete(*guard_keys(broker))  # as if evicted or expired
    again = work.enqueue(n=1)
    assert again == (first.job_id, JobStatus.PENDING, False)
    assert row_count(database_url) == 1
    assert len(queue_messages(broker, "q")) == 1
    assert guard_keys(broker) == [], "the losing producer released its own token"


def test_redis_down_raises_enqueue_error_and_leaves_nothing(
    make_app: AppFactory,
    broker: redis.Redis,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """FEAT-33-05 (Redis): retryable EnqueueError, no credentials in error or logs."""
    app = make_app(tracked_redis_url="redis://:hunter2pw@127.0.0.1:1/0")

    @tracked_task(app=app, queue="q", idempotency_key="k:{n}")
    def work(n: int) -> None: ...

    caplog.set_level(logging.DEBUG)
    with pytest.raises(EnqueueError) as info:
        work.enqueue(n=1)
    assert info.value.retryable
    assert "hunter2pw" not in str(info.value)
    assert "hunter2pw" not in caplog.text
    assert row_count(database_url) == 0
    assert queue_messages(broker, "q") == []


def test_broker_down_raises_enqueue_error_and_leaves_nothing(
    make_app: AppFactory,
    broker: redis.Redis,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """FEAT-33-05 (broker): the row is removed and the guard key released."""
    app = make_app(broker="redis://:brokerpw@127.0.0.1:1/0")

    @tracked_task(app=app, queue="q", idempotency_key="k:{n}")
    def work(n: int, password: str) -> None: ...

    caplog.set_level(logging.DEBUG)
    with pytest.raises(EnqueueError) as info:
        work.enqueue(n=1, password="canary-pw-1")
    assert "brokerpw" not in str(info.value) and "brokerpw" not in caplog.text
    assert "canary-pw-1" not in caplog.text
    assert row_count(database_url) == 0
    assert guard_keys(broker) == []


def test_database_down_raises_enqueue_error_and_releases_the_guard(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    app = make_app(tracked_database_url="postgresql+psycopg://u:dbpw@127.0.0.1:1/x")

    @tracked_task(app=app, queue="q", idempotency_key="k:{n}")
    def work(n: int) -> None: ...

    with pytest.raises(EnqueueError) as info:
        work.enqueue(n=1)
    assert "dbpw" not in str(info.value)
    assert guard_keys(broker) == []
    assert queue_messages(broker, "q") == []


def test_payload_is_redacted_everywhere_on_the_producer_side(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    app = make_app()

    @tracked_task(app=app, queue="q")
    def login(user: str, password: str) -> None: ...

    result = login.enqueue("ann", "canary-secret-42")
    job = tracker_of(app).get_job(result.job_id)
    assert job is not None and job.payload_json is not None
    assert "canary-secret-42" not in job.payload_json
    assert job.payload == {"args": ["ann", "[redacted]"], "kwargs": {}}
    headers = json.loads(queue_messages(broker, "q")[0])["headers"]
    assert "canary-secret-42" not in headers["argsrepr"] + headers["kwargsrepr"]
    assert "canary-secret-42" not in repr(job)


def test_get_job_repr_hides_payload_and_result(make_app: AppFactory) -> None:
    """FEAT-33-11."""
    app = make_app()

    @tracked_task(app=app, queue="q")
    def work(document: str) -> None: ...

    result = work.enqueue(document="private content")
    job = tracker_of(app).get_job(result.job_id)
    assert job is not None
    assert "private content" not in repr(job)
    assert job.created_at is not None and job.started_at is None
    assert (job.attempts_made, job.max_attempts) == (0, 3)
    assert tracker_of(app).get_job("00000000-0000-0000-0000-000000000000") is None


def test_lineage_from_the_calling_task(make_app: AppFactory) -> None:
    app = make_app()

    @tracked_task(app=app, queue="q")
    def child(n: int) -> None: ...

    root = child.enqueue(n=0, _correlation_id="corr-1")
    job = tracker_of(app).get_job(root.job_id)
    assert job is not None and job.correlation_id == "corr-1" and job.parent_job_id is None


@pytest.mark.parametrize(
    "control",
    [
        {"correlation_id": "c" * 65},
        {"owner_id": "o" * 256},
        {"parent_job_id": "p" * 37},
        {"task_id": "t" * 37},
        {"max_attempts": 0},
    ],
)
def test_control_values_the_row_cannot_hold_are_refused(
    make_app: AppFactory, broker: redis.Redis, database_url: str, control: dict[str, Any]
) -> None:
    app = make_app()

    @tracked_task(app=app, queue="q", idempotency_key="k:{n}")
    def work(n: int) -> None: ...

    with pytest.raises(InvalidPayload):
        work.apply_async(kwargs={"n": 1}, **control)
    assert row_count(database_url) == 0
    assert queue_messages(broker, "q") == []
    assert guard_keys(broker) == []


def test_a_key_callable_that_raises_is_invalid_payload(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    app = make_app()

    def key(n: int) -> str:
        raise LookupError("no such customer")

    @tracked_task(app=app, queue="q", idempotency_key=key)
    def work(n: int) -> None: ...

    with pytest.raises(InvalidPayload):
        work.enqueue(1)
    assert guard_keys(broker) == []


def test_cancel_a_waiting_job(make_app: AppFactory) -> None:
    app = make_app()

    @tracked_task(app=app, queue="q")
    def work() -> None: ...

    job_id = work.enqueue().job_id
    tracker = tracker_of(app)
    assert tracker.cancel(job_id, reason="user asked")
    job = tracker.get_job(job_id)
    assert job is not None and job.status is JobStatus.CANCELLED
    assert not tracker.cancel(job_id), "a cancelled job cannot be cancelled again"
    assert [e.event for e in tracker.history(job_id)] == ["enqueued", "cancelled"]


def test_bad_redis_url_is_a_configuration_error(make_app: AppFactory) -> None:
    app = make_app(tracked_redis_url="redis://127.0.0.1:notaport/0")
    with pytest.raises(ConfigurationError) as info:
        tracker_of(app)
    assert info.value.setting == "tracked_redis_url"


def test_arguments_that_do_not_fit_are_a_type_error_unless_typing_is_off(
    make_app: AppFactory, broker: redis.Redis, database_url: str
) -> None:
    """As Celery: a call its signature cannot bind raises ``TypeError`` (our
    ``ArgumentsMismatch``, also an ``InvalidPayload``) before anything is created; a task
    declared ``typing=False`` is not checked (its body meets the arguments on the worker)."""
    app = make_app()

    @tracked_task(app=app, queue="typed_q")
    def typed(x: int) -> None: ...

    @tracked_task(app=app, queue="untyped_q", typing=False)
    def untyped(x: int) -> None: ...

    for call in (lambda: typed.delay(), lambda: typed.apply_async((1, 2))):
        with pytest.raises(TypeError) as raised:
            call()
        assert isinstance(raised.value, ArgumentsMismatch | InvalidPayload)
    assert queue_messages(broker, "typed_q") == [] and guard_keys(broker) == []
    assert row_count(database_url) == 0

    result = untyped.apply_async((1, 2), {"y": 3})
    job = tracker_of(app).get_job(result.id)
    assert job is not None and job.payload == {"args": [1, 2], "kwargs": {"y": 3}}
    assert len(queue_messages(broker, "untyped_q")) == 1
