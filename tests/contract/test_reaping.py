"""The reaper's role (``ReapingStore``): its reads, marks and moves (rescue, abandon), a
pending job not due yet."""

from __future__ import annotations

from celery_tracked.core.fences import AttemptError, Lease, StaleRun, StallCutoffs
from celery_tracked.core.jobs import JobStatus, utcnow
from celery_tracked.core.ports import Store
from tests.contract.conftest import (
    OWNER,
    WORKER,
    ago,
    claimed,
    event_names,
    later,
    new_job,
    stalled,
)


def test_a_lapsed_run_is_rescued_once_then_abandoned(store: Store) -> None:
    job_id = new_job(store, max_attempts=2)
    live = new_job(store)
    claimed(store, job_id, lease_s=-30)
    claimed(store, live)
    assert stalled(store) == [(job_id, 0)]
    assert stalled(store, run_cutoff=ago(3600)) == []  # not stalled long enough
    [(seen, _)] = store.stalled(
        StallCutoffs(
            grace_s=0, run_cutoff=later(60), pending_cutoff=ago(1), retrying_cutoff=ago(1)
        ),
        5,
    )
    assert store.rescue_run(
        seen, StaleRun(grace_s=0, run_cutoff=later(60), message="lost", now=utcnow())
    )
    assert not store.rescue_run(
        seen, StaleRun(grace_s=0, run_cutoff=later(60), message="x", now=utcnow())
    )
    job = store.get(job_id)
    assert job is not None and (job.status, job.revision, job.error_type) == (
        JobStatus.RETRYING,
        1,
        "WorkerLost",
    )
    assert job.not_before is not None and job.not_before <= store.clock()
    assert job.locked_until is None and event_names(store, job_id)[-1] == "rescued"
    assert stalled(store, retrying_cutoff=later(60)) == [(job_id, 1)]
    # its last attempt lapses too: no attempt left, it is abandoned
    claimed(store, job_id, lease_s=-30, revision=1)
    [(again, rescues)] = store.stalled(
        StallCutoffs(
            grace_s=0, run_cutoff=later(60), pending_cutoff=ago(1), retrying_cutoff=ago(1)
        ),
        5,
    )
    assert rescues == 1
    assert not store.rescue_run(
        again, StaleRun(grace_s=0, run_cutoff=later(60), message="x", now=utcnow())
    )
    stale = StaleRun(grace_s=0, run_cutoff=later(60), message="gave up", now=utcnow())
    assert store.abandon_run(again, stale, retries_exhausted=True)
    job = store.get(job_id)
    assert job is not None and (job.status, job.error_type, job.error_message) == (
        JobStatus.FAILED,
        "abandoned",
        "gave up",
    )
    assert job.retries_exhausted and job.finished_at is not None


def test_a_stalled_run_asked_to_stop_ends_cancelled(store: Store) -> None:
    job_id = new_job(store)
    claimed(store, job_id, lease_s=-30)
    assert store.request_cancel(job_id, now=utcnow(), message="stop")
    [(seen, _)] = store.stalled(
        StallCutoffs(
            grace_s=0, run_cutoff=later(60), pending_cutoff=ago(1), retrying_cutoff=ago(1)
        ),
        5,
    )
    assert not store.rescue_run(
        seen, StaleRun(grace_s=0, run_cutoff=later(60), message="x", now=utcnow())
    )
    assert not store.abandon_run(
        seen,
        StaleRun(grace_s=0, run_cutoff=later(60), message="x", now=utcnow()),
        retries_exhausted=False,
    )
    assert store.cancel_stalled_run(
        seen, StaleRun(grace_s=0, run_cutoff=later(60), message="cancelled", now=utcnow())
    )
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.CANCELLED and job.error_type is None


def test_waiting_jobs_long_past_their_hand_over_are_rescued_or_abandoned(store: Store) -> None:
    pending, retrying = new_job(store), new_job(store)
    assert store.handed_over(pending, ago(7200))
    claim = claimed(store, retrying)
    assert store.retrying(
        claim,
        AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow()),
        delay_ms=0,
    )
    cut = {"pending_cutoff": ago(3600), "retrying_cutoff": later(60)}
    assert sorted(stalled(store, **cut)) == sorted([(pending, 0), (retrying, 0)])
    assert stalled(store, pending_cutoff=ago(9000)) == []
    rows = {
        job.id: job
        for job, _ in store.stalled(StallCutoffs(grace_s=0, run_cutoff=ago(1), **cut), 5)
    }
    assert not store.rescue_waiting(rows[pending], cutoff=ago(9000), message="x", now=utcnow())
    assert store.rescue_waiting(rows[pending], cutoff=ago(3600), message="lost", now=utcnow())
    job = store.get(pending)
    assert job is not None and (job.status, job.revision, job.published_at) == (
        JobStatus.PENDING,
        1,
        None,
    )
    assert store.abandon_waiting(
        rows[retrying], cutoff=later(60), message="gave up", now=utcnow(), retries_exhausted=False
    )
    assert not store.rescue_waiting(rows[retrying], cutoff=later(60), message="x", now=utcnow())
    job = store.get(retrying)
    assert job is not None and (job.status, job.error_type) == (JobStatus.FAILED, "abandoned")
    assert job.not_before is None and event_names(store, retrying)[-1] == "failed"


def test_the_reapers_marks_of_a_message_found_nowhere(store: Store) -> None:
    """``note`` and ``missing_since`` (issue 22, item 8)."""
    job_id, other = new_job(store), new_job(store)
    job = store.get(job_id)
    assert job is not None
    assert store.missing_since([job_id, other]) == {}
    at = ago(30)
    store.note(job, "missing", "not found", at)
    since = store.missing_since([job_id, other])
    assert list(since) == [job_id] and abs((since[job_id] - at).total_seconds()) < 1
    store.note(job, "found", "found", utcnow())
    assert store.missing_since([job_id]) == {}  # found since: the next miss starts over
    store.note(job, "missing", "not found", utcnow())
    assert list(store.missing_since([job_id])) == [job_id]
    claimed(store, job_id)  # anything happening to the job ends the streak
    assert store.missing_since([job_id]) == {}
    store.note(job, "missing", "stale", utcnow())  # not as judged (pending): no row
    assert event_names(store, job_id) == ["enqueued", "missing", "found", "missing", "started"]


def test_a_pending_job_not_due_is_neither_stalled_rescued_nor_claimed(store: Store) -> None:
    waiting, overdue = new_job(store, due_in_s=1800), new_job(store, due_in_s=-60)
    for job_id in (waiting, overdue):
        assert store.handed_over(job_id, ago(7200))
    # a reaper whose ``now`` runs two hours ahead: only the database's clock says "due"
    cutoffs = StallCutoffs(0.0, later(60), later(3600), later(3600))
    assert [job.id for job, _ in store.stalled(cutoffs, 10)] == [overdue]
    rows = {job_id: store.get(job_id) for job_id in (waiting, overdue)}
    for job_id, row in rows.items():
        assert row is not None
        moved = store.rescue_waiting(row, cutoff=later(3600), message="lost", now=utcnow())
        assert moved is (job_id == overdue)
    job = store.get(waiting)
    assert job is not None and job.status is JobStatus.PENDING and job.revision == 0
    lease = Lease(owner=OWNER, worker=WORKER, now=utcnow(), lease_s=60)
    assert store.claim(waiting, lease) is None
    # handed over two hours ago, due only a minute ago: not stalled 10 minutes after either
    lately = StallCutoffs(0.0, later(60), ago(600), ago(600))
    assert [job.id for job, _ in store.stalled(lately, 10)] == []
