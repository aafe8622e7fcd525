"""Who may run a job, judged by the real database (PostgreSQL and SQLite) through the
worker's ``Runner``: one clock (the database's), an owner identity unique per boot, and
the backoff of a ``retrying`` job (issue 6, items 10, 11, 13).

A duplicate delivery is simulated in-process: the first run's body delivers the same job
again, as a second worker would while the first still runs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

import celery_tracked.services.lease
import celery_tracked.services.runner
from celery_tracked import JobStatus, Tracker
from celery_tracked.core.attempt import Attempt
from celery_tracked.core.jobs import utcnow
from celery_tracked.core.messages import TrackedHeaders
from celery_tracked.core.outcomes import Completed, Postponed, Retrying, Verdict
from celery_tracked.core.run import Run

from .conftest import AppFactory
from .test_store import new_job


@pytest.fixture
def tracker(make_app: AppFactory) -> Iterator[Tracker]:
    app = make_app(tracked_lease_seconds=30)
    yield Tracker.for_app(app)


def deliver(
    tracker: Tracker,
    job_id: str,
    body: Callable[[], Any],
    backoff_ms: int = 100,
    revision: int = 0,
) -> Verdict:
    return deliver_to(tracker, job_id, lambda running: body(), backoff_ms, revision)


def deliver_to(
    tracker: Tracker,
    job_id: str,
    body: Callable[[Attempt], Any],
    backoff_ms: int = 100,
    revision: int = 0,
) -> Verdict:
    """``deliver``, the body given its running attempt."""
    run = Run(
        headers=TrackedHeaders(job_id, job_id, None, "q", revision=revision),
        task_name="t",
        job_type="t",
        queue="q",
        worker="w@host",
        backoff_base_ms=backoff_ms,
        secrets=lambda: [],
    )
    return tracker._services.runner.run(run, body)


def skewed(monkeypatch: pytest.MonkeyPatch, by: timedelta) -> None:
    """This worker's clock runs ``by`` off the database's."""

    def clock() -> datetime:
        return utcnow() + by

    for module in (celery_tracked.services.runner, celery_tracked.services.lease):
        monkeypatch.setattr(module, "utcnow", clock, raising=False)


@pytest.mark.parametrize("skewed_run", ["first", "duplicate"])
def test_a_skewed_worker_clock_never_lets_a_live_run_be_taken_over(
    tracker: Tracker, monkeypatch: pytest.MonkeyPatch, skewed_run: str
) -> None:
    """Item 10: the first run's clock 10 minutes behind, or the duplicate's 10 minutes
    ahead, far beyond the 30 s lease: the live run keeps its lease."""
    job_id = new_job(tracker._services.store)
    duplicate: list[Verdict] = []
    bodies: list[str] = []

    def second() -> str:
        bodies.append("second")
        return "second"

    def first() -> str:
        bodies.append("first")
        with monkeypatch.context() as m:  # the duplicate's own clock
            skewed(m, timedelta(minutes=10 if skewed_run == "duplicate" else 0))
            duplicate.append(deliver(tracker, job_id, second))
        return "first"

    with monkeypatch.context() as m:
        if skewed_run == "first":
            skewed(m, timedelta(minutes=-10))
        verdict = deliver(tracker, job_id, first)

    assert bodies == ["first"]
    assert isinstance(duplicate[0], Postponed), duplicate[0]
    assert verdict == Completed("first")
    job = tracker.get_job(job_id)
    assert job is not None and (job.status, job.attempts_made) == (JobStatus.COMPLETED, 1)


def boot_id() -> str:
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def a_dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_holder_on_another_boot_with_the_same_hostname_is_never_judged_dead(
    tracker: Tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 11: a cloned VM (same hostname, same root PID namespace inode, another boot)
    runs the job under a pid that does not exist here: only its lease expiry counts."""
    foreign_host = celery_tracked.services.lease.HOST_ID.replace(boot_id(), "0" * 36)
    foreign = f"{foreign_host}:{a_dead_pid()}"
    job_id = new_job(tracker._services.store)
    duplicate: list[Verdict] = []

    def first() -> str:
        duplicate.append(deliver(tracker, job_id, lambda: "second"))
        return "first"

    with monkeypatch.context() as m:
        m.setattr(celery_tracked.services.runner, "owner_id", lambda: foreign)  # the clone's claim
        verdict = deliver(tracker, job_id, first)

    assert isinstance(duplicate[0], Postponed), duplicate[0]
    assert verdict == Completed("first")
    assert celery_tracked.services.lease.owner_id() != foreign


