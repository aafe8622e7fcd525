"""The app of ``bench/reaper_backlog.py``: a backlog behind a global rate limit and behind
a full concurrency key, configured from the environment (``SOAK_BROKER``,
``SOAK_DATABASE``). Each body counts its runs in Redis (``soak:ran:<job_id>``)."""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

from celery_tracked import tracked_task

#: starts of ``soak.limited`` bodies at least this far apart (ms)
LIMIT_MS = int(os.environ.get("SOAK_LIMIT_MS", "10000"))
#: how long a ``soak.keyed`` body runs (s); one at a time
KEYED_S = float(os.environ.get("SOAK_KEYED_S", "15"))

app = Celery("soak", broker=os.environ.get("SOAK_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(
    tracked_database_url=os.environ.get("SOAK_DATABASE", "sqlite:///soak.sqlite3"),
    tracked_redis_url=os.environ.get("SOAK_BROKER", "redis://127.0.0.1:6379/0"),
    task_default_queue="soak",
    result_backend=None,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
)
_redis = redis.Redis.from_url(app.conf.tracked_redis_url)


def _ran(job_id: str) -> None:
    _redis.incr(f"soak:ran:{job_id}")
    _redis.rpush("soak:starts", f"{time.time():.3f} {job_id}")


@tracked_task(app=app, bind=True, name="soak.limited", rate_limit_global=("soak", LIMIT_MS))
def limited(self: Any, n: int) -> int:
    _ran(self.request.id)
    return n


@tracked_task(
    app=app, bind=True, name="soak.keyed", concurrency_key="soak-key", concurrency_limit=1
)
def keyed(self: Any, n: int) -> int:
    _ran(self.request.id)
    time.sleep(KEYED_S)
    return n
