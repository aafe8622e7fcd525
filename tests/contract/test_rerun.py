"""``Tracker.retry`` and ``Tracker.cancel`` (``RerunStore``): a retry and its undo, a
resent job, a fail-soft successor, cancels, sealed values of a retry."""

from __future__ import annotations

from datetime import timedelta

from celery_tracked.core.fences import AttemptError, Lease, RetryUndo
from celery_tracked.core.jobs import JobStatus, NewRow, utcnow
from celery_tracked.core.ports import Store
from tests.contract.conftest import (
    OWNER,
    WORKER,
    claimed,
    completed,
    event_names,
    job_row,
    new_job,
    sealed,
)


def test_a_retry_sends_an_ended_job_again_and_its_undo_restores_it(store: Store) -> None:
    job_id = new_job(store, idempotency_key="k-1", max_attempts=1)
    error = AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow())
    assert store.fail(claimed(store, job_id), error, retries_exhausted=True)
    failed = store.get(job_id)
    assert failed is not None
    assert not store.retry(job_id, seen_revision=1, budget=2, now=utcnow(), message="stale")
    assert store.retry(job_id, seen_revision=0, budget=2, now=utcnow(), message="by hand")
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.PENDING
    assert (job.revision, job.max_attempts, job.attempts_made) == (1, 3, 1)
    assert job.finished_at is None and job.started_at is None and not job.retries_exhausted
    assert store.retry_rounds(job_id) == [("retried", 1)]
    undo = RetryUndo(
        made=1, status=JobStatus.FAILED, max_attempts=1, finished_at=failed.finished_at,
        retries_exhausted=True,
    )  # fmt: skip
    assert store.undo_retry(job_id, undo, now=utcnow(), message="publish failed")
    job = store.get(job_id)
    assert job is not None and (job.status, job.max_attempts) == (JobStatus.FAILED, 1)
    assert job.retries_exhausted and job.finished_at == failed.finished_at
    assert store.retry_rounds(job_id) == [("retried", 1), ("retry_undone", 1)]
    assert event_names(store, job_id)[-2:] == ["retried", "retry_undone"]
    new_job(store, idempotency_key="k-1", key_round=1)  # a newer round holds the key
    assert not store.retry(job_id, seen_revision=1, budget=1, now=utcnow(), message="again")


def test_a_resent_completed_job_runs_again_with_the_resent_arguments(store: Store) -> None:
    """A re-send of an ended job's id (issue 24): ``retry`` with ``completed_too`` moves a
    completed job too, with the re-sent call's payload; ``Tracker.retry``'s (without it)
    never moves a completed job. Its undo gives the completed job its payload back."""
    job_id = completed(store, 1, payload_json='{"args": [1], "kwargs": {}}')
    done = store.get(job_id)
    assert done is not None and done.status is JobStatus.COMPLETED
    assert not store.retry(job_id, seen_revision=0, budget=2, now=utcnow(), message="no")
    resent = '{"args": [2], "kwargs": {}}'
    assert store.retry(
        job_id, seen_revision=0, budget=2, now=utcnow(), message="re-sent",
        payload_json=resent, completed_too=True,
    )  # fmt: skip
    job = store.get(job_id)
    assert job is not None and (job.status, job.revision) == (JobStatus.PENDING, 1)
    assert (job.payload_json, job.max_attempts, job.finished_at) == (resent, 3, None)
    assert store.retry_rounds(job_id) == [("retried", 1)]
    undo = RetryUndo(
        made=1, status=JobStatus.COMPLETED, max_attempts=done.max_attempts,
        finished_at=done.finished_at, payload_json=done.payload_json,
    )  # fmt: skip
    assert store.undo_retry(job_id, undo, now=utcnow(), message="publish failed")
    job = store.get(job_id)
    assert job is not None and (job.status, job.payload_json) == (
        JobStatus.COMPLETED,
        done.payload_json,
    )
    assert job.finished_at == done.finished_at


def test_the_fail_soft_successor_of_a_step_is_found_by_its_note(store: Store) -> None:
    step = new_job(store)
    assert store.fail_soft_successor(store.get(step), "fail-soft") is None  # type: ignore[arg-type]
    new_job(store, correlation_id=step, parent_job_id=step)  # not from its failure
    claim = claimed(store, step)
    later_one = job_row(correlation_id=step, parent_job_id=step)
    rows = [NewRow("background_jobs", later_one, new_job=True, message="fail-soft")]
    assert store.fail(
        claim,
        AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow()),
        rows=rows,
    )
    found = store.fail_soft_successor(store.get(step), "fail-soft")  # type: ignore[arg-type]
    assert found is not None and found.id == later_one["id"]
    assert store.fail_soft_successor(store.get(step), "other note") is None  # type: ignore[arg-type]


def test_a_waiting_job_is_cancelled_and_a_running_one_is_not(store: Store) -> None:
    waiting, running = new_job(store), new_job(store)
    claimed(store, running)
    assert not store.cancel(waiting, now=utcnow(), reason="expired", revision=1)
    assert store.cancel(waiting, now=utcnow(), reason="by hand", revision=0)
    assert not store.cancel(running, now=utcnow(), reason="by hand")
    job = store.get(waiting)
    assert job is not None and (job.status, job.error_message) == (JobStatus.CANCELLED, "by hand")
    assert job.finished_at is not None and store.events(waiting)[-1].event == "cancelled"
    assert not store.cancel(waiting, now=utcnow(), reason="twice")
    again = store.get(running)
    assert again is not None and again.status is JobStatus.PROCESSING