def test_a_duplicate_copy_never_claims_a_retrying_job_before_its_backoff_is_due(
    tracker: Tracker,
) -> None:
    """Item 13: attempt 1 failed with a 60 s backoff; a copy of the message delivered now
    is postponed until the backoff is due, and runs no body."""
    job_id = new_job(tracker._services.store)

    def fails() -> None:
        raise ConnectionError("transient")

    first = deliver(tracker, job_id, fails, backoff_ms=60_000)
    assert isinstance(first, Retrying)
    bodies: list[str] = []

    copy = deliver(tracker, job_id, lambda: bodies.append("copy"))

    assert bodies == []
    assert isinstance(copy, Postponed), copy
    assert copy.countdown > 30
    job = tracker.get_job(job_id)
    assert job is not None and (job.status, job.attempts_made) == (JobStatus.RETRYING, 1)


RELAY = "relay:host:boot:ns:1:ab12cd34"


def test_a_delivery_racing_the_relay_is_postponed_for_the_relay_then_runs(
    tracker: Tracker,
) -> None:
    """Issue 14: the relay holds a pending row while it publishes the row's message; a
    delivery arriving meanwhile (the producer's own message) waits for the relay, saying
    so (not "claimed concurrently"), uses no attempt, and runs once the relay let go."""
    job_id = new_job(tracker._services.store)
    now = utcnow()
    later = now + timedelta(hours=1)
    assert tracker._services.store.relay_claim(
        job_id, owner=RELAY, now=now, lease_s=30, cutoff=later
    )
    bodies: list[str] = []

    racing = deliver(tracker, job_id, lambda: bodies.append("racing"))

    assert isinstance(racing, Postponed), racing
    assert racing.reason.startswith("the relay is publishing its message"), racing.reason
    assert 0 < racing.countdown <= 1
    job = tracker.get_job(job_id)
    assert job is not None and (job.status, job.attempts_made) == (JobStatus.PENDING, 0)
    assert (job.locked_by, bodies) == (RELAY, [])

    assert tracker._services.store.relayed(job_id, owner=RELAY, now=utcnow(), message="relayed")
    assert deliver(tracker, job_id, lambda: "ran") == Completed("ran")


def test_a_retrying_due_time_and_a_run_lease_are_each_read_from_their_own_column(
    tracker: Tracker,
) -> None:
    """Issue 14: a ``retrying`` row keeps its due time in ``not_before`` and holds no lease;
    a claim uses the due time up and takes a lease in ``locked_until``."""
    job_id = new_job(tracker._services.store)

    def fails() -> None:
        raise ConnectionError("transient")

    assert isinstance(deliver(tracker, job_id, fails, backoff_ms=60_000), Retrying)
    waiting = tracker.get_job(job_id)
    assert waiting is not None and waiting.status is JobStatus.RETRYING
    assert (waiting.locked_by, waiting.locked_until) == (None, None)
    assert waiting.not_before is not None
    due_in = (waiting.not_before - tracker._services.store.clock()).total_seconds()
    assert 30 < due_in <= 120  # 60 s with its jitter

    early = deliver(tracker, job_id, lambda: "early")
    assert isinstance(early, Postponed) and early.reason == "its backoff is not due"
    assert due_in - 5 < early.countdown <= due_in

    seen: list[Any] = []

    def body() -> str:
        seen.append(tracker.get_job(job_id))
        return "done"

    tracker._services.store.rescue_waiting(  # the reaper's rescue: due at once
        waiting, cutoff=utcnow() + timedelta(hours=1), message="rescued", now=utcnow()
    )
    rescued = tracker.get_job(job_id)
    assert rescued is not None and rescued.not_before is not None
    assert rescued.not_before <= tracker._services.store.clock() and rescued.locked_until is None
    assert deliver(tracker, job_id, body, revision=rescued.revision) == Completed("done")
    running = seen[0]
    assert (running.status, running.not_before) == (JobStatus.PROCESSING, None)
    assert (
        running.locked_until is not None and running.locked_until > tracker._services.store.clock()
    )
