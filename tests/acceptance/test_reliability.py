"""Acceptance: ordinary production faults around a running job (issue 6).

A paused pool child whose lease lapses, a duplicate copy of a message.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from celery_tracked import JobStatus
from celery_tracked.lease import process_alive
from tests.conftest import wait_for

LEASE_S = 2.0


def steps_of(env: Any, job_id: str) -> list[tuple[int, int, float]]:
    """``(pid, run, time)`` of every step the ``acc.stepper`` bodies took."""
    out = []
    for raw in env.redis.lrange(f"steps:{job_id}", 0, -1):
        pid, run, at = raw.decode().split()
        out.append((int(pid), int(run), float(at)))
    return out


def run_pid(env: Any, job_id: str, run: int) -> int:
    found = wait_for(
        lambda: env.redis.get(f"pid:{job_id}:{run}"), timeout=20, what=f"run {run}'s pid"
    )
    return int(found)


@pytest.mark.parametrize("lease_seconds", [LEASE_S])
def test_a_paused_run_whose_lease_was_taken_over_stops_before_its_next_step(
    env: Any, start_worker: Any
) -> None:
    """SIGSTOP past the lease, a copy of the message takes over; after SIGCONT the paused
    run takes no further step and writes nothing; the job completes once."""
    start_worker(concurrency=2)
    job_id = env.task("acc.stepper").enqueue(x="pause", steps=30).job_id
    first = run_pid(env, job_id, 1)
    wait_for(lambda: len(steps_of(env, job_id)) >= 3, timeout=20, what="run 1 to take steps")

    os.kill(first, signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        env.redeliver("acc.stepper", job_id, x="pause", steps=30)
        wait_for(
            lambda: any(run == 2 for _, run, _ in steps_of(env, job_id)),
            timeout=30,
            what="the copy to take over and step",
        )
        # paused well past the lease: the paused run can no longer prove it holds it
        time.sleep(max(0.0, 2 * LEASE_S - (time.monotonic() - paused_at)))
    finally:
        resumed_at = time.time()
        os.kill(first, signal.SIGCONT)

    wait_for(lambda: not process_alive(first), timeout=10, what="the paused run to stop")
    late = [at for pid, _, at in steps_of(env, job_id) if pid == first and at >= resumed_at]
    assert late == [], "the paused run took steps after it was resumed"

    job = env.wait_status(job_id, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 2
    assert job.result == {"x": "pause", "run": 2}
    history = env.tracker.history(job_id)
    assert [e.event for e in history] == ["enqueued", "started", "redelivered", "completed"]
    assert [e.attempt for e in history] == [0, 1, 2, 2]


@pytest.mark.parametrize("lease_seconds", [LEASE_S])
def test_a_pause_shorter_than_the_lease_changes_nothing(env: Any, start_worker: Any) -> None:
    worker = start_worker(concurrency=2)
    job_id = env.task("acc.stepper").enqueue(x="short", steps=20).job_id
    first = run_pid(env, job_id, 1)
    wait_for(lambda: len(steps_of(env, job_id)) >= 3, timeout=20, what="run 1 to take steps")

    os.kill(first, signal.SIGSTOP)
    try:
        env.redeliver("acc.stepper", job_id, x="short", steps=20)
        time.sleep(LEASE_S / 4)  # the pause itself: well inside the lease
    finally:
        os.kill(first, signal.SIGCONT)

    job = env.wait_status(job_id, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 1
    assert env.ran(job_id) == 1
    assert {pid for pid, _, _ in steps_of(env, job_id)} == {first}
    assert len(steps_of(env, job_id)) == 20
    assert process_alive(first)
    wait_for(lambda: worker.records_of(job_id, "skipped"), timeout=20, what="the copy skipped")
    assert [e.event for e in env.tracker.history(job_id)] == ["enqueued", "started", "completed"]
