"""Acceptance task of sealed arguments (issue 22, item 2), added to ``tracked_app.create_app``'s
app: ``acc.sealed`` records the SHA-256 of the ``password`` it was given (never the value)
under ``got:<job_id>``, and fails (no further attempt) while ``fail:<user>`` is set."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import tracked_task


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def add_sealed_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    @tracked_task(app=app, bind=True, shared=False, name="acc.sealed", queue=queue, max_attempts=1)
    def sealed(self: Any, user: str, password: str) -> dict[str, Any]:
        r, job_id, run, started = begin(self)
        r.rpush(f"got:{job_id}", digest(password))
        end(r, job_id, started)
        if r.exists(f"fail:{user}"):
            raise ValueError(f"login of {user} refused (run {run})")
        return {"user": user, "run": run}
