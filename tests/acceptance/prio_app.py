"""The Celery app of the priority acceptance (issue 26, item 2): RabbitMQ as the broker,
one queue of the test's own declared with ``x-max-priority``, one job at a time
(``worker_prefetch_multiplier = 1``, ``task_acks_late``): a worker then always takes the
highest priority waiting. Importable as ``prio_app`` (``celery -A prio_app worker``),
configured from the environment:

    TRACKED_TEST_AMQP            the RabbitMQ URL (default guest@127.0.0.1:5672, vhost /)
    PRIO_QUEUE                   the test's queue (and exchange) name
    CELERY_TRACKED_DATABASE_URL  the test's PostgreSQL database
    REDIS_URL                    the guard's Redis, where bodies record their starts too

Bodies record ``RPUSH prio:starts "<job_id> <run> <priority of this delivery>"``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import redis
from celery import Celery
from kombu import Exchange, Queue

from celery_tracked import tracked_task

AMQP = "amqp://guest:guest@127.0.0.1:5672//"
#: the queue's ``x-max-priority``
TOP = 10


def config_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    return {
        "broker": env.get("TRACKED_TEST_AMQP", AMQP),
        "queue": env.get("PRIO_QUEUE", "prio-default"),
        "database_url": env.get("CELERY_TRACKED_DATABASE_URL", "sqlite:///prio.sqlite3"),
        "redis_url": env.get("REDIS_URL", "redis://127.0.0.1:6379/15"),
    }


def create_app(config: Mapping[str, Any]) -> Celery:
    queue = config["queue"]
    app = Celery("prio_acceptance", broker=config["broker"], set_as_current=False)
    app.conf.update(
        task_queues=[
            Queue(
                queue, Exchange(queue), routing_key=queue, queue_arguments={"x-max-priority": TOP}
            )
        ],
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        worker_prefetch_multiplier=1,
        task_acks_late=True,
        broker_connection_retry_on_startup=True,
        worker_redirect_stdouts=False,
        result_backend=None,
        task_ignore_result=True,
        tracked_database_url=config["database_url"],
        tracked_redis_url=config["redis_url"],
        tracked_default_backoff_ms=100,
        tracked_reaper_processing_seconds=0.5,
        tracked_lease_seconds=5,
    )
    records: dict[int, redis.Redis] = {}

    def record(task: Any) -> int:
        client = records.get(os.getpid())
        if client is None:
            client = records[os.getpid()] = redis.Redis.from_url(config["redis_url"])
        job_id = str((task.request.headers or {}).get("tracked_job_id") or task.request.id)
        run = int(client.incr(f"ran:{job_id}"))
        priority = (task.request.delivery_info or {}).get("priority")
        client.rpush("prio:starts", f"{job_id} {run} {priority}")
        return run

    @tracked_task(app=app, bind=True, shared=False, name="prio.work", max_attempts=3)
    def work(self: Any, n: int) -> int:
        record(self)
        return n

    @tracked_task(app=app, bind=True, shared=False, name="prio.flaky", max_attempts=3)
    def flaky(self: Any, n: int) -> int:
        if record(self) == 1:
            raise ConnectionError("the first attempt fails")
        return n

    return app


app = create_app(config_from_env())
