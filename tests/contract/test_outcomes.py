"""How a run ends (``OutcomeStore``, ``LeaseStore``, ``EndsDeadRuns``): outcomes fenced by
the claim, renew and release, dead runs, rows written with a completion, a cancel request."""

from __future__ import annotations

import uuid

from celery_tracked.core.fences import AttemptError, Completion, DeadRun
from celery_tracked.core.jobs import JobStatus, NewRow, utcnow
from celery_tracked.core.ports import Store
from tests.contract.conftest import OWNER, claimed, event_names, failure, new_job


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


def test_a_cancel_request_ends_the_run_cancelled(store: Store) -> None:
    job_id = new_job(store)
    assert not store.request_cancel(job_id, now=utcnow(), message="stop")  # not running
    claim = claimed(store, job_id)
    assert not store.cancel_wanted(job_id)
    assert not store.cancel_run(claim, now=utcnow(), message="no request yet")
    assert store.request_cancel(job_id, now=utcnow(), message="stop")
    assert not store.request_cancel(job_id, now=utcnow(), message="again")
    assert store.cancel_wanted(job_id)
    assert not store.complete(claim, Completion(result_json="1", now=utcnow(), duration_ms=1))
    assert not store.fail(
        claim, AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow())
    )
    assert store.cancel_run(claim, now=utcnow(), message="cancelled as asked")
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.CANCELLED and job.locked_by is None
    assert job.error_message == "cancelled as asked" and job.finished_at is not None
    assert [e.event for e in store.events(job_id)][-2:] == ["cancel_requested", "cancelled"]
    assert store.cancel_wanted(job_id) and not store.cancel_wanted("no-such-job")
