"""Bad input gets a typed error before anything is created; ids may be ``uuid.UUID``
(issue 6, item 7). PostgreSQL and SQLite, real Redis as broker and guard."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
import redis

from celery_tracked import (
    ConfigurationError,
    InvalidFilter,
    InvalidPayload,
    InvalidPriority,
    JobFailed,
    JobStatus,
    PayloadNotSerializable,
    Unrecoverable,
    tracked_task,
)
from celery_tracked.core.codec import MAX_DEPTH

from .conftest import AppFactory, guard_keys, queue_messages, tracker_of
from .test_enqueue import row_count


def test_uuid_objects_are_accepted_wherever_an_id_is_expected(make_app: AppFactory) -> None:
    app = make_app()

    @tracked_task(app=app, shared=False)
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
    ({}, {"priority": "high"}, InvalidPriority),  # every bad priority (the new-user trial)
    ({}, {"priority": -1}, InvalidPriority),
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

    @tracked_task(app=app, queue=QUEUE, idempotency_key="k:{x}", shared=False)
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

    @tracked_task(app=app, shared=False)
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

    @tracked_task(app=app, queue="vq", validator=check, shared=False)
    def ocr(document_id: str, pages: int, api_token: str) -> None: ...

    with pytest.raises(InvalidPayload) as info:
        ocr.enqueue("d-1", 0, api_token="tok-secret-1")
    assert "tok-secret-1" not in str(info.value) and "may not ask for 0" in str(info.value)
    assert row_count(database_url) == 0 and queue_messages(broker, "vq") == []
    assert ocr.enqueue("d-1", 2, api_token="tok-secret-1").created
    assert seen[-1] == {"document_id": "d-1", "pages": 2, "api_token": "tok-secret-1"}
    assert row_count(database_url) == 1


def _nested(depth: int, kind: str) -> Any:
    """A value ``depth`` containers deep (``kind``: list or dict), or one holding itself."""
    if kind == "self":
        looped: list[Any] = [1]
        looped.append(looped)
        return looped
    if kind == "self-dict":
        looping: dict[str, Any] = {"a": 1}
        looping["b"] = looping
        return looping
    value: Any = "leaf"
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


CALLS = {
    "enqueue": lambda task, value: task.enqueue(value, password="pw-secret-9"),
    "delay": lambda task, value: task.delay(value, password="pw-secret-9"),
    "apply_async": lambda task, value: task.apply_async((value,), {"password": "pw-secret-9"}),
    "apply": lambda task, value: task.apply((value,), {"password": "pw-secret-9"}),
}


NESTED = [
    (900, "list"),
    (900, "dict"),
    (5000, "list"),
    (5000, "dict"),
    (0, "self"),
    (0, "self-dict"),
]


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("eager", [False, True], ids=["broker", "eager"])
def test_deeply_nested_or_circular_arguments_are_a_typed_refusal(
    make_app: AppFactory, broker: redis.Redis, database_url: str, call: str, eager: bool
) -> None:
    """Issue 12 item 9: arguments ~900 (and 5000) levels deep, or holding themselves, are
    ``PayloadNotSerializable`` (not a bare ``RecursionError``) before anything is created,
    whatever the way of calling; the error names the argument and never the secret."""
    app = make_app(task_always_eager=eager)

    @tracked_task(app=app, queue=QUEUE, idempotency_key="k:{doc}", shared=False)
    def work(doc: Any, password: str) -> None: ...

    for depth, kind in NESTED:
        with pytest.raises(PayloadNotSerializable, match="argument 'doc'") as raised:
            CALLS[call](work, _nested(depth, kind))
        assert "pw-secret-9" not in str(raised.value)
        assert row_count(database_url) == 0
        assert queue_messages(broker, QUEUE) == [] and guard_keys(broker) == []


def test_arguments_nested_to_the_limit_are_accepted_and_run_eagerly(
    make_app: AppFactory, database_url: str
) -> None:
    """The limit (``codec.MAX_DEPTH``, 100 levels per argument) is usable end to end: the
    row's payload, the reprs and the result; a result nested too deep fails its job with
    ``Unrecoverable`` (not a ``RecursionError`` retried as if the body had failed)."""
    app = make_app(task_always_eager=True)

    @tracked_task(app=app, shared=False)
    def echo(doc: Any) -> Any:
        return doc

    @tracked_task(app=app, shared=False)
    def deep_result(depth: int) -> Any:
        return _nested(depth, "list")

    doc = _nested(MAX_DEPTH, "dict")
    assert echo.delay(doc).get() == doc
    with pytest.raises(PayloadNotSerializable, match=f"more than {MAX_DEPTH} levels"):
        echo.delay(_nested(MAX_DEPTH + 1, "dict"))
    assert row_count(database_url) == 1
    tracker = tracker_of(app)
    failed = tracker.get_job(deep_result.delay(5000).id)  # a result too deep to store
    assert failed is not None and failed.status is JobStatus.FAILED
    assert failed.error_type == "Unrecoverable" and "nested" in str(failed.error_message)


def test_a_retry_given_deeply_nested_arguments_is_a_typed_refusal(
    make_app: AppFactory, database_url: str
) -> None:
    """``Tracker.retry(arguments=...)`` walks the values it is given too."""
    app = make_app(task_always_eager=True)

    @tracked_task(app=app, max_attempts=1, shared=False)
    def login(user: str, password: Any) -> None:
        raise Unrecoverable("no")

    job_id = login.enqueue("u", password="pw").job_id  # failed at once (eager)
    tracker = tracker_of(app)
    for value in (_nested(900, "list"), _nested(5000, "dict"), _nested(0, "self")):
        with pytest.raises(PayloadNotSerializable):
            tracker.retry(job_id, arguments={"password": value})
    job = tracker.get_job(job_id)
    assert job is not None and job.status is JobStatus.FAILED


@pytest.mark.parametrize(
    "conf",
    [
        {"tracked_lease_seconds": 1e12},
        {"tracked_progress_interval_ms": 1e20},
        {"tracked_relay_interval_seconds": 0.001},
        {"tracked_redact_keys": []},
    ],
    ids=["lease", "progress", "relay", "no-redact-keys"],
)
def test_a_setting_out_of_range_is_refused_at_the_first_enqueue_with_nothing_created(
    make_app: AppFactory, broker: redis.Redis, database_url: str, conf: dict[str, Any]
) -> None:
    """Issue 12 item 10: these were accepted (the first two then killed the lease-renewal
    and progress threads; an empty list silently turned redaction off)."""
    app = make_app(**conf)

    @tracked_task(app=app, queue=QUEUE, shared=False)
    def work(x: int, password: str) -> None: ...

    with pytest.raises(ConfigurationError) as raised:
        work.enqueue(1, password="pw-secret-9")
    assert raised.value.setting == next(iter(conf))
    assert row_count(database_url) == 0 and queue_messages(broker, QUEUE) == []


def test_redaction_turned_off_explicitly_stores_and_shows_arguments_as_given(
    make_app: AppFactory, broker: redis.Redis, database_url: str
) -> None:
    app = make_app(tracked_redaction=False)

    @tracked_task(app=app, queue=QUEUE, shared=False)
    def work(x: int, password: str) -> None: ...

    job_id = work.enqueue(1, password="pw-given-9").job_id
    job = tracker_of(app).get_job(job_id)
    assert job is not None and job.payload == {"args": [1], "kwargs": {"password": "pw-given-9"}}
    (message,) = queue_messages(broker, QUEUE)
    assert "pw-given-9" in json.loads(message)["headers"]["kwargsrepr"]  # Flower shows it


SECRET = "s3cr3t-" * 45  # 315 characters: any key built from it is too long


def _raises_with(user: str, password: str) -> str:
    raise ValueError(f"no tenant in {password}")


@pytest.mark.parametrize("option", ["idempotency_key", "concurrency_key"])
@pytest.mark.parametrize(
    ("template", "password", "expected"),
    [
        ("k:{password}", SECRET, "is 317 characters long, over the limit of 255"),
        ("k:{password}", "s3cr3t-\x00-tail", "holds a NUL byte"),
        (_raises_with, "s3cr3t-x", "ValueError: no tenant in ***"),
    ],
    ids=["too-long", "nul", "callable-raises"],
)
def test_an_error_about_a_key_never_echoes_the_secret_it_was_built_from(
    make_app: AppFactory,
    broker: redis.Redis,
    database_url: str,
    option: str,
    template: Any,
    password: str,
    expected: str,
) -> None:
    """Issue 12 item 11: the message names the option, the template and the length, never
    the key (the secret argument, under a name in ``tracked_redact_keys``)."""
    app = make_app()

    @tracked_task(app=app, queue=QUEUE, shared=False, **{option: template})
    def login(user: str, password: str) -> None: ...

    with pytest.raises(InvalidPayload) as raised:
        login.enqueue("ann", password=password)
    message = str(raised.value)
    assert "s3cr3t" not in message and expected in message and option in message
    if isinstance(template, str):
        assert repr(template) in message
    assert row_count(database_url) == 0
    assert queue_messages(broker, QUEUE) == [] and guard_keys(broker) == []


def test_a_per_call_key_too_long_is_not_echoed_either(
    make_app: AppFactory, broker: redis.Redis, database_url: str
) -> None:
    app = make_app()

    @tracked_task(app=app, queue=QUEUE, shared=False)
    def login(user: str) -> None: ...

    with pytest.raises(InvalidPayload) as raised:
        login.enqueue("ann", _idempotency_key=SECRET)
    assert "s3cr3t" not in str(raised.value) and "315 characters" in str(raised.value)
    assert row_count(database_url) == 0 and guard_keys(broker) == []


@pytest.mark.parametrize("now", [dt.datetime(2030, 1, 1), "2030-01-01T00:00:00Z", 0])
@pytest.mark.parametrize(
    "call", ["relay", "schedule", "reap", "cleanup", "probe", "run_maintenance"]
)
def test_a_maintenance_pass_given_a_bad_now_is_a_typed_refusal(
    make_app: AppFactory, database_url: str, call: str, now: Any
) -> None:
    """``now=`` (a naive datetime, a string, a number) is refused with ``InvalidFilter``
    naming it, before the pass reads or writes anything: not a ``TypeError`` from the
    arithmetic, nor a ``StoreError`` from the driver (the issue 26 trial)."""
    app = make_app()

    @tracked_task(app=app, shared=False)
    def held(x: int) -> None: ...

    held.apply_async(args=(1,), countdown=3600)  # a held row a pass would look at
    tracker = tracker_of(app)
    run = (
        (lambda: tracker.run_maintenance("schedule", now=now))
        if call == "run_maintenance"
        else (lambda: getattr(tracker, call)(now=now))
    )
    with pytest.raises(InvalidFilter, match=r"^now: "):
        run()
    assert row_count(database_url) == 1
