"""Which publish errors are the broker's (a retryable ``EnqueueError``) and which are the
call's own (raised as they are): ``broker.broker_failure``. No I/O: an app's transport and
result backend only declare their error classes."""

from __future__ import annotations

import pytest
import redis
from celery import Celery
from celery.exceptions import QueueNotFound
from kombu.exceptions import ConnectionLimitExceeded, EncodeError, OperationalError

from celery_tracked.adapter.broker import broker_failure


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OperationalError("connection lost"), True),
        (ConnectionRefusedError(111, "refused"), True),
        (TimeoutError("timed out"), True),
        (ConnectionLimitExceeded(10), True),
        (redis.exceptions.ConnectionError("gone"), True),  # the Redis transport declares it
        (ValueError("soft_time_limit must be less than or equal to time_limit"), False),
        (TypeError("task args must be a list or tuple"), False),
        (EncodeError("cannot serialize"), False),
        (QueueNotFound("no such queue"), False),  # a KeyError, which the transport declares
    ],
)
def test_a_redis_brokers_failures(error: Exception, expected: bool) -> None:
    app = Celery("bf", broker="redis://127.0.0.1:1/0", set_as_current=False)
    try:
        assert broker_failure(app, error) is expected
    finally:
        app.close()


def test_the_result_backends_failures_count_too() -> None:
    """A RabbitMQ broker with a Redis result backend: Celery subscribes on the backend
    before publishing, so a Redis outage there is not the call's fault."""
    app = Celery(
        "bf",
        broker="amqp://guest@127.0.0.1:1//",
        backend="redis://127.0.0.1:1/0",
        set_as_current=False,
    )
    try:
        assert broker_failure(app, redis.exceptions.ConnectionError("gone"))
        assert not broker_failure(app, ValueError("bad"))
    finally:
        app.close()
