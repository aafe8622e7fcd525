"""A run's role: claim, takeover, outcomes fenced by the claim, give back, dead runs."""

from __future__ import annotations

import uuid
from datetime import datetime

from celery_tracked.core.jobs import JobStatus, NewRow, utcnow
from celery_tracked.core.moves import AttemptError, Completion, DeadRun, Lease, Takeover
from celery_tracked.core.ports import Store
from tests.contract.conftest import OWNER, WORKER, claimed, event_names, new_job


def failure(now: datetime) -> AttemptError:
    return AttemptError(error_type="ValueError", error_message="smtp down", duration_ms=5, now=now)


def test_a_claim_takes_the_lease_and_counts_the_attempt(store: Store) -> None:
    job_id = new_job(store)
    assert (
        store.claim(job_id, Lease(owner=OWNER, worker=WORKER, now=utcnow(), lease_s=60, revision=1))
        is None
    )
    claim = claimed(store, job_id)
    assert (claim.job_id, claim.attempt, claim.max_attempts, claim.takeover) == (
        job_id,
        1,
        3,
        False,
    )
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.PROCESSING
    assert (job.locked_by, job.worker, job.attempts_made) == (OWNER, WORKER, 1)
    assert job.locked_until is not None and job.locked_until > store.clock()
    assert job.started_at is not None
    assert (
        store.claim(job_id, Lease(owner="other:1:2", worker=WORKER, now=utcnow(), lease_s=60))
        is None
    )
    [_, started] = store.events(job_id)
    assert (started.event, started.status, started.attempt) == ("started", JobStatus.PROCESSING, 1)


def test_a_stale_claim_is_refused_once_a_takeover_holds_the_job(store: Store) -> None:
    job_id = new_job(store)
    stale = claimed(store, job_id, lease_s=-30)  # its lease lapsed at once
    lease = Lease(owner="host-b:1:7", worker="w2", now=utcnow(), lease_s=60)
    fence = Takeover(seen_attempt=1, grace_s=0, stale_owner=None, reason="lease lapsed")
    taken = store.take_over(job_id, lease, fence)
    assert taken is not None and (taken.attempt, taken.takeover) == (2, True)
    now = utcnow()
    assert not store.complete(stale, Completion(result_json="1", now=now, duration_ms=1))
    assert not store.retrying(stale, failure(now), delay_ms=0)
    assert not store.fail(stale, failure(now))
    assert not store.renew(stale, 60)
    assert not store.release(stale, now)
    assert not store.report_progress(stale, percent=10, stage=None, now=now)
    assert not store.log_line(stale, message="late", now=now)
    assert store.complete(taken, Completion(result_json='{"ok": 1}', now=now, duration_ms=7))
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.COMPLETED
    assert (job.attempts_made, job.result_json, job.progress) == (2, '{"ok": 1}', 100)
    assert job.locked_by is None and job.locked_until is None and job.finished_at is not None
    assert event_names(store, job_id) == ["enqueued", "started", "redelivered", "completed"]
    assert store.events(job_id)[2].message == "lease lapsed"
    assert store.events(job_id)[3].duration_ms == 7


def test_a_live_lease_is_not_taken_over_unless_its_owner_is_dead(store: Store) -> None:
    job_id = new_job(store, max_attempts=2)
    claimed(store, job_id)
    lease = Lease(owner="host-b:1:7", worker="w2", now=utcnow(), lease_s=60)
    assert store.take_over(job_id, lease, Takeover(1, 0, None, "redelivered")) is None
    assert store.take_over(job_id, lease, Takeover(0, 0, OWNER, "redelivered")) is None
    taken = store.take_over(job_id, lease, Takeover(1, 0, OWNER, "redelivered"))
    assert taken is not None and taken.attempt == 2
    # no attempt left: a takeover is refused, the lost last attempt fails the job
    assert store.take_over(job_id, lease, Takeover(2, 0, "host-b:1:7", "redelivered")) is None
    assert store.fail_lost(job_id, Takeover(2, 0, "host-b:1:7", "lost"), utcnow())
    job = store.get(job_id)
    assert job is not None and (job.status, job.error_type) == (JobStatus.FAILED, "WorkerLost")
    assert job.retries_exhausted and job.error_message == "lost"


def test_a_retrying_job_is_not_claimed_before_its_backoff_is_due(store: Store) -> None:
    waiting, due = new_job(store), new_job(store)
    for job_id, delay_ms in ((waiting, 60_000), (due, 0)):
        claim = claimed(store, job_id)
        assert store.retrying(claim, failure(utcnow()), delay_ms=delay_ms)
    job = store.get(waiting)
    assert job is not None and job.status is JobStatus.RETRYING and job.locked_until is None
    assert job.not_before is not None and job.not_before > store.clock()
    assert (job.error_type, job.error_message) == ("ValueError", "smtp down")
    assert store.claim(waiting, Lease(owner=OWNER, worker=WORKER, now=utcnow(), lease_s=60)) is None
    again = claimed(store, due)
    assert again.attempt == 2
    job = store.get(due)
    assert job is not None and job.not_before is None
    assert store.events(waiting)[-1].message == "retry in 60000 ms after ValueError: smtp down"


