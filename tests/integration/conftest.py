from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from celery_tracked import Tracker
from celery_tracked.core.jobs import utcnow
from celery_tracked.store import JobStore

AppFactory = Callable[..., Celery]


@pytest.fixture
def make_app(database_url: str, redis_url: str) -> Iterator[AppFactory]:
    """Apps on a real Redis (broker and guard) and a migrated database (PG and SQLite)."""
    apps: list[Celery] = []

    def factory(**conf: Any) -> Celery:
        app = Celery(f"it{len(apps)}", broker=conf.pop("broker", redis_url), set_as_current=False)
        app.conf.tracked_database_url = database_url
        app.conf.tracked_redis_url = redis_url
        app.conf.broker_connection_retry_on_startup = False
        app.conf.task_publish_retry_policy = {"max_retries": 1, "interval_start": 0}
        app.conf.update(conf)
        apps.append(app)
        return app

    yield factory
    for app in apps:
        tracker = app.__dict__.get("_celery_tracked_tracker")
        if tracker is not None:
            tracker.close()
        app.close()


@pytest.fixture
def broker(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def queue_messages(client: redis.Redis, queue: str) -> list[bytes]:
    return list(client.lrange(queue, 0, -1))


def guard_keys(client: redis.Redis) -> list[bytes]:
    return list(client.scan_iter("celery_tracked:guard:*"))


def tracker_of(app: Celery) -> Tracker:
    return Tracker.for_app(app)


def insert_job(store: JobStore, **values: Any) -> str:
    """Insert a pending job as a producer would (``values`` override the defaults); its id."""
    job_id = str(uuid.uuid4())
    now = utcnow()
    row: dict[str, Any] = {
        "id": job_id,
        "queue_name": "q",
        "job_type": "t",
        "task_name": "t",
        "celery_task_id": job_id,
        "status": "pending",
        "payload_json": "{}",
        "max_attempts": 3,
        "idempotency_key": None,
        "correlation_id": job_id,
        "parent_job_id": None,
        "owner_id": None,
        "created_at": now,
        "updated_at": now,
    }
    store.insert({**row, **values})
    return job_id
