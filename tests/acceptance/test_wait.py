"""Acceptance: ``Tracker.wait`` woken by a real worker's notification.

The waiter's periodic re-read of the row (``Tracker.REREAD_S``) is raised to a minute, so
a wait that ends within seconds was woken by the notification the worker published when
it wrote the outcome (or ``Tracker.cancel``'s), never by a re-read.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from celery_tracked import JobFailed, JobStatus, Tracker
from tests.conftest import wait_for

REREAD_S = 60.0
#: how long after the job ended a notified waiter must have returned (a re-read: 60 s)
PROMPT_S = 5.0


@pytest.fixture(autouse=True)
def slow_reread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Tracker, "REREAD_S", REREAD_S)


class Waiter:
    """``tracker.wait(job_id)`` in a thread; records the outcome and when it came."""

    def __init__(self, env: Any, job_id: str, timeout: float = REREAD_S - 10) -> None:
        self.env = env
        self.job_id = job_id
        self.result: Any = None
        self.error: BaseException | None = None
        self.ended_at: float | None = None
        self._thread = threading.Thread(target=self._run, args=(timeout,), daemon=True)

    def _run(self, timeout: float) -> None:
        try:
            self.result = self.env.tracker.wait(self.job_id, timeout=timeout)
        except BaseException as exc:  # examined by the test
            self.error = exc
        self.ended_at = time.time()

    def start(self) -> Waiter:
        """Start waiting; return once the waiter listens on a channel naming the job and
        has had a moment to read the row (``wait`` subscribes before it reads)."""
        self._thread.start()
        wait_for(
            lambda: any(self.job_id in c.decode() for c in self.env.redis.pubsub_channels()),
            timeout=10,
            what=f"the waiter of {self.job_id} to subscribe",
        )
        return self

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"wait({self.job_id}) still blocked after {timeout}s"

    def latency(self) -> float:
        """Seconds between the job's end (``finished_at``, the database's clock, same
        host) and the wait's return."""
        job = self.env.tracker.get_job(self.job_id)
        assert job.finished_at is not None and self.ended_at is not None
        return self.ended_at - job.finished_at.timestamp()


def test_wait_is_woken_by_the_worker_for_a_completed_and_a_failed_job(
    env: Any, start_worker: Any
) -> None:
    ok = env.task("acc.succeed").enqueue(x="waited").job_id
    bad = env.task("acc.unrecoverable").enqueue(x="waited").job_id
    # both waiters read the rows as pending long before any worker exists
    waiters = [Waiter(env, ok).start(), Waiter(env, bad).start()]
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
    waiter = Waiter(env, job_id).start()

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
