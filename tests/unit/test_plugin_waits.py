"""Issue 22, item 7: no helper of the pytest plugin waits without a bound: a broker that
cannot be reached is an AssertionError saying what to do, in seconds, not Celery's
minutes of connection retries."""

from __future__ import annotations

import socket
import time

import pytest
from celery import Celery

from celery_tracked.testing.apps import purge_queues
from celery_tracked.testing.helpers import READY_S, reach_broker


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_broker_fails_at_once_saying_why() -> None:
    app = Celery("unreachable", broker=f"amqp://guest:secret@127.0.0.1:{_closed_port()}//")
    started = time.monotonic()
    with pytest.raises(AssertionError, match="in-memory broker") as caught:
        reach_broker(app)
    assert time.monotonic() - started < READY_S
    assert "secret" not in str(caught.value)
    started = time.monotonic()
    purge_queues(app)  # nothing to purge where nothing can be reached: no wait for good
    assert time.monotonic() - started < READY_S