def test_a_retry_seals_its_values_again_and_its_undo_gives_the_old_ones_back(
    store: Store,
) -> None:
    job_id = new_job(store, max_attempts=1, secrets_sealed="gOld")
    error = AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow())
    assert store.fail(claimed(store, job_id), error, retries_exhausted=True)
    failed = store.get(job_id)
    assert failed is not None
    assert store.retry(
        job_id, seen_revision=0, budget=1, now=utcnow(), message="r", secrets_sealed="gNew"
    )
    assert sealed(store, job_id) == "gNew"
    undo = RetryUndo(1, JobStatus.FAILED, 1, failed.finished_at, True, "gOld")
    assert store.undo_retry(job_id, undo, now=utcnow(), message="publish failed")
    assert sealed(store, job_id) == "gOld"


def test_a_resent_rounds_countdown_or_eta_is_its_due_time(store: Store) -> None:
    """A re-send of an ended job's id (``RETRY_ENDED``) with a countdown is due that long
    after the move on the store's clock, with an eta at it; a retry by hand at once."""
    by_countdown, by_eta, by_hand = new_job(store), new_job(store), new_job(store)
    eta = (utcnow() + timedelta(hours=2)).replace(microsecond=0)
    for job_id in (by_countdown, by_eta, by_hand):
        assert store.cancel(job_id, now=utcnow(), reason="stop")
    assert store.retry(
        by_countdown, seen_revision=0, budget=1, now=utcnow(), message="re-sent",
        completed_too=True, due_in_s=600,
    )  # fmt: skip
    assert store.retry(
        by_eta, seen_revision=0, budget=1, now=utcnow(), message="re-sent",
        completed_too=True, due_at=eta,
    )  # fmt: skip
    assert store.retry(by_hand, seen_revision=0, budget=1, now=utcnow(), message="by hand")
    countdown_job = store.get(by_countdown)
    assert countdown_job is not None and countdown_job.not_before is not None
    assert 590 < (countdown_job.not_before - store.clock()).total_seconds() <= 600
    eta_job, hand_job = store.get(by_eta), store.get(by_hand)
    assert eta_job is not None and eta_job.not_before == eta
    assert hand_job is not None and hand_job.not_before is None
    lease = Lease(owner=OWNER, worker=WORKER, now=utcnow(), lease_s=60)
    assert store.claim(by_countdown, lease) is None  # not due yet


def test_a_retry_keeps_replaces_or_clears_the_deadline_and_its_undo_restores_it(
    store: Store,
) -> None:
    """``Tracker.retry(deadline=...)`` (the new-user trial, F1): one ``RETRY`` move sets
    the new deadline on the database's clock, or keeps the job's own."""
    from celery_tracked.core.deadlines import NO_DEADLINE, Deadline

    job_id = new_job(store, deadline_in_s=60)
    assert store.cancel(job_id, now=utcnow(), reason="stop")
    own = store.get(job_id)
    assert own is not None and own.deadline_at is not None
    assert store.retry(job_id, seen_revision=0, budget=1, now=utcnow(), message="kept")
    kept = store.get(job_id)
    assert kept is not None and kept.deadline_at == own.deadline_at
    assert store.cancel(job_id, now=utcnow(), reason="stop")
    new = Deadline(in_s=3600)
    assert store.retry(job_id, seen_revision=1, budget=1, now=utcnow(), message="new", deadline=new)
    moved = store.get(job_id)
    assert moved is not None and moved.deadline_at is not None
    assert 3500 < (moved.deadline_at - store.clock()).total_seconds() <= 3600
    undo = RetryUndo(2, JobStatus.CANCELLED, 3, None, deadline_at=own.deadline_at)
    assert store.undo_retry(job_id, undo, now=utcnow(), message="publish failed")
    back = store.get(job_id)
    assert back is not None and back.deadline_at == own.deadline_at
    at = utcnow() + timedelta(hours=5)
    assert store.retry(
        job_id, seen_revision=2, budget=1, now=utcnow(), message="at", deadline=Deadline(at=at)
    )
    fixed = store.get(job_id)
    assert fixed is not None and fixed.deadline_at is not None
    assert abs((fixed.deadline_at - at).total_seconds()) < 0.001
    assert store.cancel(job_id, now=utcnow(), reason="stop")
    assert store.retry(
        job_id, seen_revision=3, budget=1, now=utcnow(), message="none", deadline=NO_DEADLINE
    )
    cleared = store.get(job_id)
    assert cleared is not None and cleared.deadline_at is None


def test_a_cancel_may_say_why_in_its_error_type(store: Store) -> None:
    """The worker's cancel of a job whose task it does not know (``UnknownTask``)."""
    plain, unknown = new_job(store), new_job(store)
    assert store.cancel(plain, now=utcnow(), reason="by hand")
    assert not store.cancel(unknown, now=utcnow(), reason="x", revision=1, error_type="E")
    assert store.cancel(unknown, now=utcnow(), reason="gone", revision=0, error_type="UnknownTask")
    ended = store.get(plain), store.get(unknown)
    assert ended[0] is not None and ended[0].error_type is None
    assert ended[1] is not None and ended[1].error_type == "UnknownTask"
    assert ended[1].status is JobStatus.CANCELLED and ended[1].error_message == "gone"
