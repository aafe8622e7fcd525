"""The peer: Celery with its database result backend and ``task_track_started=True``.

A separate module so that its worker never imports celery-tracked.
"""

from __future__ import annotations

import time

from celery import Celery

from bench.common import BROKER_URL, PEER_RESULT_BACKEND, SLEEP_S
from bench.common import count as _count

app = Celery("bench_peer", broker=BROKER_URL)
app.conf.update(result_backend=PEER_RESULT_BACKEND, task_track_started=True)


@app.task(name="bench.peer_noop", acks_late=True)
def peer_noop() -> None:
    _count("bench.peer_noop")


@app.task(name="bench.peer_sleep", acks_late=True)
def peer_sleep() -> None:
    time.sleep(SLEEP_S)
    _count("bench.peer_sleep")
