"""``apply_async`` as Celery's: its ``AsyncResult``, its ``argsrepr``/``kwargsrepr``
options, its own errors (issue 24, items 2, 5 and 7). Real Redis broker and backend."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis
from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout
from kombu.exceptions import SerializerNotInstalled
from sqlalchemy import create_engine, func, select

from celery_tracked import EnqueueError, tracked_task
from celery_tracked.store.models import jobs

from .conftest import AppFactory, guard_keys, queue_messages, tracker_of


def row_count(app: Celery) -> int:
    engine = create_engine(app.conf.tracked_database_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(jobs)).scalar_one())
    finally:
        engine.dispose()


def test_ignore_result_get_returns_none_at_once(make_app: AppFactory, redis_url: str) -> None:
    """As on plain Celery: ``.get()`` of an ignored result never waits."""
    app = make_app(result_backend=redis_url)

    @tracked_task(app=app, queue="q", autoretry_for=())
    def add(a: int, b: int) -> int:
        return a + b

    @tracked_task(app=app, queue="q", ignore_result=True, autoretry_for=())
    def quiet(a: int) -> int:
        return a

    started = time.monotonic()
    try:
        assert add.apply_async((1, 2), ignore_result=True).get(timeout=3) is None
        assert quiet.apply_async((1,)).get(timeout=3) is None
        assert quiet.delay(2).get(timeout=3) is None
    except CeleryTimeout:
        pytest.fail("get() of an ignored result waited for a result")
    assert time.monotonic() - started < 2


def test_apply_async_returns_the_result_celery_subscribed(
    make_app: AppFactory, redis_url: str
) -> None:
    """Celery's own ``AsyncResult``: its result subscription (opened before the publish)
    stays open; a duplicate gets one for the existing job."""
    app = make_app(result_backend=redis_url)

    @tracked_task(app=app, queue="q", idempotency_key="k:{n}")
    def work(n: int) -> int:
        return n

    result = work.apply_async((1,))
    assert result.id == tracker_of(app).get_job(result.id).id  # type: ignore[union-attr]
    assert app.backend.get_key_for_task(result.id) in app.backend.result_consumer.subscribed_to
    again = work.apply_async((1,), ignore_result=True)
    assert again.id == result.id and again.ignored
    assert again.get(timeout=3) is None


def message_headers(broker: redis.Redis, queue: str) -> list[dict[str, Any]]:
    """The queue's messages' headers, oldest first (Celery's Redis transport LPUSHes)."""
    return [json.loads(raw)["headers"] for raw in reversed(queue_messages(broker, queue))]


def test_argsrepr_and_kwargsrepr_options_are_the_callers_text(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    """Celery's call options: the caller's text is the message's ``argsrepr``/
    ``kwargsrepr``, a redacted argument's value masked in it."""
    app = make_app()

    @tracked_task(app=app, queue="q")
    def login(user: str, password: str) -> None: ...

    login.apply_async(("ann", "canary-pw-77"), argsrepr="(user ann)", kwargsrepr="{none}")
    login.s("bob", password="canary-pw-78").set(kwargsrepr="{password: canary-pw-78}").delay()
    login.apply_async(("cy", "canary-pw-79"))
    first, second, third = message_headers(broker, "q")
    assert (first["argsrepr"], first["kwargsrepr"]) == ("(user ann)", "{none}")
    assert second["kwargsrepr"] == "{password: ***}"  # masked as in error messages
    assert second["argsrepr"] == "('bob',)"
    assert third["argsrepr"] == "('cy', '[redacted]')"  # ours when none is given
    assert row_count(app) == 3


def test_the_callers_text_never_shows_a_secret_escaped(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    """A password holding a backslash, a quote, a tab or a non-ASCII letter is masked in the
    caller's ``argsrepr``/``kwargsrepr`` in its escaped forms too (``repr``, ``ascii``,
    JSON); a secret nested under a secret key leaves a well-formed text."""
    app = make_app()

    @tracked_task(app=app, queue="q")
    def login(user: str, password: str, token: Any = None) -> None: ...

    passwords = ["C:\\new\\pw", "x'y\"z", "tab\there", "p\xe4ssw\xf6rt-1"]
    for pw in passwords:
        login.apply_async(("u", pw), argsrepr=repr(("u", pw)))
        login.apply_async(("u", pw), argsrepr=ascii(("u", pw)))
        login.apply_async(("u", pw), argsrepr=json.dumps(["u", pw]))
    token = {"a": "nested-tok-1"}
    login.apply_async(("u", "pw-1"), {"token": token}, kwargsrepr=repr({"token": token}))
    sent = message_headers(broker, "q")
    for headers in sent[:-1]:
        assert headers["argsrepr"] in ("('u', '***')", '["u", "***"]'), headers["argsrepr"]
    assert sent[-1]["kwargsrepr"] == "{'token': {'a': '***'}}"


def test_a_call_celery_refuses_keeps_its_error_and_leaves_nothing(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    """Celery's own ``ValueError`` (a soft time limit above the hard one), not a
    retryable ``EnqueueError``; no row, no guard key, no message."""
    app = make_app()

    @tracked_task(app=app, queue="q", idempotency_key="k:{n}", soft_time_limit=10, time_limit=5)
    def work(n: int) -> None: ...

    for call in (lambda: work.apply_async((1,)), lambda: work.enqueue(n=1), lambda: work.delay(1)):
        with pytest.raises(ValueError, match="soft_time_limit") as info:
            call()
        assert not isinstance(info.value, EnqueueError)
        assert row_count(app) == 0
        assert guard_keys(broker) == []
        assert queue_messages(broker, "q") == []


def test_in_eager_mode_too_a_refused_call_leaves_nothing(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    """``task_always_eager``: Celery's ``apply_async`` refuses the call before it runs it
    here; the row made for it is undone, the key free again."""
    app = make_app(task_always_eager=True, task_eager_propagates=True)

    @tracked_task(app=app, queue="q", idempotency_key="k:{n}", soft_time_limit=10, time_limit=5)
    def work(n: int) -> int:
        return n

    for call in (lambda: work.apply_async((1,)), lambda: work.delay(1)):
        with pytest.raises(ValueError, match="soft_time_limit"):
            call()
        assert row_count(app) == 0
        assert guard_keys(broker) == []
    assert work.apply((2,)).get() == 2  # Celery's apply checks no time limit, as plain


def test_a_broker_failure_stays_a_retryable_enqueue_error(make_app: AppFactory) -> None:
    app = make_app(broker="redis://127.0.0.1:1/0")

    @tracked_task(app=app, queue="q")
    def work(n: int) -> None: ...

    with pytest.raises(EnqueueError, match="broker publish") as info:
        work.apply_async((1,), argsrepr="(1,)")
    assert info.value.retryable
    assert row_count(app) == 0


def test_a_refused_debounce_keeps_the_pending_job_and_its_error(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    """A replacement Celery refuses (kombu's ``SerializerNotInstalled``: no broker
    involved) raises that error; the pending job keeps its arguments, and the relay sends
    its message again (as after a failed replacement, ``test_debounce_undo.py``)."""
    app = make_app()

    @tracked_task(
        app=app, queue="q", idempotency_key="d:{x}", key_lifetime="debounce", debounce_s=60
    )
    def debounced(x: str, n: int) -> None: ...

    first = debounced.enqueue(x="a", n=1)
    with pytest.raises(SerializerNotInstalled):
        debounced.apply_async(kwargs={"x": "a", "n": 2}, serializer="no-such-serializer")
    job = tracker_of(app).get_job(first.job_id)
    assert job is not None and job.payload["kwargs"] == {"x": "a", "n": 1}
    assert (job.status.value, job.published_at) == ("pending", None)
    with pytest.raises(SerializerNotInstalled):
        debounced.apply_async(kwargs={"x": "b", "n": 1}, serializer="no-such-serializer")
    assert row_count(app) == 1
    assert [k for k in guard_keys(broker) if b":b" in k] == []
