"""Acceptance tasks of finding and acting on jobs (issue 13, items 3-5), added to
``tracked_app.create_app``'s app.

``acc.stoppable`` runs for ``seconds`` (run 1 only; later runs return at once), bumping
``beat:<job_id>`` every 50 ms so a test sees whether its body still runs; with ``poll`` it
asks ``self.cancelled()`` each time and returns early (``stopped:<job_id>``) once asked.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import tracked_task


def add_ops_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    @tracked_task(
        app=app, bind=True, shared=False, name="acc.stoppable", queue=queue, max_attempts=3
    )
    def stoppable(self: Any, poll: bool, seconds: float = 60.0) -> dict[str, Any]:
        r, job_id, run, started = begin(self)
        r.set(f"holding:{job_id}", os.getpid())
        deadline = time.monotonic() + (seconds if run == 1 else 0)
        while time.monotonic() < deadline:
            r.incr(f"beat:{job_id}")
            if poll and self.cancelled():
                r.set(f"stopped:{job_id}", run)
                break
            time.sleep(0.05)
        end(r, job_id, started)
        return {"run": run}
