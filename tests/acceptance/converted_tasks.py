"""Acceptance tasks of an app converted from plain Celery (issue 24, item 6), added to
``tracked_app.create_app``'s app.

Four ``@app.task`` bodies with no ``autoretry_for``, as an existing app declares them, each
built twice: converted (``acc.conv.t.<name>``: ``base=TrackedTask``, nothing else added) and
plain (``acc.conv.p.<name>``), so a test compares the converted one with Celery itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import TrackedTask, tracked_task

#: The countdown of ``acc.conv.*.retries``' ``self.retry`` (Celery's default is 180 s).
COUNTDOWN_S = 0.1


def add_converted_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    def ok(self: Any, x: Any) -> dict[str, Any]:
        r, job_id, run, started = begin(self)
        end(r, job_id, started)
        return {"x": x, "run": run}

    def fails(self: Any, x: Any) -> None:
        """Raises on every run; its task retries nothing (no ``autoretry_for``)."""
        r, job_id, run, started = begin(self)
        end(r, job_id, started)
        raise ValueError(f"{x}: run {run} failed")

    def retries(self: Any, x: Any) -> None:
        """``raise self.retry(...)`` on every run, with Celery's default ``max_retries``."""
        r, job_id, run, started = begin(self)
        end(r, job_id, started)
        raise self.retry(exc=ValueError(f"{x}: run {run} failed"), countdown=COUNTDOWN_S)

    def hangs(self: Any, x: Any) -> None:
        """Hangs on every run until the hard time limit (1 s) kills it."""
        r, job_id, _run, _started = begin(self)
        r.set(f"holding:{job_id}", 1)
        time.sleep(60)

    common: dict[str, Any] = {"bind": True, "shared": False}  # the app's default queue
    for name, body, extra in (
        ("ok", ok, {}),
        ("fails", fails, {}),
        ("retries", retries, {}),
        ("hangs", hangs, {"time_limit": 1}),
    ):
        app.task(name=f"acc.conv.t.{name}", base=TrackedTask, **common, **extra)(body)
        app.task(name=f"acc.conv.p.{name}", **common, **extra)(body)


def add_by_name_tasks(app: Celery, queue: str) -> None:
    """``acc.byname.ocr``: a tracked task with a key template, a redacted argument, a queue
    and attempts of its own, enqueued by name in ``test_enqueue_by_name.py``."""

    @tracked_task(
        app=app,
        shared=False,
        name="acc.byname.ocr",
        queue=queue,
        idempotency_key="ocr:{document_id}",
        max_attempts=2,
    )
    def ocr(document_id: str, pages: int = 1, api_token: str = "") -> dict[str, Any]:
        return {"document_id": document_id, "pages": pages}

    @app.task(name="acc.byname.plain", shared=False)
    def plain(x: int) -> int:
        return x

    # Celery refuses its messages: a soft time limit over the hard one
    @tracked_task(app=app, shared=False, name="acc.byname.limits", soft_time_limit=10, time_limit=5)
    def limits(x: int) -> int:
        return x
