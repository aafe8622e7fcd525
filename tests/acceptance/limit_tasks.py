"""Acceptance tasks of the rate and concurrency limits (issue 8, item 3), added to
``tracked_app.create_app``'s app.

``acc.limited`` shares the global limiter ``acc-limiter`` (``LIMIT_MS`` apart) and records
its start, first thing in the body: ``RPUSH limited:starts "<time> <pid> <job_id>"``.
``acc.one_per_group`` runs at most one job per ``group`` at a time (``spans:<job_id>``);
run 1 of a job whose ``hang`` is set publishes its pid and hangs (the test SIGKILLs it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import tracked_task

#: The minimum interval between the starts of ``acc.limited`` bodies.
LIMIT_MS = 200


def add_limit_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.limited",
        queue=queue,
        rate_limit_global=("acc-limiter", LIMIT_MS),
    )
    def limited(self: Any, n: int, sleep: float = 0.0) -> dict[str, Any]:
        at = time.time()
        r, job_id, run, started = begin(self)
        r.rpush("limited:starts", f"{at:.6f} {os.getpid()} {job_id}")
        time.sleep(sleep)
        end(r, job_id, started)
        return {"n": n, "run": run}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.one_per_group",
        queue=queue,
        concurrency_key="group:{group}",
        concurrency_limit=1,
        max_attempts=3,
    )
    def one_per_group(
        self: Any, group: str, n: int, sleep: float = 0.0, hang: bool = False
    ) -> dict[str, Any]:
        r, job_id, run, started = begin(self)
        if hang and run == 1:
            r.set(f"pid:{job_id}", os.getpid())
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(0.05)
        time.sleep(sleep)
        end(r, job_id, started)
        return {"group": group, "n": n, "run": run}
