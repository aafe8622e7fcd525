"""The course-generation Celery app, configured from the environment like a deployment.

``CELERY_BROKER_URL`` (default ``redis://127.0.0.1:6379/0``), ``CELERY_TRACKED_DATABASE_URL``
and ``CELERY_TRACKED_REDIS_URL`` (read by celery-tracked itself).
"""

from __future__ import annotations

import os

from celery import Celery

app = Celery(
    "courses",
    broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
    include=["example_project.courses.tasks"],
)
app.conf.update(
    task_default_queue=os.environ.get("COURSES_QUEUE", "course_generation"),
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    tracked_default_backoff_ms=int(os.environ.get("COURSES_BACKOFF_MS", "500")),
)
