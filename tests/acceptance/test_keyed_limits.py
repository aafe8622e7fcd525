"""Keyed rate limits per tenant (issue 27, items 1 and 2) with real ``celery worker``
processes, Redis and PostgreSQL: 3 workers x 2 pool processes, 20 starts per second per
tenant (in any window: ``burst=20``) over 5 tenants. ``TRACKED_KEYED_JOBS`` sets the
number of jobs (default 1,000 so that the suite stays short; the issue's 3,000 was
measured with ``TRACKED_KEYED_JOBS=3000``, see docs/limits.md). ``pytest -s`` prints what
it measured."""

from __future__ import annotations

import os
import signal
from collections import defaultdict
from typing import Any

import pytest
from limit_tasks import PER_TENANT_BURST, PER_TENANT_S
from test_reaper_waiting import FAST_ENV
from tracked_app import QUEUE

from celery_tracked import JobStatus
from celery_tracked.core.rates import START_MARGIN_MS
from tests.conftest import wait_for

#: The queue the killed-worker run routes Beat's maintenance tasks to (docs/limits.md).
MAINTENANCE = "acc-maintenance"

TENANTS = [f"t{i}" for i in range(int(os.environ.get("TRACKED_KEYED_TENANTS", "5")))]
JOBS = int(os.environ.get("TRACKED_KEYED_JOBS", "1000"))
#: A body records ``time.time()`` as its first line, a few ms after its grant (Redis's
#: clock, the same host's): the limiter counts each window ``START_MARGIN_MS`` longer, so
#: the bodies' own start times keep the limit in any 1 s window while that latency stays
#: under it (docs/limits.md, "The guarantee").
WINDOW_S = 1 + START_MARGIN_MS / 1000
#: Pool processes per worker (TRACKED_KEYED_CHILDREN).
CHILDREN = int(os.environ.get("TRACKED_KEYED_CHILDREN", "2"))


def starts_by_tenant(
    env: Any, tenants: list[str] = TENANTS, skip: frozenset[str] = frozenset()
) -> dict[str, list[float]]:
    found: dict[str, list[float]] = defaultdict(list)
    for raw in env.redis.lrange("keyed:starts", 0, -1):
        at, tenant, job_id, _pid, _grant = raw.decode().split()
        if tenant in tenants and job_id not in skip:
            found[tenant].append(float(at))
    return {tenant: sorted(times) for tenant, times in found.items()}


PROBE = 300


def pool_capacity(env: Any, task: Any) -> float:
    """Starts per second the running workers manage with the limiter never binding: the
    same task, ``PROBE`` jobs of as many tenants (one start per key)."""
    tenants = [f"probe{i}" for i in range(PROBE)]
    ids = [task.enqueue(tenant_id=t, n=i).job_id for i, t in enumerate(tenants)]
    for job_id in ids:
        env.wait_status(job_id, "completed", timeout=120)
    starts = sorted(t for ts in starts_by_tenant(env, tenants).values() for t in ts)
    return (len(starts) - 1) / (starts[-1] - starts[0])


def grants_by_tenant(env: Any) -> dict[str, list[float]]:
    """The grant each body read (Redis's clock), by tenant."""
    found: dict[str, set[float]] = defaultdict(set)
    for raw in env.redis.lrange("keyed:starts", 0, -1):
        _at, tenant, _job_id, _pid, grant = raw.decode().split()
        if tenant in TENANTS:
            found[tenant].add(float(grant))
    return {tenant: sorted(times) for tenant, times in found.items()}


def latencies_ms(env: Any) -> list[float]:
    """Each body's start after the newest grant of its key it read (its own, or a later
    one: then negative)."""
    out = []
    for raw in env.redis.lrange("keyed:starts", 0, -1):
        at, _tenant, _job_id, _pid, grant = raw.decode().split()
        out.append(round((float(at) - float(grant)) * 1000, 1))
    return sorted(out)


def after_ramp_up(times: list[float]) -> float:
    """Starts per second from the end of the tenant's first second (the workers' processes
    still warming up: first connections, first imports) to its last start."""
    late = [at for at in times if at >= times[0] + 1.0]
    return (len(late) - 1) / (late[-1] - late[0])


def per_second(times: list[float]) -> list[int]:
    counts = [0] * (int(times[-1] - times[0]) + 1)
    for at in times:
        counts[int(at - times[0])] += 1
    return counts


def most_in(times: list[float], window_s: float) -> int:
    """The most starts in any window of ``window_s`` seconds (sliding, half-open)."""
    best, low = 0, 0
    for high, at in enumerate(times):
        while times[low] <= at - window_s:
            low += 1
        best = max(best, high - low + 1)
    return best


