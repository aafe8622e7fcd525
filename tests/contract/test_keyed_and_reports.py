"""Keyed concurrency claims, a body's progress and log lines, a running job's cancel."""

from __future__ import annotations

import threading

from celery_tracked.core.jobs import Claim, JobStatus, utcnow
from celery_tracked.core.moves import AttemptError, Completion, Lease, Takeover
from celery_tracked.core.ports import Store
from tests.contract.conftest import KEY_LOCKS, OWNER, WORKER, Backend, claimed, new_job

KEY = ("tenant-1", 2)


def test_a_keyed_claim_waits_for_a_free_slot(backend: Backend) -> None:
    store = backend.store
    first, second, third = (new_job(store, concurrency_key="tenant-1") for _ in range(3))
    free = new_job(store, concurrency_key="tenant-2")
    a = claimed(store, first, concurrency=KEY)
    claimed(store, second, concurrency=KEY)
    assert store.key_busy(third, *KEY)
    assert not store.key_busy(free, "tenant-2", 2)
    assert (
        store.claim(
            third, Lease(owner=OWNER, worker=WORKER, now=utcnow(), lease_s=60, concurrency=KEY)
        )
        is None
    )
    claimed(store, free, concurrency=("tenant-2", 2))
    assert store.complete(a, Completion(result_json=None, now=utcnow(), duration_ms=1))
    assert not store.key_busy(third, *KEY)
    assert claimed(store, third, concurrency=KEY).attempt == 1
    lock = KEY_LOCKS[backend.name]
    if lock is not None:  # the claims ran under the key's lock
        assert any(lock in s.lower() for s in backend.statements), lock


def test_the_jobs_waiting_on_a_key_are_counted(store: Store) -> None:
    held, *_ = (new_job(store, concurrency_key="tenant-1") for _ in range(4))
    new_job(store, concurrency_key="tenant-2")
    new_job(store)
    assert store.key_waiting("tenant-1") == 4
    claimed(store, held, concurrency=("tenant-1", 1))
    assert store.key_waiting("tenant-1") == 3  # the one processing holds a slot
    assert store.key_waiting("tenant-2") == 1 and store.key_waiting("nobody") == 0


def test_a_lapsed_lease_frees_its_slot(store: Store) -> None:
    held, waiting = (new_job(store, concurrency_key="tenant-1") for _ in range(2))
    claimed(store, held, lease_s=-30, concurrency=("tenant-1", 1))
    assert not store.key_busy(waiting, "tenant-1", 1)
    assert claimed(store, waiting, concurrency=("tenant-1", 1)).attempt == 1
    assert store.key_busy(held, "tenant-1", 1)  # the waiting job now holds the only slot
    lease = Lease("h:1:2", "w", utcnow(), lease_s=60, concurrency=("tenant-1", 1))
    taken = store.take_over(  # a takeover is keyed too: no slot for it now
        held, lease, Takeover(seen_attempt=1, grace_s=0, stale_owner=None, reason="lapsed")
    )
    assert taken is None


def test_concurrent_keyed_claims_never_exceed_the_limit(backend: Backend) -> None:
    store = backend.store
    ids = [new_job(store, concurrency_key="tenant-9") for _ in range(6)]
    won: list[Claim] = []
    start = threading.Barrier(len(ids))

    def claim(job_id: str) -> None:
        start.wait()
        lease = Lease(OWNER, WORKER, utcnow(), lease_s=60, concurrency=("tenant-9", 2))
        got = store.claim(job_id, lease)
        if got is not None:
            won.append(got)

    threads = [threading.Thread(target=claim, args=(job_id,)) for job_id in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(won) == 2
    running = [j for j in (store.get(i) for i in ids) if j and j.status is JobStatus.PROCESSING]
    assert sorted(j.id for j in running) == sorted(c.job_id for c in won)


def test_progress_and_log_lines_are_written_while_the_run_holds_the_job(store: Store) -> None:
    job_id = new_job(store)
    claim = claimed(store, job_id)
    assert store.report_progress(claim, percent=40, stage="parse", now=utcnow())
    assert store.report_progress(claim, percent=55, stage=None, now=utcnow())
    job = store.get(job_id)
    assert job is not None and (job.progress, job.stage) == (55, "parse")
    assert store.log_line(claim, message="page 1 of 3", now=utcnow())
    assert store.log_line(claim, message="page 2 of 3", now=utcnow())
    assert store.log_lines(job_id) == 2
    lines = [e for e in store.events(job_id) if e.event == "log"]
    assert [(e.message, e.status, e.attempt) for e in lines] == [
        ("page 1 of 3", JobStatus.PROCESSING, 1),
        ("page 2 of 3", JobStatus.PROCESSING, 1),
    ]
    assert [e.event for e in store.events(job_id)] == ["enqueued", "started", "log", "log"]
    assert store.complete(claim, Completion(result_json=None, now=utcnow(), duration_ms=3))
    assert not store.log_line(claim, message="after the end", now=utcnow())
    assert not store.report_progress(claim, percent=10, stage=None, now=utcnow())
    assert store.log_lines(job_id) == 2
    done = store.get(job_id)
    assert done is not None and done.progress == 100


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
