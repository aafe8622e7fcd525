"""Acceptance tasks of the concurrency-slot hand-off and of fairness (issue 26 item 1,
issue 27 item 3), added to ``tracked_app.create_app``'s app.

``acc.keyed_pair``: at most two jobs per ``group`` at a time (key ``pair:{group}``, limit
2). ``acc.fair_tenant`` and ``acc.fifo_tenant``: at most two jobs of the task at a time
(one key, limit 2) whatever the tenant; the fair one hands its freed slots round-robin by
tenant (``fairness_key="tenant:{tenant}"``), the other oldest first. Each records its run
(``spans:<job_id>``: pid, start, end) and sleeps ``sleep`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import tracked_task


def add_fair_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    def body(task: Any, sleep: float) -> int:
        r, job_id, run, started = begin(task)
        time.sleep(sleep)
        end(r, job_id, started)
        return int(run)

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.keyed_pair",
        queue=queue,
        concurrency_key="pair:{group}",
        concurrency_limit=2,
    )
    def keyed_pair(self: Any, group: str, n: int, sleep: float = 0.0) -> dict[str, Any]:
        return {"group": group, "n": n, "run": body(self, sleep)}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.fair_tenant",
        queue=queue,
        concurrency_key="fair-export",
        concurrency_limit=2,
        fairness_key="tenant:{tenant}",
    )
    def fair_tenant(self: Any, tenant: str, n: int, sleep: float = 0.0) -> dict[str, Any]:
        return {"tenant": tenant, "n": n, "run": body(self, sleep)}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.fifo_tenant",
        queue=queue,
        concurrency_key="fifo-export",
        concurrency_limit=2,
    )
    def fifo_tenant(self: Any, tenant: str, n: int, sleep: float = 0.0) -> dict[str, Any]:
        return {"tenant": tenant, "n": n, "run": body(self, sleep)}
