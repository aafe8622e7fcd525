"""The project's Celery app: every ``CELERY_*`` Django setting is its configuration."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproj.settings")

app = Celery("djproj")
# CELERY_BROKER_URL -> broker_url, CELERY_TRACKED_DATABASE_URL -> tracked_database_url, ...
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.set_default()  # tracked_task() without app= binds here, in every thread
