"""The Celery app of the benchmark: two plain tasks and their tracked twins.

Configured from the environment (``bench/run.py`` sets these for its worker):

- ``BENCH_BROKER_URL``: the Redis broker (default ``redis://127.0.0.1:6379/1``).
- ``BENCH_DATABASE_URL``: the tracking database (default the ``ct_bench`` PostgreSQL db).
- ``BENCH_REDIS_URL``: ``tracked_redis_url`` and the completion counters
  (default ``redis://127.0.0.1:6379/1``).

Every body, plain or tracked, does the same single Redis ``INCR`` on its own counter key,
so the plain baseline pays the same round trip as the tracked task. The first and the
``BENCH_TARGET``-th increment also store a timestamp: the harness computes throughput from
those two, which leaves worker boot out of the measurement.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

from celery_tracked import tracked_task

BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/1")
DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/ct_bench"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/1")

#: name → (queue, counter key); the harness imports this too.
PLAIN_NOOP = "bench.plain_noop"
TRACKED_NOOP = "bench.tracked_noop"
PLAIN_SLEEP = "bench.plain_sleep"
TRACKED_SLEEP = "bench.tracked_sleep"
QUEUES = {
    PLAIN_NOOP: "bench_plain_noop",
    TRACKED_NOOP: "bench_tracked_noop",
    PLAIN_SLEEP: "bench_plain_sleep",
    TRACKED_SLEEP: "bench_tracked_sleep",
}
SLEEP_S = 0.010


def counter_key(task_name: str) -> str:
    return f"bench:count:{task_name}"


def target_key(task_name: str) -> str:
    return f"bench:target:{task_name}"


def stamp_key(task_name: str, n: int) -> str:
    return f"bench:stamp:{task_name}:{n}"


app = Celery("bench", broker=BROKER_URL)
app.conf.update(
    result_backend=None,
    task_ignore_result=True,
    task_store_errors_even_if_ignored=False,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=True,
    worker_redirect_stdouts=False,
    tracked_database_url=DATABASE_URL,
    tracked_redis_url=REDIS_URL,
    # the bench Redis is a local test server; its eviction policy is not the point here
    tracked_check_redis_eviction=False,
)

_client: redis.Redis | None = None
_client_pid = 0
_targets: dict[str, int] = {}


def _redis() -> redis.Redis:
    """One client per process (pool children are forked)."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        _client = redis.Redis.from_url(REDIS_URL)
        _client_pid = os.getpid()
        _targets.clear()
    return _client


def _count(task_name: str) -> None:
    """The one Redis round trip of every body (plus two timestamps per run)."""
    client = _redis()
    n = int(client.incr(counter_key(task_name)))
    target = _targets.get(task_name)
    if target is None:
        raw: Any = client.get(target_key(task_name))
        target = _targets[task_name] = int(raw or 0)
    if n == 1 or n == target:
        client.set(stamp_key(task_name, n), repr(time.time()))


@app.task(name=PLAIN_NOOP, queue=QUEUES[PLAIN_NOOP], acks_late=True, ignore_result=True)
def plain_noop() -> None:
    _count(PLAIN_NOOP)


@app.task(name=PLAIN_SLEEP, queue=QUEUES[PLAIN_SLEEP], acks_late=True, ignore_result=True)
def plain_sleep() -> None:
    time.sleep(SLEEP_S)
    _count(PLAIN_SLEEP)


@tracked_task(app=app, name=TRACKED_NOOP, queue=QUEUES[TRACKED_NOOP])
def tracked_noop() -> None:
    _count(TRACKED_NOOP)


@tracked_task(app=app, name=TRACKED_SLEEP, queue=QUEUES[TRACKED_SLEEP])
def tracked_sleep() -> None:
    time.sleep(SLEEP_S)
    _count(TRACKED_SLEEP)
