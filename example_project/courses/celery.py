"""The course-generation Celery app, configured from the environment like a deployment.

``CELERY_BROKER_URL`` (default ``redis://127.0.0.1:6379/0``), ``CELERY_TRACKED_DATABASE_URL``
and ``CELERY_TRACKED_REDIS_URL`` (read by celery-tracked itself), and the seed's own names
(``REDIS_URL``, ``JOB_QUEUE_*``), mapped onto ``tracked_*`` settings by
:mod:`example_project.courses.settings`.
"""

from __future__ import annotations

import os

from celery import Celery

from .settings import seed_settings

app = Celery(
    "courses",
    broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
    include=["example_project.courses.tasks"],
)
app.conf.update(seed_settings(os.environ))
app.conf.update(
    task_default_queue=os.environ.get("COURSES_QUEUE", "course_generation"),
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    tracked_default_backoff_ms=int(os.environ.get("COURSES_BACKOFF_MS", "500")),
)
