"""Runs Celery killed outside their call path (hard time limit, ``revoke(terminate=True)``)
are ended from the worker's main process, fenced to the killed run (PostgreSQL, SQLite)."""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from celery_tracked import JobStatus, Settings
from celery_tracked.core.hooks import Hooks
from celery_tracked.core.jobs import Job, utcnow
from celery_tracked.core.moves import DeadRun, Lease, Takeover
from celery_tracked.services import time_limits as time_limits_module
from celery_tracked.services.lease import owner_id
from celery_tracked.services.time_limits import TimeLimits
from celery_tracked.store import JobStore

from ..conftest import wait_for
from .test_store import claim, new_job


@pytest.fixture
def store(database_url: str) -> Iterator[JobStore]:
    s = JobStore(database_url)
    yield s
    s.dispose()


@pytest.fixture
def time_limits(store: JobStore) -> TimeLimits:
    return TimeLimits(store, Hooks(), Settings(redis_url="memory://"))


def _SECOND(attempt: int) -> int:
    return 1000


def dead_owner() -> str:
    """The owner id of a process of this host that has exited (and was reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return owner_id(proc.pid)


def killed_run(store: JobStore, max_attempts: int = 3) -> tuple[str, str]:
    job_id = new_job(store, max_attempts=max_attempts)
    owner = dead_owner()
    assert claim(store, job_id, owner=owner) is not None
    return job_id, owner


def test_a_time_limited_run_with_attempts_left_is_retried_and_republished(
    store: JobStore, time_limits: TimeLimits
) -> None:
    job_id, owner = killed_run(store)
    found = time_limits.dead_run(job_id)
    assert found is not None and found[1] == owner
    sent: list[tuple[str, float]] = []
    asked: list[int] = []

    def delay(attempt: int) -> int:  # the task's retry policy
        asked.append(attempt)
        return 1500

    time_limits.end_time_limited(
        *found, "hard time limit", delay, lambda j, c: sent.append((j.id, c))
    )
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.RETRYING
    assert job.error_type == "TimeLimitExceeded"
    assert job.locked_by is None
    assert asked == [1] and sent == [(job_id, 1.5)]
    retrying = store.events(job_id)[-1]
    assert retrying.event == "retrying" and retrying.message.startswith("retry in 1500 ms")


def test_a_time_limited_last_attempt_fails_with_its_own_error_type(
    store: JobStore, time_limits: TimeLimits
) -> None:
    job_id, _ = killed_run(store, max_attempts=1)
    found = time_limits.dead_run(job_id)
    assert found is not None
    sent: list[Any] = []
    time_limits.end_time_limited(*found, "hard time limit", _SECOND, lambda j, c: sent.append(j))
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.FAILED
    assert job.error_type == "TimeLimitExceeded" and sent == []
    assert job.finished_at is not None


def test_a_retry_that_cannot_be_published_fails_the_job(
    store: JobStore, time_limits: TimeLimits
) -> None:
    job_id, _ = killed_run(store)
    found = time_limits.dead_run(job_id)
    assert found is not None

    def refuse(job: Job, countdown: float) -> None:
        raise ConnectionError("broker down")

    time_limits.end_time_limited(*found, "hard time limit", _SECOND, refuse)
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.FAILED
    assert "could not be published: broker down" in (job.error_message or "")


def test_a_run_that_moved_on_is_never_overwritten(store: JobStore, time_limits: TimeLimits) -> None:
    job_id, owner = killed_run(store)
    found = time_limits.dead_run(job_id)
    assert found is not None
    # meanwhile a redelivery took the job over (attempt 2, a live owner)
    now = utcnow()
    taken = store.take_over(
        job_id,
        Lease(owner=owner_id(), worker="w", now=now, lease_s=60),
        Takeover(seen_attempt=1, grace_s=0, stale_owner=owner, reason="dead"),
    )
    assert taken is not None and taken.attempt == 2
    time_limits.end_time_limited(*found, "hard time limit", _SECOND, lambda j, c: None)
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.PROCESSING and job.attempts_made == 2
    assert not store.end_dead_run(
        job_id,
        DeadRun(
            seen_attempt=1,
            stale_owner=owner,
            status=JobStatus.CANCELLED,
            error_type=None,
            error_message=None,
            message="late",
            now=utcnow(),
        ),
    )


def test_a_live_holder_or_a_foreign_host_is_left_to_its_lease(
    store: JobStore, time_limits: TimeLimits, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time_limits_module, "DEATH_WAIT_S", 0.3)
    live = new_job(store)
    assert claim(store, live, owner=owner_id()) is not None  # this very process: alive
    assert time_limits.dead_run(live) is None
    foreign = new_job(store)
    assert claim(store, foreign, owner="elsewhere:1:1") is not None
    assert time_limits.dead_run(foreign) is None
    assert time_limits.dead_run(str(uuid.uuid4())) is None


def test_a_terminated_run_is_cancelled_once_its_process_is_gone(
    store: JobStore, time_limits: TimeLimits
) -> None:
    job_id = new_job(store)
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert claim(store, job_id, owner=owner_id(child.pid)) is not None
        time_limits.terminated(job_id)  # waits in a thread for the holder to die
        job = store.get(job_id)
        assert job is not None and job.status is JobStatus.PROCESSING
    finally:
        child.kill()
        child.wait()

    def cancelled() -> bool:
        job = store.get(job_id)
        return job is not None and job.status is JobStatus.CANCELLED

    wait_for(cancelled, timeout=10, what="the terminated run to be cancelled")
    job = store.get(job_id)
    assert job is not None and job.locked_by is None and job.finished_at is not None
    assert [e.event for e in store.events(job_id)][-1] == "cancelled"


def test_the_store_is_made_in_the_calling_thread_before_the_wait(
    store: JobStore, time_limits: TimeLimits, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's main thread forks pool children: the store's engines must be made
    there, never first in the waiting thread (a child forked meanwhile inherited their
    lock held and hung at its first claim until the hard time limit killed it)."""
    threads: list[str] = []
    made = store.engines.get

    def get() -> Any:
        threads.append(threading.current_thread().name)
        return made()

    monkeypatch.setattr(store.engines, "get", get)
    time_limits.time_limited(str(uuid.uuid4()), 2, _SECOND, lambda j, c: None)
    assert threads[:1] == [threading.current_thread().name]
