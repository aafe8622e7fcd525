"""The project's Celery app, configured as its test suite runs it: eager.

Services come from the environment (``PROJ_*``), as a deployment would give them; the
defaults need none: an in-memory broker, an in-process guard (``memory://``) and a SQLite
file in the temporary directory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from celery import Celery

app = Celery("proj", include=["proj.tasks"])


class Config:
    broker_url = os.environ.get("PROJ_BROKER_URL", "memory://")
    task_always_eager = True  # .delay() runs the task here and returns an EagerResult
    task_eager_propagates = True  # a failing task raises its own exception in the test
    tracked_database_url = os.environ.get(
        "PROJ_DATABASE_URL", f"sqlite:///{Path(tempfile.gettempdir()) / 'proj-eager.sqlite3'}"
    )
    tracked_redis_url = os.environ.get("PROJ_REDIS_URL", "memory://")


app.config_from_object(Config)
