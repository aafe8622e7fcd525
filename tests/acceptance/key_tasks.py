"""Acceptance tasks of the key lifetimes (issue 7, item 6), added to
``tracked_app.create_app``'s app, and the burst of concurrent producers that races them."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from celery import Celery

from celery_tracked import JobNotFound, Tracker, tracked_task

#: The throttle window of ``acc.throttled`` and the debounce delay of ``acc.debounced``.
THROTTLE_S = 3.0
DEBOUNCE_S = 1.5


def add_key_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    def run(task: Any, sleep: float = 0.0, **seen: Any) -> dict[str, Any]:
        r, job_id, number, started = begin(task)
        r.rpush(f"args:{job_id}", repr(sorted(seen.items())))
        time.sleep(sleep)
        end(r, job_id, started)
        return {**seen, "run": number}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.once_at_a_time",
        queue=queue,
        idempotency_key="e:{x}",
        key_lifetime="ended",
    )
    def once_at_a_time(self: Any, x: str, n: int = 0, sleep: float = 0.0) -> dict[str, Any]:
        return run(self, sleep, x=x, n=n)

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.throttled",
        queue=queue,
        idempotency_key="t:{x}",
        key_lifetime="throttle",
        throttle_s=THROTTLE_S,
    )
    def throttled(self: Any, x: str, n: int = 0, sleep: float = 0.0) -> dict[str, Any]:
        return run(self, sleep, x=x, n=n)

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.debounced",
        queue=queue,
        idempotency_key="d:{x}",
        key_lifetime="debounce",
        debounce_s=DEBOUNCE_S,
    )
    def debounced(self: Any, x: str, n: int = 0, sleep: float = 0.0) -> dict[str, Any]:
        return run(self, sleep, x=x, n=n)

    @tracked_task(
        app=app, bind=True, shared=False, name="acc.fails_first", queue=queue, max_attempts=1
    )
    def fails_first(self: Any, x: str, api_token: str = "") -> dict[str, Any]:
        """Fails its first run (one attempt: the job ends ``failed``), succeeds after."""
        r, job_id, number, started = begin(self)
        end(r, job_id, started)
        if number == 1:
            raise RuntimeError(f"first run of {x} fails")
        return {"x": x, "run": number, "token_seen": bool(api_token)}


def burst(
    config: dict[str, Any],
    task_name: str,
    calls: list[dict[str, Any]],
    barrier: Any,
    results: Any,
) -> None:
    """In a separate process: one thread per call, all enqueueing at the same moment."""
    from tracked_app import create_app

    app = create_app(config)
    task = app.tasks[task_name]
    tracker = Tracker.for_app(app)
    # connect to the database and to Redis before the race
    assert tracker.get_job(str(uuid.uuid4())) is None
    with contextlib.suppress(JobNotFound):
        tracker.wait(str(uuid.uuid4()), timeout=0.1)
    local = threading.Barrier(len(calls))
    out: list[tuple[str, bool, str]] = []
    lock = threading.Lock()

    def one(kwargs: dict[str, Any]) -> None:
        local.wait()
        try:
            res = task.enqueue(**kwargs)
            item = (res.job_id, res.created, "")
        except Exception as exc:  # reported to the test, which fails on it
            item = ("", False, repr(exc))
        with lock:
            out.append(item)

    threads = [threading.Thread(target=one, args=(kwargs,)) for kwargs in calls]
    barrier.wait()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put(out)
    tracker.close()
