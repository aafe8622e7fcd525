"""The global rate limiter and per-key concurrency limits (issue 8, item 3), with real
``celery worker`` processes, Redis and PostgreSQL. Each test prints what it measured
(``pytest -s`` shows it)."""

from __future__ import annotations

import itertools
import os
import signal
import time
from datetime import timedelta
from typing import Any

import pytest
from limit_tasks import LIMIT_MS

from celery_tracked import JobStatus
from tests.conftest import wait_for

JOBS = 20


def starts(env: Any) -> list[tuple[float, int, str]]:
    out = []
    for raw in env.redis.lrange("limited:starts", 0, -1):
        at, pid, job_id = raw.decode().split()
        out.append((float(at), int(pid), job_id))
    return sorted(out)


def test_the_global_limiter_spaces_bodies_across_two_workers(env: Any, start_worker: Any) -> None:
    """20 jobs of ``acc.limited`` (limiter ``acc-limiter``, 200 ms) over two worker
    processes of one pool process each: every body starts at least 200 ms after the one
    before, each job used one attempt, and a job that is not limited, enqueued behind
    them, runs while they wait (no pool process holds a waiting job)."""
    workers = [start_worker("w1", concurrency=1), start_worker("w2", concurrency=1)]
    limited = env.task("acc.limited")
    began = time.time()
    ids = [limited.enqueue(n=i).job_id for i in range(JOBS)]
    quick = env.task("acc.succeed").enqueue(x="not limited").job_id

    done = env.wait_status(quick, "completed", timeout=20)
    quick_s = done.finished_at.timestamp() - began
    started_before_quick = sum(1 for at, _, _ in starts(env) if at < done.finished_at.timestamp())
    for job_id in ids:
        env.wait_status(job_id, "completed", timeout=60)
    total_s = time.time() - began

    found = starts(env)
    gaps_ms = [round((b[0] - a[0]) * 1000, 1) for a, b in itertools.pairwise(found)]
    jobs = [env.tracker.get_job(j) for j in ids]
    postponed = sum(len(w.records_of(j, "busy")) for w in workers for j in ids)
    pids = {pid for _, pid, _ in found}
    print(
        f"\nglobal limiter {LIMIT_MS} ms, {JOBS} jobs, 2 workers x 1 pool process:"
        f"\n  start gaps (ms): {gaps_ms}"
        f"\n  min gap {min(gaps_ms)} ms, total {total_s:.2f} s, pool processes {len(pids)}"
        f"\n  attempts_made {sorted({j.attempts_made for j in jobs})}, "
        f"postponements {postponed}"
        f"\n  the unlimited job completed after {quick_s:.2f} s, when "
        f"{started_before_quick}/{JOBS} limited bodies had started"
    )
    assert len(found) == JOBS and {j for _, _, j in found} == set(ids)
    assert min(gaps_ms) >= LIMIT_MS
    assert {j.attempts_made for j in jobs} == {1}
    assert all(j.status is JobStatus.COMPLETED for j in jobs)
    assert {env.ran(j) for j in ids} == {1}
    assert postponed >= JOBS - 1  # every job but the first waited for its slot
    assert len(pids) == 2  # both workers ran limited bodies
    # the waiting jobs held no pool process: the unlimited one ran long before they ended
    assert started_before_quick < JOBS // 2
    assert total_s >= (JOBS - 1) * LIMIT_MS / 1000


def spans_of(env: Any, ids: list[str]) -> list[tuple[float, float, str]]:
    return sorted((start, end, j) for j in ids for _, start, end in env.spans(j))


def test_a_concurrency_key_runs_one_job_at_a_time_across_two_workers(
    env: Any, start_worker: Any
) -> None:
    """``acc.one_per_group`` (key ``group:{group}``, limit 1): four jobs each of groups
    a and b over two workers of two pool processes: never two of one group at once, the
    two groups side by side, one attempt each."""
    start_worker("w1", concurrency=2)
    start_worker("w2", concurrency=2)
    task = env.task("acc.one_per_group")
    groups = {g: [task.enqueue(group=g, n=i, sleep=0.3).job_id for i in range(4)] for g in "ab"}
    for ids in groups.values():
        for job_id in ids:
            env.wait_status(job_id, "completed", timeout=60)

    spans = {g: spans_of(env, ids) for g, ids in groups.items()}
    for g, found in spans.items():
        print(f"\ngroup {g}: " + ", ".join(f"{s % 100:.2f}-{e % 100:.2f}" for s, e, _ in found))
        assert len(found) == 4
        for (_, end, _), (start, _, _) in itertools.pairwise(found):
            assert start >= end, f"two jobs of group {g} overlapped: {found}"
    # across groups they do overlap: the key limits its own jobs only
    assert any(sa < eb and sb < ea for sa, ea, _ in spans["a"] for sb, eb, _ in spans["b"]), spans
    jobs = [env.tracker.get_job(j) for ids in groups.values() for j in ids]
    assert {j.attempts_made for j in jobs} == {1}
    assert {j.concurrency_key for j in jobs} == {"group:a", "group:b"}


@pytest.mark.parametrize("lease_seconds", [3.0])
def test_a_killed_worker_blocks_its_key_only_until_its_lease_lapses(
    env: Any, start_worker: Any
) -> None:
    """Worker 1 runs job A of group k and is SIGKILLed (all its processes): nothing frees
    A's slot but its lease. Job B of group k, on worker 2, waits until A's lease lapses,
    then runs at once (one attempt)."""
    w1 = start_worker("w1", concurrency=1)
    task = env.task("acc.one_per_group")
    a = task.enqueue(group="k", n=0, hang=True).job_id
    wait_for(lambda: env.redis.get(f"pid:{a}"), timeout=20, what="job A running")
    start_worker("w2", concurrency=1)

    os.killpg(w1.proc.pid, signal.SIGKILL)
    w1.proc.wait(timeout=10)
    killed = env.tracker.get_job(a)
    assert killed.status is JobStatus.PROCESSING and killed.locked_until is not None
    b = task.enqueue(group="k", n=1).job_id
    job_b = env.wait_status(b, "completed", timeout=30)

    after_lapse = (job_b.started_at - killed.locked_until).total_seconds()
    print(
        f"\nA's lease lapsed at {killed.locked_until:%H:%M:%S.%f}; B started "
        f"{after_lapse:+.3f} s after it, attempts_made {job_b.attempts_made}"
    )
    assert job_b.started_at >= killed.locked_until - timedelta(milliseconds=50)
    assert after_lapse < 2.0  # polled again within a second of the lapse
    assert job_b.attempts_made == 1 and env.ran(b) == 1
    assert env.status(a) == "processing"  # A's own message waits for a worker to restore it
