"""Bad input gets a typed error before anything is created; ids may be ``uuid.UUID``
(issue 6, item 7). PostgreSQL and SQLite, real Redis as broker and guard."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
import redis

from celery_tracked import InvalidPayload, JobFailed, JobStatus, tracked_task

from .conftest import AppFactory, guard_keys, queue_messages, tracker_of
from .test_enqueue import row_count


def test_uuid_objects_are_accepted_wherever_an_id_is_expected(make_app: AppFactory) -> None:
    app = make_app()

    @tracked_task(app=app)
    def noop(x: int) -> None: ...

    tracker = tracker_of(app)
    parent = uuid.uuid4()
    job_uuid = uuid.uuid4()
    noop.enqueue(1, _options={"task_id": str(parent)})
    result = noop.enqueue(2, _parent_job_id=parent, _options={"task_id": job_uuid})
    assert result.job_id == str(job_uuid)
    other = noop.apply_async((3,), task_id=uuid.uuid4(), parent_job_id=parent)
    assert tracker.get_job(other.id) is not None

    job = tracker.get_job(job_uuid)
    assert job is not None and job.id == str(job_uuid) and job.parent_job_id == str(parent)
    assert [e.event for e in tracker.history(job_uuid)] == ["enqueued"]
    assert tracker.cancel(job_uuid)
    with pytest.raises(JobFailed):
        tracker.wait(job_uuid, timeout=2)
    assert tracker.get_job(uuid.uuid4()) is None


@pytest.mark.parametrize("method", ["get_job", "history", "cancel", "wait"])
def test_an_id_of_another_type_is_a_type_error_naming_the_argument(
    make_app: AppFactory, method: str
) -> None:
    tracker = tracker_of(make_app())
    with pytest.raises(TypeError, match="job_id"):
        getattr(tracker, method)(12345)
    with pytest.raises(InvalidPayload, match="job_id"):
        getattr(tracker, method)("a\x00b")


QUEUE = "refused_q"
LATER = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)

#: (control keywords of ``enqueue``, Celery options, expected error)
REFUSED: list[tuple[dict[str, Any], dict[str, Any], type[Exception]]] = [
    ({}, {"queue": "q" * 201}, InvalidPayload),
    ({}, {"queue": "q\x00"}, InvalidPayload),
    ({"_idempotency_key": "k\x00ey"}, {}, InvalidPayload),
    ({"_correlation_id": "c\x00"}, {}, InvalidPayload),
    ({"_owner_id": "owner\x00"}, {}, InvalidPayload),
    ({"_parent_job_id": "p\x00"}, {}, InvalidPayload),
    ({}, {"task_id": "id\x00"}, InvalidPayload),
    ({"_max_attempts": 2**40}, {}, InvalidPayload),
    ({"_max_attempts": 2**31}, {}, InvalidPayload),
    ({}, {"countdown": "abc"}, TypeError),
    ({}, {"countdown": float("nan")}, InvalidPayload),
    ({}, {"countdown": 10**12}, InvalidPayload),
    ({}, {"eta": "tomorrow"}, InvalidPayload),
    ({}, {"eta": 5}, TypeError),
    ({}, {"expires": "soon"}, InvalidPayload),
    ({}, {"expires": [1]}, TypeError),
    ({}, {"priority": "high"}, TypeError),
]


@pytest.mark.parametrize(("control", "options", "error"), REFUSED)
def test_bad_input_is_refused_with_nothing_created(
    make_app: AppFactory,
    broker: redis.Redis,
    database_url: str,
    control: dict[str, Any],
    options: dict[str, Any],
    error: type[Exception],
) -> None:
    app = make_app()

    @tracked_task(app=app, queue=QUEUE, idempotency_key="k:{x}")
    def work(x: int) -> None: ...

    with pytest.raises(error) as raised:
        work.enqueue(1, **control, _options=options)
    assert isinstance(raised.value, InvalidPayload | TypeError)
    name = next(iter(control or options)).lstrip("_")
    assert name in str(raised.value)
    assert row_count(database_url) == 0
    assert queue_messages(broker, QUEUE) == [] and queue_messages(broker, "q" * 201) == []
    assert guard_keys(broker) == []


def test_the_largest_values_the_columns_hold_are_accepted(
    make_app: AppFactory, broker: redis.Redis, database_url: str
) -> None:
    app = make_app()

    @tracked_task(app=app)
    def work(x: int) -> None: ...

    queue = "q" * 200
    result = work.enqueue(
        1,
        _max_attempts=2**31 - 1,
        _options={"queue": queue, "countdown": 1.5, "expires": LATER.isoformat()},
    )
    job = tracker_of(app).get_job(result.job_id)
    assert job is not None and job.status is JobStatus.PENDING
    assert (job.queue_name, job.max_attempts) == (queue, 2**31 - 1)
    assert len(queue_messages(broker, queue)) == 1


def test_a_validator_function_receives_the_named_arguments_as_one_dict(
    make_app: AppFactory, broker: redis.Redis, database_url: str
) -> None:
    """Item 8: a callable validator gets one dict (as a pydantic model does); its refusal
    is an ``InvalidPayload`` with the secret masked, and nothing is created."""
    app = make_app()
    seen: list[dict[str, Any]] = []

    def check(arguments: dict[str, Any]) -> None:
        seen.append(dict(arguments))
        if arguments["pages"] < 1:
            raise ValueError(f"{arguments['api_token']} may not ask for {arguments['pages']}")

    @tracked_task(app=app, queue="vq", validator=check)
    def ocr(document_id: str, pages: int, api_token: str) -> None: ...

    with pytest.raises(InvalidPayload) as info:
        ocr.enqueue("d-1", 0, api_token="tok-secret-1")
    assert "tok-secret-1" not in str(info.value) and "may not ask for 0" in str(info.value)
    assert row_count(database_url) == 0 and queue_messages(broker, "vq") == []
    assert ocr.enqueue("d-1", 2, api_token="tok-secret-1").created
    assert seen[-1] == {"document_id": "d-1", "pages": 2, "api_token": "tok-secret-1"}
    assert row_count(database_url) == 1
