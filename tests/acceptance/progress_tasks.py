"""Acceptance tasks of progress and job log lines (issue 8, item 4), added to
``tracked_app.create_app``'s app.

A body that reports in steps waits after each one for the test's ``go:<job_id>:<n>``
(at most 30 s), so the test can observe every value through ``get_job`` while it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery

from celery_tracked import tracked_task


def wait_go(r: redis.Redis, key: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not r.exists(key):
        time.sleep(0.02)


def add_progress_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    @tracked_task(app=app, bind=True, shared=False, name="acc.progress_steps", queue=queue)
    def progress_steps(self: Any, steps: list[list[Any]]) -> str:
        """``set_progress(percent, stage)`` for each step, waiting for the test after each."""
        r, job_id, _run, started = begin(self)
        for n, (percent, stage) in enumerate(steps):
            self.set_progress(percent, stage)
            wait_go(r, f"go:{job_id}:{n}")
        end(r, job_id, started)
        return "done"

    @tracked_task(app=app, bind=True, shared=False, name="acc.progress_meta", queue=queue)
    def progress_meta(self: Any, total: int) -> str:
        """Existing Celery progress code: ``update_state(state="PROGRESS", meta=...)``."""
        r, job_id, _run, started = begin(self)
        for current in range(1, total + 1):
            meta = {"current": current, "total": total, "stage": f"page {current}"}
            self.update_state(state="PROGRESS", meta=meta)
            wait_go(r, f"go:{job_id}:{current}")
        end(r, job_id, started)
        return "done"

    @tracked_task(app=app, bind=True, shared=False, name="acc.progress_loop", queue=queue)
    def progress_loop(self: Any, calls: int) -> float:
        """``calls`` ``set_progress`` calls in a loop; returns their seconds (not timed by
        a test: ``bench/progress.py`` measures it)."""
        r, job_id, _run, started = begin(self)
        t0 = time.perf_counter()
        for n in range(calls):
            self.set_progress(n * 100 / calls, "loop" if n == 0 else None)
        elapsed = time.perf_counter() - t0
        end(r, job_id, started)
        return elapsed

    @tracked_task(app=app, bind=True, shared=False, name="acc.log_lines", queue=queue)
    def log_lines(self: Any, user: str, password: str, lines: int) -> int:
        """Log a line holding the secret argument, then ``lines`` numbered lines."""
        r, job_id, _run, started = begin(self)
        self.log(f"connecting as {user} with password {password}")
        self.log(f"dsn=postgresql://{user}:{password}@db/app", level="warning")
        kept = sum(self.log(f"line {n}") for n in range(lines))
        end(r, job_id, started)
        return kept
