"""The Celery apps of the benchmark, shaped like a user's project.

Three contenders run the same bodies (one Redis ``INCR``; or 10 ms of sleep, then one
``INCR``):

- ``plain``: ``@app.task(acks_late=True)`` on an app without a result backend.
- ``tracked``: ``@tracked_task`` as a user writes it, same app, the library's defaults.
- ``peer``: ``@peer_app.task(acks_late=True)`` on a second app whose result backend is
  Celery's database backend on PostgreSQL (``BENCH_PEER_RESULT_BACKEND``) with
  ``task_track_started=True``: the nearest thing Celery offers to a row per job.

Nothing here changes a library or Celery default beyond the URLs (and the peer's two
settings): the worker is started with ``-l INFO`` by default, every task uses the default
queue ``celery``. Configured from the environment (``bench/run.py`` sets these):
``BENCH_BROKER_URL``, ``BENCH_DATABASE_URL``, ``BENCH_REDIS_URL``,
``BENCH_PEER_RESULT_BACKEND``.

The first and the ``target``-th increment of a counter also store a timestamp: the
harness computes throughput from those two, which leaves worker boot out of it.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from celery import Celery
from celery.signals import worker_process_init

from bench.common import BROKER_URL, DATABASE_URL, REDIS_URL, SLEEP_S
from bench.common import count as _count
from celery_tracked import tracked_task

app = Celery("bench", broker=BROKER_URL)
app.conf.update(tracked_database_url=DATABASE_URL, tracked_redis_url=REDIS_URL)

#: bench-only knob (not a user setting): ``BENCH_TRACKED_LOG_LEVEL=WARNING`` silences the
#: library's per-job INFO lines, to measure what they cost a worker running at ``-l INFO``
_TRACKED_LOG_LEVEL = os.environ.get("BENCH_TRACKED_LOG_LEVEL")


@worker_process_init.connect
def _tracked_log_level(**_: Any) -> None:
    if _TRACKED_LOG_LEVEL:
        logging.getLogger("celery_tracked").setLevel(_TRACKED_LOG_LEVEL.upper())


@app.task(name="bench.plain_noop", acks_late=True)
def plain_noop() -> None:
    _count("bench.plain_noop")


@app.task(name="bench.plain_sleep", acks_late=True)
def plain_sleep() -> None:
    time.sleep(SLEEP_S)
    _count("bench.plain_sleep")


@tracked_task(app=app, name="bench.tracked_noop")
def tracked_noop() -> None:
    _count("bench.tracked_noop")


@tracked_task(app=app, name="bench.tracked_sleep")
def tracked_sleep() -> None:
    time.sleep(SLEEP_S)
    _count("bench.tracked_sleep")
