"""Acceptance: ``Tracker.wait`` woken by a real worker's notification.

The waiter's periodic re-read of the row (``Tracker.REREAD_S``) is raised to a minute, so
a wait that ends within seconds was woken by the notification the worker published when
it wrote the outcome (or ``Tracker.cancel``'s), never by a re-read.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from waiting import PROMPT_S, REREAD_S, Waiter

from celery_tracked import JobFailed, JobStatus

pytestmark = pytest.mark.usefixtures("slow_reread")


def test_wait_is_woken_by_the_worker_for_a_completed_and_a_failed_job(
    env: Any, start_worker: Any
) -> None:
    ok = env.task("acc.succeed").enqueue(x="waited").job_id
    bad = env.task("acc.unrecoverable").enqueue(x="waited").job_id
    # both waiters read the rows as pending long before any worker exists
    waiters = [Waiter.on(env, ok), Waiter.on(env, bad)]
    assert env.status(ok) == env.status(bad) == "pending"
    started = time.monotonic()

    start_worker()
    for waiter in waiters:
        waiter.join(timeout=25)
    elapsed = time.monotonic() - started
    assert elapsed < REREAD_S / 2, f"the waits took {elapsed:.1f}s: woken by a re-read?"

    completed, failed = waiters
    assert completed.error is None, completed.error
    assert completed.result == {"x": "waited", "run": 1}
    assert env.status(ok) == "completed"
    assert completed.latency() < PROMPT_S

    assert isinstance(failed.error, JobFailed), failed.error
    assert failed.error.job.id == bad
    assert failed.error.job.status is JobStatus.FAILED
    assert failed.error.job.error_type == "Unrecoverable"
    assert failed.latency() < PROMPT_S


def test_wait_on_a_job_cancelled_by_tracker_cancel_raises_job_failed_at_once(env: Any) -> None:
    job_id = env.task("acc.succeed").enqueue(x="to-cancel").job_id
    waiter = Waiter.on(env, job_id)

    assert env.tracker.cancel(job_id) is True
    waiter.join(timeout=PROMPT_S)

    assert isinstance(waiter.error, JobFailed), waiter.error
    assert waiter.error.job.status is JobStatus.CANCELLED
    assert waiter.latency() < PROMPT_S
    # a new wait on the ended job answers from the row at once
    before = time.monotonic()
    with pytest.raises(JobFailed) as info:
        env.tracker.wait(job_id, timeout=REREAD_S - 10)
    assert info.value.job.status is JobStatus.CANCELLED
    assert time.monotonic() - before < PROMPT_S
