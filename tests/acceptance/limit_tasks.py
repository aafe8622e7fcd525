"""Acceptance tasks of the rate and concurrency limits (issue 8, item 3), added to
``tracked_app.create_app``'s app.

``acc.limited`` shares the global limiter ``acc-limiter`` (``LIMIT_MS`` apart), and
``acc.limited_slow`` the limiter ``acc-limiter-slow`` (``SLOW_LIMIT_MS`` apart). Each records
its start, first thing in the body: ``RPUSH limited:starts "<time> <pid> <job_id> <grant>"``,
``<grant>`` being the limiter's latest granted start read from its Redis hash right after
(the body's own grant: no other start comes within the interval), or -1 if unreadable.
``acc.per_tenant`` (tenant ``{tenant_id}``, keyed limit ``acc-t:{tenant}`` at
``PER_TENANT_S`` per second) records, first thing,
``RPUSH keyed:starts "<time> <tenant> <job_id> <pid> <grant>"`` (``<grant>``: the newest
grant of its key, read right after: its own). ``acc.one_per_group`` runs at most one job
per ``group`` at a time (``spans:<job_id>``); run 1 of a job whose ``hang`` is set
publishes its pid and hangs (the test SIGKILLs it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery

from celery_tracked import RateLimit, Tracker, tracked_task

#: The minimum interval between the starts of ``acc.limited`` bodies.
LIMIT_MS = 200
#: The same for ``acc.limited_slow``.
SLOW_LIMIT_MS = 1000
#: ``acc.per_tenant``'s keyed limit: starts per second per tenant (``TRACKED_TEST_PER_TENANT_S``:
#: a measurement on a machine too loaded for 100 starts a second).
PER_TENANT_S = int(os.environ.get("TRACKED_TEST_PER_TENANT_S", "20"))
#: its burst (``TRACKED_TEST_PER_TENANT_BURST``; none given: the library's default, N: up to
#: N in any window)
_BURST = os.environ.get("TRACKED_TEST_PER_TENANT_BURST")
PER_TENANT_BURST = int(_BURST) if _BURST else None


def _record_start(task: Any, limiter: str, at: float, begin: Callable[[Any], Any]) -> Any:
    """``begin`` the run, then record its start (``at``) and the limiter's latest grant."""
    r, job_id, run, started = begin(task)
    tracker = Tracker.for_app(task.app)
    grant = -1.0
    client = getattr(tracker._services.backend, "client", None)
    if client is not None:
        try:
            raw = client.hget(f"{tracker.settings.key_prefix}:limiter:{{{limiter}}}", "last")
            grant = float(raw) / 1000 if raw is not None else -1.0
        except redis.RedisError:  # the limiter's Redis is being restarted by the test
            pass
    r.rpush("limited:starts", f"{at:.6f} {os.getpid()} {job_id} {grant:.6f}")
    return r, job_id, run, started


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
        r, job_id, run, started = _record_start(self, "acc-limiter", at, begin)
        time.sleep(sleep)
        end(r, job_id, started)
        return {"n": n, "run": run}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.limited_slow",
        queue=queue,
        rate_limit_global=("acc-limiter-slow", SLOW_LIMIT_MS),
    )
    def limited_slow(self: Any, n: int) -> dict[str, Any]:
        at = time.time()
        r, job_id, run, started = _record_start(self, "acc-limiter-slow", at, begin)
        end(r, job_id, started)
        return {"n": n, "run": run}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.per_tenant",
        queue=queue,
        tenant="{tenant_id}",
        rate_limits=RateLimit("acc-t:{tenant}", f"{PER_TENANT_S}/s", burst=PER_TENANT_BURST),
    )
    def per_tenant(self: Any, tenant_id: str, n: int) -> dict[str, Any]:
        at = time.time()
        r, job_id, run, started = begin(self)
        tracker = Tracker.for_app(self.app)
        grants = f"{tracker.settings.key_prefix}:rate:{{rate}}:grants:acc-t:{tenant_id}"
        newest = r.zrevrange(grants, 0, 0, withscores=True)  # its own grant, or a later one
        grant = newest[0][1] / 1000 if newest else -1.0
        r.rpush("keyed:starts", f"{at:.6f} {tenant_id} {job_id} {os.getpid()} {grant:.6f}")
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
