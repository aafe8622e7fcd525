"""An app tracked app-wide, for ``celery -A appwide_app worker``: its task class is the
string ``"celery_tracked:TrackedTask"`` and this module never imports ``celery_tracked``.

Configured from the environment (``worker_environ`` in ``conftest.py``):
``TRACKED_TEST_BROKER``, ``CELERY_TRACKED_DATABASE_URL`` (read by celery-tracked itself),
``REDIS_URL`` (the guard), ``TRACKED_TEST_RESULT_BACKEND`` (optional).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from celery import Celery, shared_task

QUEUE = "acc"


@shared_task(name="aw.mul", autoretry_for=())
def mul(a: int, b: int) -> int:
    return a * b


def create_app(config: Mapping[str, Any]) -> Celery:
    app = Celery(
        "appwide",
        broker=config["broker"],
        task_cls="celery_tracked:TrackedTask",
        set_as_current=False,
    )
    app.conf.update(
        tracked_database_url=config["database_url"],
        tracked_redis_url=config["redis_url"],
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
        worker_redirect_stdouts=False,
        result_backend=config.get("result_backend"),
        result_chord_retry_interval=0.2,  # chord_unlock's polls
    )

    @app.task(name="aw.add", autoretry_for=())
    def add(a: int, b: int, seconds: float = 0.0) -> int:
        time.sleep(seconds)  # the work's own length: chord_unlock polls meanwhile
        return a + b

    @app.task(name="aw.total", autoretry_for=())
    def total(values: list[int]) -> int:
        return sum(values)

    return app


if os.environ.get("TRACKED_TEST_BROKER"):
    app = create_app(
        {
            "broker": os.environ["TRACKED_TEST_BROKER"],
            "database_url": os.environ["CELERY_TRACKED_DATABASE_URL"],
            "redis_url": os.environ["REDIS_URL"],
            "result_backend": os.environ.get("TRACKED_TEST_RESULT_BACKEND"),
        }
    )