@pytest.mark.serial  # timing-critical (throughput, windows): run alone
@pytest.mark.parametrize("kill", [False, True], ids=["steady", "worker-killed"])
@pytest.mark.parametrize("lease_seconds", [3.0])
def test_per_tenant_limits_hold_across_workers(
    env: Any, start_worker: Any, start_beat: Any, kill: bool
) -> None:
    """``JOBS`` jobs of ``acc.per_tenant`` over 5 tenants, enqueued before 3 workers of 2
    pool processes start: no tenant gets more than 20 starts in any 1 s window of the
    bodies' own start times (nor more than 20 grants in any window of the limiter's, 1 s
    and its margin), each tenant's throughput over the whole run (its first start to its
    last) is within 10 % of 20/s (or of its share of what the pool can start, measured
    after the run, when that is less), waiting uses no attempt, each job runs once, and
    the re-publishes are bounded (at most two per job). With ``kill``, one worker is
    SIGKILLed (all its processes) a third of the way through; Beat runs the reaper at
    compressed thresholds, which re-sends the jobs whose messages died with it (held by
    its timer, waiting for their turn)."""
    task = env.task("acc.per_tenant")
    ids = [task.enqueue(tenant_id=TENANTS[n % len(TENANTS)], n=n).job_id for n in range(JOBS)]
    overrides = {
        "TRACKED_TEST_PER_TENANT_S": str(PER_TENANT_S),
        "TRACKED_TEST_PER_TENANT_BURST": str(PER_TENANT_BURST or ""),
    }
    queues = QUEUE
    if kill:  # the reaper on its own queue: Beat's runs are not queued behind the backlog
        overrides.update(FAST_ENV, TRACKED_TEST_MAINTENANCE_QUEUE=MAINTENANCE)
        start_beat({**FAST_ENV, "TRACKED_TEST_MAINTENANCE_QUEUE": MAINTENANCE})
        queues = f"{QUEUE},{MAINTENANCE}"
    workers = [
        start_worker(f"w{i}", concurrency=CHILDREN, environ=overrides, queues=queues, ready=False)
        for i in range(3)
    ]  # started together: none runs the first seconds alone
    for worker in workers:
        wait_for(lambda w=worker: " ready." in w.log(), timeout=60, what=f"{worker.name} ready")
    if kill:
        wait_for(lambda: env.redis.llen("keyed:starts") >= JOBS // 3, timeout=120, what="a third")
        os.killpg(workers[0].proc.pid, signal.SIGKILL)
        workers[0].proc.wait(timeout=10)
    wait_for(
        lambda: env.redis.llen("keyed:starts") >= JOBS,
        timeout=JOBS / (PER_TENANT_S * len(TENANTS)) * 3 + 120,
        what="every job started",
    )
    for job_id in ids if kill else ids[-50:]:  # (a rerun makes JOBS starts before the last)
        env.wait_status(job_id, "completed", timeout=60)
    capacity = pool_capacity(env, task)
    expected = min(PER_TENANT_S, capacity / len(TENANTS))
    found = starts_by_tenant(env)
    grants = {t: most_in(g, WINDOW_S) for t, g in grants_by_tenant(env).items()}
    total_s = max(ts[-1] for ts in found.values()) - min(ts[0] for ts in found.values())
    jobs = [env.tracker.get_job(j) for j in ids]
    republished = sum(1 for w in workers for r in w.records() if r["extra"].get("status") == "busy")
    whole = {t: (len(ts) - 1) / (ts[-1] - ts[0]) for t, ts in found.items()}
    rates = {t: after_ramp_up(ts) for t, ts in found.items()}
    # the jobs whose messages died with the killed worker: the reaper re-sends them only
    # once the queue's backlog has drained (before, a missing message may be in it)
    rescued = frozenset(
        j for j in (ids if kill else ()) if "rescued" in {e.event for e in env.tracker.history(j)}
    )
    if kill:
        rates = {t: after_ramp_up(ts) for t, ts in starts_by_tenant(env, skip=rescued).items()}
    most = {t: most_in(ts, 1.0) for t, ts in found.items()}
    attempts = sorted({j.attempts_made for j in jobs})
    print(
        f"\nkeyed limit {PER_TENANT_S}/s (burst {PER_TENANT_BURST}) per tenant, {JOBS} jobs, "
        f"{len(TENANTS)} tenants, "
        f"3 workers x {CHILDREN}"
        f"{' (one SIGKILLed)' if kill else ''}: {total_s:.1f} s"
        f"\n  throughput per tenant (/s): { {t: round(r, 2) for t, r in whole.items()} }"
        f"\n  ... after its first second{', the rescued jobs left out' if kill else ''}: "
        f"{ {t: round(r, 2) for t, r in rates.items()} } ({len(rescued)} rescued)"
        f"\n  the pool's own capacity: {capacity:.1f} starts/s ({expected:.1f}/s per tenant)"
        f"\n  {TENANTS[0]}'s starts per second: {per_second(found[TENANTS[0]])}"
        f"\n  most starts in any 1 s window: {most}"
        f"\n  most grants in any {WINDOW_S:.3f} s window: {grants}"
        f"\n  body start after the grant (ms): {latencies_ms(env)[:: max(1, JOBS // 20)]}"
        f"\n  attempts_made {attempts}, re-publishes {republished} "
        f"({republished / JOBS:.2f} per job), runs {sorted({env.ran(j) for j in ids})}"
    )
    started = {raw.decode().split()[2] for raw in env.redis.lrange("keyed:starts", 0, -1)}
    assert sorted(found) == TENANTS and started >= set(ids)
    # a body the kill interrupted runs again (its attempt 2): granted again, counted twice
    assert sum(len(ts) for ts in found.values()) == JOBS or kill
    assert max(grants.values()) <= PER_TENANT_S
    assert max(most.values()) <= PER_TENANT_S
    for tenant, rate in rates.items():
        assert rate <= PER_TENANT_S * 1.02, (tenant, rate)
        assert rate >= expected * 0.9, (tenant, rate, expected)
    assert all(j.status is JobStatus.COMPLETED and j.tenant in TENANTS for j in jobs)
    if not kill:
        assert attempts == [1]  # waiting used no attempt
        assert {env.ran(j) for j in ids} == {1}
    assert republished <= 2 * JOBS