def test_a_failure_records_whether_it_used_up_the_retries(store: Store) -> None:
    stopped, exhausted = new_job(store), new_job(store)
    assert store.fail(claimed(store, stopped), failure(utcnow()))
    assert store.fail(claimed(store, exhausted), failure(utcnow()), retries_exhausted=True)
    for job_id, used_up in ((stopped, False), (exhausted, True)):
        job = store.get(job_id)
        assert job is not None and job.status is JobStatus.FAILED and job.finished_at is not None
        assert job.retries_exhausted is used_up and job.error_type == "ValueError"
    assert store.events(stopped)[-1].message == "ValueError: smtp down"


def test_renew_extends_the_lease_and_release_drops_it(store: Store) -> None:
    job_id = new_job(store)
    claim = claimed(store, job_id, lease_s=5)
    before = store.get(job_id)
    assert store.renew(claim, 600)
    after = store.get(job_id)
    assert before is not None and after is not None
    assert before.locked_until is not None and after.locked_until is not None
    assert after.locked_until > before.locked_until
    assert store.release(claim, utcnow())
    released = store.get(job_id)
    assert released is not None and released.status is JobStatus.PROCESSING
    assert released.locked_by is None and released.locked_until is None


def test_a_claim_given_back_leaves_the_row_as_it_was(store: Store) -> None:
    job_id = new_job(store)
    at = utcnow()
    claim = claimed(store, job_id, now=at)
    assert not store.give_back(claim, owner="other:1:1", claimed_at=at, now=utcnow(), message="x")
    assert store.give_back(claim, owner=OWNER, claimed_at=at, now=utcnow(), message="rate")
    job = store.get(job_id)
    assert job is not None and (job.status, job.attempts_made) == (JobStatus.PENDING, 0)
    assert job.started_at is None and job.worker is None and job.locked_until is None
    assert event_names(store, job_id)[-1] == "given_back"
    assert not store.give_back(claim, owner=OWNER, claimed_at=at, now=utcnow(), message="twice")
    # a retrying row's claim goes back to retrying, due at once
    claim = claimed(store, job_id)
    assert store.retrying(claim, failure(utcnow()), delay_ms=0)
    again = claimed(store, job_id, now=utcnow())
    assert store.give_back(again, owner=OWNER, claimed_at=utcnow(), now=utcnow(), message="r")
    job = store.get(job_id)
    assert job is not None and (job.status, job.attempts_made) == (JobStatus.RETRYING, 1)
    assert job.started_at is not None and claimed(store, job_id).attempt == 2


def test_a_dead_run_is_ended_only_once_its_lease_lapsed_or_its_owner_died(store: Store) -> None:
    job_id = new_job(store)
    claimed(store, job_id)
    end = {"error_type": "TimeLimitExceeded", "error_message": "hard limit", "message": "killed"}
    assert not store.end_dead_run(
        job_id, DeadRun(seen_attempt=1, stale_owner=None, status=JobStatus.RETRYING, now=utcnow(),
        delay_ms=60_000, **end),
    )  # fmt: skip
    assert store.end_dead_run(
        job_id, DeadRun(seen_attempt=1, stale_owner=OWNER, status=JobStatus.RETRYING, now=utcnow(),
        delay_ms=60_000, **end),
    )  # fmt: skip
    job = store.get(job_id)
    assert job is not None and (job.status, job.error_type) == (
        JobStatus.RETRYING,
        "TimeLimitExceeded",
    )
    assert job.not_before is not None and job.not_before > store.clock()
    cancelled = new_job(store)
    claimed(store, cancelled, lease_s=-5)
    assert store.end_dead_run(  # as its callers send it: no error for a cancel
        cancelled,
        DeadRun(
            seen_attempt=1,
            stale_owner=None,
            status=JobStatus.CANCELLED,
            now=utcnow(),
            **{**end, "error_type": None, "error_message": None},
        ),
    )
    job = store.get(cancelled)
    assert job is not None and (job.status, job.error_type, job.error_message) == (
        JobStatus.CANCELLED,
        None,
        "killed",
    )


def test_rows_given_with_a_completion_are_written_with_it(store: Store) -> None:
    step = new_job(store)
    claim = claimed(store, step)
    now = utcnow()
    successor = str(uuid.uuid4())
    values = {
        "id": successor, "queue_name": "q", "job_type": "next", "task_name": "app.next",
        "celery_task_id": successor, "status": "pending", "payload_json": "{}",
        "max_attempts": 3, "idempotency_key": f"after:{step}", "correlation_id": step,
        "parent_job_id": step, "owner_id": None, "created_at": now, "updated_at": now,
    }  # fmt: skip
    taken = {**values, "id": str(uuid.uuid4())}  # the same key: skipped, no error
    note = {
        "job_id": step,
        "event": "note",
        "status": "processing",
        "attempt": 1,
        "created_at": now,
    }
    rows = [
        NewRow("background_jobs", values, new_job=True, message="from step"),
        NewRow("background_jobs", taken, new_job=True, message="twice"),
        NewRow("background_job_events", note),
    ]
    assert store.complete(claim, Completion(result_json=None, now=now, duration_ms=1, rows=rows))
    made = store.get(successor)
    assert made is not None and made.status is JobStatus.PENDING and made.parent_job_id == step
    assert [(e.event, e.message) for e in store.events(successor)] == [("enqueued", "from step")]
    assert store.get(taken["id"]) is None
    assert event_names(store, step) == ["enqueued", "started", "completed", "note"]
    assert [j.id for j in store.pipeline(step)] == [step, successor]
