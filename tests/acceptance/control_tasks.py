"""Acceptance tasks of control over when jobs run (issue 26: pause and resume, priority),
added to ``tracked_app.create_app``'s app: two job types on one queue.

``acc.ocr_page`` (job type ``ocr``) and ``acc.mail_out`` (job type ``mail``) record each run
(``ran:<job_id>``) and its start order (``RPUSH control:starts <job_id>``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import tracked_task


def add_control_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    @tracked_task(
        app=app, bind=True, shared=False, name="acc.ocr_page", queue=queue, job_type="ocr"
    )
    def ocr_page(self: Any, n: int) -> int:
        r, job_id, _run, started = begin(self)
        r.rpush("control:starts", job_id)
        end(r, job_id, started)
        return n

    @tracked_task(
        app=app, bind=True, shared=False, name="acc.mail_out", queue=queue, job_type="mail"
    )
    def mail_out(self: Any, n: int) -> int:
        r, job_id, _run, started = begin(self)
        r.rpush("control:starts", job_id)
        end(r, job_id, started)
        return n
