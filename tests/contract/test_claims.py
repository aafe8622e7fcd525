"""A delivery's claim (``ClaimStore``): claim, takeover, a backoff not yet due, give back,
keyed concurrency claims, a postponed delivery's refresh."""

from __future__ import annotations

import threading

from celery_tracked.core.fences import AttemptError, Completion, Lease, Takeover
from celery_tracked.core.jobs import CLAIM_EARLY_S, Claim, JobStatus, utcnow
from celery_tracked.core.ports import Store
from tests.contract.conftest import (
    KEY_LOCKS,
    OWNER,
    WORKER,
    Backend,
    ago,
    claimed,
    event_names,
    failure,
    later,
    new_job,
    stalled,
)

KEY = ("tenant-1", 2)


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


def test_a_postponed_waiting_delivery_marks_its_message_handed_over_again(store: Store) -> None:
    """``republished`` (issue 22, item 0): a waiting row of the current revision only."""
    job_id, unsent = new_job(store), new_job(store)
    assert store.handed_over(job_id, ago(7200))
    assert stalled(store) == [(job_id, 0)]
    assert not store.republished(job_id, 1, 60)  # a replaced message's delivery
    assert not store.republished(unsent, 0, 60)  # never handed over: the relay's
    assert store.republished(job_id, 0, 60)
    assert not store.republished(job_id, 0, 60)  # recorded less than 60 s ago: not again
    assert stalled(store) == []
    job = store.get(job_id)
    assert job is not None and job.published_at is not None and job.published_at > ago(60)
    assert event_names(store, job_id) == ["enqueued"]  # no history row
    run = claimed(store, job_id)
    assert not store.republished(job_id, 0, 0)  # processing: not waiting
    assert store.retrying(
        run,
        AttemptError(error_type="E", error_message="m", duration_ms=1, now=utcnow()),
        delay_ms=0,
    )
    cut = {"retrying_cutoff": later(60), "pending_cutoff": ago(3600)}
    assert stalled(store, **cut) == [(job_id, 0)]  # due, handed over a while ago
    assert store.republished(job_id, 0, 0)
    assert stalled(store, **{**cut, "retrying_cutoff": ago(60)}) == []


def test_a_delivery_a_moment_before_its_due_time_claims(store: Store) -> None:
    """A delivery up to ``CLAIM_EARLY_S`` before the row's ``not_before`` claims it (the
    message's eta is read on the worker's clock, the row's due time written a moment after
    it on the database's); one earlier than that does not."""
    soon, later_on = new_job(store, due_in_s=CLAIM_EARLY_S / 2), new_job(store, due_in_s=5)
    lease = Lease(owner=OWNER, worker=WORKER, now=utcnow(), lease_s=60)
    assert store.claim(soon, lease) is not None
    assert store.claim(later_on, lease) is None
