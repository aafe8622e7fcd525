"""Acceptance tasks of exactly-once effects (issue 17), added to ``tracked_app.create_app``'s
app: ``acc.ledger`` adds 1 to row ``k`` of the test's ``ledger`` table in
``self.transaction()``, then, when ``hold`` is set, publishes its pid and waits (at most
``hold`` seconds, or until the test sets ``go:<job_id>``) before its completion, so that
the test can SIGKILL or SIGSTOP it between its write and its completion."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from celery import Celery
from sqlalchemy import text

from celery_tracked import tracked_task

LEDGER_DDL = "CREATE TABLE ledger (k TEXT PRIMARY KEY, n INTEGER NOT NULL DEFAULT 0)"


def add_effects_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.ledger",
        queue=queue,
        max_attempts=5,
        backoff_ms=100,
    )
    def ledger(self: Any, k: str, hold: float = 0.0) -> dict[str, Any]:
        r, job_id, run, started = begin(self)
        with self.transaction() as conn:
            conn.execute(text("UPDATE ledger SET n = n + 1 WHERE k = :k"), {"k": k})
        if hold and run == 1:
            r.set(f"wrote:{job_id}", os.getpid())
            deadline = time.monotonic() + hold
            while time.monotonic() < deadline and not r.exists(f"go:{job_id}"):
                time.sleep(0.02)
        end(r, job_id, started)
        return {"k": k, "run": run}
