"""Acceptance tasks of Celery's retry habits (issue 12, items 3, 8 and 13), added to
``tracked_app.create_app``'s app.

Every body runs twice over: as a tracked task (``acc.t.<name>``) and as a plain
``@app.task`` (``acc.p.<name>``) with the same options, so a test compares the tracked one
with Celery itself. A body records ``self.request.retries`` of each run:
``RPUSH retries:<task id> <n>``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import tracked_task

#: The countdown every ``self.retry`` of these bodies asks for, in seconds.
COUNTDOWN_S = 0.2
#: ``acc.tl_fixed``'s fixed delay between attempts (``default_retry_delay``), in seconds.
TIME_LIMIT_DELAY_S = 1.5


def add_retry_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    def record(task: Any) -> int:
        r, job_id, run, started = begin(task)
        r.rpush(f"retries:{task.request.id}", int(task.request.retries))
        end(r, job_id, started)
        return run

    def self_retry(
        self: Any, x: Any, fail_runs: int = 99, exc: bool = True, limit: int | None = None
    ) -> dict[str, Any]:
        """Runs up to ``fail_runs`` call ``raise self.retry(...)``: with ``exc=ValueError``
        (``exc``), and ``max_retries=limit`` when given."""
        run = record(self)
        if run <= fail_runs:
            options: dict[str, Any] = {"countdown": COUNTDOWN_S}
            if exc:
                options["exc"] = ValueError(f"{x}: run {run} failed")
            if limit is not None:
                options["max_retries"] = limit
            raise self.retry(**options)
        return {"x": x, "run": run}

    def raises(self: Any, x: Any, fail_runs: int = 99) -> dict[str, Any]:
        """Runs up to ``fail_runs`` raise ``ValueError`` (retried by ``autoretry_for``)."""
        run = record(self)
        if run <= fail_runs:
            raise ValueError(f"{x}: run {run} failed")
        return {"x": x, "run": run}

    def collect(self: Any, results: list[Any]) -> list[Any]:
        """A chord's body."""
        record(self)
        return results

    def login_retry(self: Any, user: str, password: str) -> None:
        """Retries with no ``exc``: Celery's ``MaxRetriesExceededError`` quotes the
        arguments (``args:('alice', 'C:\\\\new...')``), the password escaped."""
        record(self)
        raise self.retry(countdown=COUNTDOWN_S)

    # the plain tasks go to the app's default queue (Celery deprecates ``queue=``)
    common: dict[str, Any] = {"bind": True, "shared": False}
    retried = {**common, "max_retries": 3, "default_retry_delay": COUNTDOWN_S}
    auto = {**retried, "autoretry_for": (ValueError,)}
    for name, body, options in (
        ("self_retry", self_retry, retried),
        ("raises", raises, auto),
        ("collect", collect, common),
        ("login_retry", login_retry, {**retried, "max_retries": 1}),
    ):
        tracked_task(app=app, name=f"acc.t.{name}", queue=queue, **options)(body)
        app.task(name=f"acc.p.{name}", **options)(body)

    @tracked_task(
        app=app,
        name="acc.tl_fixed",
        max_attempts=3,
        default_retry_delay=TIME_LIMIT_DELAY_S,
        retry_jitter=False,
        time_limit=1,
        queue=queue,
        **common,
    )
    def tl_fixed(self: Any, x: Any, hang_runs: int = 1) -> dict[str, Any]:
        """Runs up to ``hang_runs`` hang until the hard time limit kills them."""
        r, job_id, run, started = begin(self)
        if run <= hang_runs:
            r.set(f"holding:{job_id}", os.getpid())
            time.sleep(60)
        end(r, job_id, started)
        return {"x": x, "run": run}
