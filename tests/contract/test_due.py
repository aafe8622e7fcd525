"""A producer's countdown/eta on the row (``not_before``), and the reaper's reads and moves
of a pending job not due yet (issue 22, item 8): every backend alike."""

from __future__ import annotations

from datetime import timedelta

from celery_tracked.core.jobs import JobStatus, utcnow
from celery_tracked.core.moves import Lease, StallCutoffs
from celery_tracked.core.ports import Store
from tests.contract.conftest import OWNER, WORKER, ago, later, new_job


def _due_in(store: Store, job_id: str) -> float:
    job = store.get(job_id)
    assert job is not None and job.not_before is not None
    return (job.not_before - store.clock()).total_seconds()


def test_a_countdown_is_counted_on_the_stores_clock_an_eta_kept(store: Store) -> None:
    by_countdown = new_job(store, due_in_s=600)
    eta = (utcnow() + timedelta(hours=2)).replace(microsecond=0)
    by_eta = new_job(store, due_at=eta)
    at_once = new_job(store)
    assert 590 < _due_in(store, by_countdown) <= 600
    by_eta_job, at_once_job = store.get(by_eta), store.get(at_once)
    assert by_eta_job is not None and by_eta_job.not_before == eta
    assert at_once_job is not None and at_once_job.not_before is None


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


def test_a_debounce_gives_the_job_its_new_messages_due_time(store: Store) -> None:
    job_id = new_job(store, due_in_s=60)
    assert store.replace_arguments(
        job_id, seen_revision=0, payload_json="{}", now=utcnow(), message="x", due_in_s=600
    )
    assert 590 < _due_in(store, job_id) <= 600  # pushed later by the newest countdown
    assert store.replace_arguments(
        job_id, seen_revision=1, payload_json="{}", now=utcnow(), message="y"
    )
    job = store.get(job_id)
    assert job is not None and job.not_before is None  # the newest message: at once
