"""Acceptance tasks of the circuit breakers (issue 27, item 4), added to
``tracked_app.create_app``'s app.

``acc.charge`` names the circuit ``provider`` and calls a provider stub that fails
(``ConnectionError``) while ``time.time()`` is before the Redis key ``provider:down_until``
(set by the test). Each call is recorded as ``RPUSH provider:calls "<job_id> <time> <ok|
fail> <the circuit's state read at the call>"``; a successful one also ``INCR
provider:ok:<job_id>``. The cool-down is ``TRACKED_TEST_CIRCUIT_COOLDOWN_S`` (2 s) so that
the test stays short.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import Tracker, tracked_task

THRESHOLD = 5


def add_circuit_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    cooldown = float(os.environ.get("TRACKED_TEST_CIRCUIT_COOLDOWN_S", "2"))

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.charge",
        queue=queue,
        max_attempts=20,
        backoff_ms=200,
        circuit="provider",
        circuit_threshold=THRESHOLD,
        circuit_window_s=60,
        circuit_cooldown_s=cooldown,
        circuit_errors=(ConnectionError,),
    )
    def charge(self: Any, n: int) -> int:
        r, job_id, _run, started = begin(self)
        found = {c.name: c.state for c in Tracker.for_app(self.app).circuits()}
        state = found.get("provider", "closed")
        down_until = float(r.get("provider:down_until") or 0)
        now = time.time()
        ok = now >= down_until
        r.rpush("provider:calls", f"{job_id} {now:.6f} {'ok' if ok else 'fail'} {state}")
        if not ok:
            raise ConnectionError("provider unavailable (stub)")
        r.incr(f"provider:ok:{job_id}")
        time.sleep(0.02)  # the provider's answer
        end(r, job_id, started)
        return n
