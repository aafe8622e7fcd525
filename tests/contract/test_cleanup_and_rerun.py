"""The cleanup's batches, ``Tracker.retry`` and its undo, a fail-soft successor."""

from __future__ import annotations

from datetime import timedelta

from celery_tracked.core.cleanup import Sweep
from celery_tracked.core.jobs import PURGE_START, JobStatus, NewRow, utcnow
from celery_tracked.core.moves import AttemptError, Completion, RetryUndo
from celery_tracked.core.ports import Store
from tests.contract.conftest import claimed, event_names, job_row, later, new_job


def _completed(store: Store, seconds_ago: float, **values: object) -> str:
    job_id = new_job(store, **values)
    claim = claimed(store, job_id)
    done = utcnow() - timedelta(seconds=seconds_ago)
    assert store.complete(claim, Completion(result_json=None, now=done, duration_ms=1))
    return job_id


def test_cleanup_removes_a_sweep_in_batches_with_the_rows_events(store: Store) -> None:
    old = [_completed(store, 500 - i, idempotency_key=f"k{i}") for i in range(5)]
    other_queue = _completed(store, 400, queue_name="other")
    failed = new_job(store)
    assert store.fail(
        claimed(store, failed),
        AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow()),
    )
    pending = new_job(store)
    sweep = Sweep("completed", before=later(1), tasks=("app.t",))
    assert store.purge_count(sweep) == 6
    assert store.purge_count(Sweep("completed", before=utcnow() - timedelta(seconds=497.5))) == 3
    sizes, removed, cursor = [], [], PURGE_START
    while True:
        batch = store.purge_batch(sweep, cursor, 2)
        if batch.cursor is None:
            assert batch.removed == () and batch.events == 0
            break
        cursor = batch.cursor
        sizes.append(len(batch.removed))
        removed.extend(batch.removed)
        assert batch.events == 3 * len(batch.removed)  # enqueued, started, completed
    assert sizes == [2, 2, 2]
    assert [r.id for r in removed[:5]] == old  # oldest finished first
    assert removed[0].idempotency_key == "k0" and removed[0].job_type == "t"
    assert {r.id for r in removed} == {*old, other_queue}
    for job_id in old:
        assert store.get(job_id) is None and store.events(job_id) == []
    assert store.get(failed) is not None and store.get(pending) is not None
    assert store.purge_count(sweep) == 0


def test_keep_newest_boundaries_per_queue_and_status(store: Store) -> None:
    ids = [_completed(store, 100 - i) for i in range(3)]
    _completed(store, 50, queue_name="other")
    boundaries = dict(store.keep_boundaries(2))
    assert list(boundaries) == ["completed"]
    boundary = boundaries["completed"]
    assert (boundary.queue, boundary.id) == ("q", ids[1])  # the 2nd newest of queue q
    below = Sweep("completed", before=later(1), below=(boundary,))
    assert store.purge_count(below) == 1  # only the oldest, beyond the newest two


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
    job_id = _completed(store, 1, payload_json='{"args": [1], "kwargs": {}}')
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
