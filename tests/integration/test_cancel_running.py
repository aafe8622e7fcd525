"""Cancelling a running job (``Tracker.cancel(job_id, running=True)``) on PostgreSQL and
SQLite, through the worker's ``Runner``: the request on the row, the fences it adds, the
body's ``self.cancelled()``, and every way a run asked to stop ends ``cancelled``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from celery_tracked import JobStatus, Tracker, Unrecoverable
from celery_tracked.core.attempt import Attempt
from celery_tracked.core.fences import AttemptError, Completion, Lease, Takeover
from celery_tracked.core.jobs import utcnow
from celery_tracked.core.messages import TrackedHeaders
from celery_tracked.core.outcomes import Completed, Skipped
from celery_tracked.core.run import Run
from celery_tracked.services import progress
from celery_tracked.services.lease import owner_id
from celery_tracked.services.reports import ProgressReporter
from tests.conftest import wait_for

from .conftest import AppFactory
from .test_lease_judgement import deliver, deliver_to
from .test_store import claim, new_job

#: ``Tracker.retry`` finalizes the app, and Celery then announces to it every ``app.task``
#: of the whole test session (``shared=True`` is Celery's default): the other test
#: modules' same-named local tasks would warn.
pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")


@pytest.fixture
def tracker(make_app: AppFactory) -> Iterator[Tracker]:
    yield Tracker.for_app(make_app(tracked_lease_seconds=30))


def events(tracker: Tracker, job_id: str) -> list[str]:
    return [e.event for e in tracker.history(job_id)]


def a_dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("ending", ["returns", "raises", "unrecoverable", "ignores"])
def test_a_run_asked_to_stop_ends_cancelled_whatever_its_body_does(
    tracker: Tracker, ending: str
) -> None:
    job_id = new_job(tracker._services.store)
    seen: list[Any] = []

    def body(running: Attempt) -> str:
        reporter = running.part(ProgressReporter)
        assert progress.cancel_requested(reporter) is False  # not asked yet (read at once)
        assert tracker.cancel(job_id, "operator", running=True) is True
        job = tracker.get_job(job_id)
        assert job is not None and job.status is JobStatus.PROCESSING  # its run goes on
        seen.append(job.cancel_requested_at)
        if ending != "ignores":
            # read again at most once a second: it turns True within about a second
            wait_for(lambda: progress.cancel_requested(reporter), timeout=5, what="the request")
            assert progress.cancel_requested(reporter) is True  # and stays True
        if ending == "raises":
            raise ConnectionError("a retryable error after the request")
        if ending == "unrecoverable":
            raise Unrecoverable("gave up")
        return "result"

    verdict = deliver_to(tracker, job_id, body)

    assert isinstance(verdict, Skipped), verdict
    assert seen[0] is not None
    job = tracker.get_job(job_id)
    assert job is not None and job.status is JobStatus.CANCELLED
    assert job.result_json is None and job.locked_by is None and job.finished_at is not None
    assert job.error_type is None and "cancelled while running" in (job.error_message or "")
    assert events(tracker, job_id) == ["enqueued", "started", "cancel_requested", "cancelled"]
    requested = tracker.history(job_id)[2]
    assert requested.status is JobStatus.PROCESSING and "operator" in (requested.message or "")


def test_the_request_fences_out_every_other_end_of_the_run(tracker: Tracker) -> None:
    store = tracker._services.store
    job_id = new_job(store)
    assert not store.request_cancel(job_id, now=utcnow(), message="x")  # pending: no request
    held = claim(store, job_id)
    assert held is not None
    assert store.request_cancel(job_id, now=utcnow(), message="x")
    assert not store.request_cancel(job_id, now=utcnow(), message="again")  # once
    assert not store.complete(held, Completion(result_json=None, now=utcnow(), duration_ms=1))
    assert not store.retrying(
        held,
        AttemptError(error_type="E", error_message="e", duration_ms=1, now=utcnow()),
        delay_ms=0,
    )
    assert not store.fail(
        held, AttemptError(error_type="E", error_message="e", duration_ms=1, now=utcnow())
    )
    assert store.release(held, utcnow())  # lease dropped: a takeover would be due...
    taken = store.take_over(
        job_id,
        Lease(owner="h:2", worker="w", now=utcnow(), lease_s=60),
        Takeover(seen_attempt=1, grace_s=0, stale_owner=None, reason="lost"),
    )
    assert taken is None  # ...but a job asked to stop is never run again
    assert store.cancel_run(held, now=utcnow(), message="cancelled while running")
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.CANCELLED


def test_a_run_already_gone_is_cancelled_at_once(tracker: Tracker) -> None:
    """Its process (on this host) died: nothing would ever end it."""
    job_id = new_job(tracker._services.store)
    assert claim(tracker._services.store, job_id, owner=owner_id(a_dead_pid()))
    assert tracker.cancel(job_id, running=True) is True
    job = tracker.get_job(job_id)
    assert job is not None and job.status is JobStatus.CANCELLED
    assert "its run was gone (its worker process died)" in (job.error_message or "")
    assert events(tracker, job_id)[-2:] == ["cancel_requested", "cancelled"]


def test_a_redelivery_of_a_job_asked_to_stop_runs_nothing_and_cancels_it(
    tracker: Tracker,
) -> None:
    """The worker died after the request (before anything ended the run): the broker's
    redelivery takes the lapsed lease over only to end the job ``cancelled``."""
    store = tracker._services.store
    job_id = new_job(store)
    assert claim(store, job_id, owner=owner_id(a_dead_pid()))
    assert store.request_cancel(job_id, now=utcnow(), message="cancel requested")
    bodies: list[str] = []

    verdict = deliver(tracker, job_id, lambda: bodies.append("ran"))

    assert isinstance(verdict, Skipped) and bodies == []
    job = tracker.get_job(job_id)
    assert job is not None and job.status is JobStatus.CANCELLED and job.attempts_made == 1


def test_a_hard_time_limit_after_the_request_cancels_instead_of_retrying(
    tracker: Tracker,
) -> None:
    store = tracker._services.store
    job_id = new_job(store)
    dead = owner_id(a_dead_pid())
    assert claim(store, job_id, owner=dead)
    assert store.request_cancel(job_id, now=utcnow(), message="cancel requested")
    job = store.get(job_id)
    assert job is not None
    republished: list[Any] = []

    tracker._services.time_limits.end_time_limited(
        job, dead, "hard time limit", 100, lambda j, c: republished.append(j)
    )

    assert republished == []
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.CANCELLED


def test_cancel_running_keeps_the_meaning_of_cancel_for_other_statuses(
    tracker: Tracker,
) -> None:
    store = tracker._services.store
    waiting = new_job(store)
    assert tracker.cancel(waiting, running=True) is True  # pending: cancelled now
    assert tracker.get_job(waiting).status is JobStatus.CANCELLED  # type: ignore[union-attr]
    assert "cancel_requested" not in events(tracker, waiting)
    done = new_job(store)
    held = claim(store, done)
    assert held is not None
    assert store.complete(held, Completion(result_json=None, now=utcnow(), duration_ms=1))
    assert tracker.cancel(done, running=True) is False
    assert tracker.cancel("no-such-job", running=True) is False
    running = new_job(store)
    assert claim(store, running)
    assert tracker.cancel(running) is False  # without running=True: never interrupted
    assert tracker.get_job(running).cancel_requested_at is None  # type: ignore[union-attr]


def test_a_retried_job_is_not_cancelled_by_its_old_request(tracker: Tracker) -> None:
    job_id = new_job(tracker._services.store)

    def body() -> str:
        tracker.cancel(job_id, running=True)
        return "first"

    assert isinstance(deliver(tracker, job_id, body), Skipped)
    assert tracker.retry(job_id) is True
    job = tracker.get_job(job_id)
    assert job is not None and job.status is JobStatus.PENDING
    assert job.cancel_requested_at is None

    run = Run(
        headers=TrackedHeaders(job_id, job_id, None, "q", revision=job.revision),
        task_name="t",
        job_type="t",
        queue="q",
        worker="w@host",
        backoff_base_ms=100,
        secrets=lambda: [],
    )
    assert tracker._services.runner.run(run, lambda running: "second") == Completed("second")
    assert tracker.get_job(job_id).result == "second"  # type: ignore[union-attr]
