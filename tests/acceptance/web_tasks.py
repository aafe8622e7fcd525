"""Acceptance tasks of the dashboard (issue 28), added to ``tracked_app.create_app``'s app.

``acc.web_charge`` (the main queue) takes a redacted ``api_password`` and fails (no further
attempt) while ``web:fail`` is set; ``acc.web_report`` (queue ``acc_reports``) always
fails; ``acc.web_idle`` (queue ``acc_idle``, which no worker consumes) stays pending.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import tracked_task

REPORTS = "acc_reports"
IDLE = "acc_idle"


def add_web_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    @tracked_task(
        app=app, bind=True, shared=False, name="acc.web_charge", queue=queue, max_attempts=1
    )
    def web_charge(self: Any, amount: int, api_password: str) -> dict[str, Any]:
        r, job_id, run, started = begin(self)
        self.log(f"charging {amount} (run {run})")
        end(r, job_id, started)
        if r.exists("web:fail"):
            raise ValueError(f"card declined for {amount}")
        return {"charged": amount}

    @tracked_task(
        app=app, bind=True, shared=False, name="acc.web_report", queue=REPORTS, max_attempts=1
    )
    def web_report(self: Any, n: int) -> None:
        raise RuntimeError(f"report {n} failed")

    @tracked_task(app=app, bind=True, shared=False, name="acc.web_idle", queue=IDLE)
    def web_idle(self: Any, n: int) -> int:
        return n
