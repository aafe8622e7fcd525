"""The Celery app of the fleet bench (``bench/fleet.py``): one tracked task as a user writes
it, on the broker the harness chooses.

Configured from the environment (the harness sets these for its producers and workers):

- ``FLEET_BROKER_URL``: Redis or RabbitMQ (default ``redis://127.0.0.1:6379/1``).
- ``FLEET_DATABASE_URL``: the tracking database (default the ``ct_bench_fleet`` database).
- ``FLEET_REDIS_URL``: ``tracked_redis_url`` and the body's run counter (default Redis DB 1).

The body counts its own runs per job (``HINCRBY fleet:runs <job id> 1``), so the harness
can check that every job's body ran exactly once.
"""

from __future__ import annotations

import os

import redis
from celery import Celery

from celery_tracked import tracked_task

BROKER_URL = os.environ.get("FLEET_BROKER_URL", "redis://127.0.0.1:6379/1")
DATABASE_URL = os.environ.get(
    "FLEET_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/ct_bench_fleet"
)
REDIS_URL = os.environ.get("FLEET_REDIS_URL", "redis://127.0.0.1:6379/1")
QUEUE = "fleet"
RUNS = "fleet:runs"

app = Celery("fleet", broker=BROKER_URL)
app.conf.update(
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    tracked_database_url=DATABASE_URL,
    tracked_redis_url=REDIS_URL,
    tracked_check_redis_eviction=False,  # a local test server
)

_client: redis.Redis | None = None
_pid = 0


def _redis() -> redis.Redis:
    global _client, _pid
    if _client is None or _pid != os.getpid():
        _client, _pid = redis.Redis.from_url(REDIS_URL), os.getpid()
    return _client


@tracked_task(app=app, name="fleet.work", queue=QUEUE, bind=True)
def work(self: object, n: int) -> int:
    _redis().hincrby(RUNS, self.request.id, 1)  # type: ignore[attr-defined]
    return n
