"""The scheduler pass's role (``ScheduleStore``): the held rows coming due, its claim (the
relay's) and its mark; the claim's deadline fence and the ``expire`` move (``ClaimStore``)."""

from __future__ import annotations

import time

from celery_tracked.core.deadlines import DEADLINE_EXCEEDED
from celery_tracked.core.fences import DeadRun, Lease, Takeover
from celery_tracked.core.finder import JobFilter
from celery_tracked.core.jobs import JobStatus, utcnow
from celery_tracked.core.ports import Store
from tests.contract.conftest import (
    OWNER,
    WORKER,
    ago,
    claimed,
    event_names,
    failure,
    later,
    new_job,
    stalled,
)

PASS_A, PASS_B = "schedule-a:1:1", "schedule-b:1:2"


def _ids(store: Store, seconds_ahead: float) -> list[str]:
    return [job.id for job in store.held_due(until=later(seconds_ahead))]


def test_held_rows_come_due_in_order_of_their_due_time(store: Store) -> None:
    far = new_job(store, due_in_s=7200)
    near = new_job(store, due_in_s=600)
    at = new_job(store, due_at=later(900))
    published = new_job(store, due_in_s=700)
    assert store.handed_over(published, utcnow())
    new_job(store)  # no due time: never the scheduler's
    assert _ids(store, 300) == []
    assert _ids(store, 1000) == [near, at]  # the published one is not held
    assert _ids(store, 8000) == [near, at, far]
    assert store.relay_claim(near, owner=PASS_A, now=utcnow(), lease_s=30, cutoff=later(1000))
    assert _ids(store, 1000) == [at]  # a claimed row is nobody else's while claimed


def test_two_passes_publish_a_held_row_once(store: Store) -> None:
    job_id = new_job(store, due_in_s=3600)
    until = later(4000)
    assert store.relay_claim(job_id, owner=PASS_A, now=utcnow(), lease_s=30, cutoff=until)
    assert not store.relay_claim(job_id, owner=PASS_B, now=utcnow(), lease_s=30, cutoff=until)
    # a delivery racing the pass waits (its claim, and the due time)
    assert store.claim(job_id, Lease(owner=OWNER, worker=WORKER, now=utcnow(), lease_s=60)) is None
    assert not store.scheduled(job_id, owner=PASS_B, now=utcnow(), message="b")
    assert not store.scheduled(job_id, owner=PASS_A, now=utcnow(), message="a", revision=1)
    assert store.scheduled(job_id, owner=PASS_A, now=utcnow(), message="scheduled")
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.PENDING and job.published_at is not None
    assert job.locked_by is None and job.not_before is not None  # still due then
    assert event_names(store, job_id) == ["enqueued", "scheduled"]
    assert _ids(store, 4000) == []


def test_the_relay_leaves_rows_not_due_yet_to_the_scheduler(store: Store) -> None:
    held = new_job(store, now=ago(120), due_at=later(3600))
    due = new_job(store, now=ago(120), due_at=ago(5))
    assert store.unpublished(cutoff=ago(60), now=utcnow()) == [due]
    assert store.backlog(cutoff=ago(60)) == 1
    assert _ids(store, 300) == [due]  # a due one is the scheduler's too (one claim decides)
    assert held not in store.unpublished(cutoff=ago(60), now=utcnow())


def test_stats_count_scheduled_jobs_apart_and_the_listing_filters_on_due_times(
    store: Store,
) -> None:
    held = new_job(store, queue_name="mail", due_in_s=7200, now=ago(100))
    soon = new_job(store, queue_name="mail", due_in_s=60, now=ago(100))
    new_job(store, queue_name="mail", now=ago(50))
    stats = store.stats()["mail"]
    assert stats["counts"]["pending"] == 3 and stats["scheduled"] == 2
    assert 40 <= stats["oldest_pending_age_s"] <= 90  # of the due one only
    within_hour = JobFilter(due_before=later(3600))
    assert [j.id for j in store.find(within_hour, None, 10)] == [soon]
    assert {j.id for j in store.find(JobFilter(due_after=utcnow()), None, 10)} == {held, soon}


def test_a_claim_never_takes_a_job_past_its_deadline(store: Store) -> None:
    job_id = new_job(store, deadline_in_s=60)
    job = store.get(job_id)
    assert job is not None and job.deadline_at is not None
    assert later(50) < job.deadline_at < later(70)  # on the database's clock
    assert not store.expire(job_id, now=utcnow(), message="too early")
    late = new_job(store, deadline_at=ago(1))
    assert store.claim(late, Lease(owner=OWNER, worker=WORKER, now=utcnow(), lease_s=60)) is None
    assert store.expire(late, now=utcnow(), message="past its deadline")
    assert not store.expire(late, now=utcnow(), message="again")
    ended = store.get(late)
    assert ended is not None and ended.status is JobStatus.CANCELLED
    assert ended.error_type == DEADLINE_EXCEEDED and ended.error_message == "past its deadline"
    assert ended.finished_at is not None and ended.attempts_made == 0
    assert event_names(store, late) == ["enqueued", "cancelled"]
    assert claimed(store, job_id).attempt == 1  # before its deadline: claimed as usual


def test_a_retrying_job_past_its_deadline_is_not_claimed_again(store: Store) -> None:
    job_id = new_job(store, deadline_at=later(1))
    claim = claimed(store, job_id)
    assert store.retrying(claim, failure(utcnow()), 0)
    time.sleep(1.2)  # its deadline passes while it waits for its next attempt
    assert store.claim(job_id, Lease(owner=OWNER, worker=WORKER, now=utcnow(), lease_s=60)) is None
    assert store.expire(job_id, now=utcnow(), message="deadline")
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.CANCELLED


def test_no_takeover_starts_a_new_attempt_past_the_deadline(store: Store) -> None:
    job_id = new_job(store, deadline_at=later(1))
    claimed(store, job_id, lease_s=-30)  # started in time; its lease lapsed at once
    time.sleep(1.2)  # its deadline passes
    lease = Lease(owner="host-b:1:7", worker="w2", now=utcnow(), lease_s=60)
    fence = Takeover(seen_attempt=1, grace_s=0, stale_owner=None, reason="lease lapsed")
    assert store.take_over(job_id, lease, fence) is None
    dead = DeadRun.cancelled(1, None, "lost, and past its deadline", utcnow(), DEADLINE_EXCEEDED)
    assert store.end_dead_run(job_id, dead)
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.CANCELLED
    assert job.error_type == DEADLINE_EXCEEDED
    assert job.error_message == "lost, and past its deadline"


def test_the_reaper_never_takes_a_held_job_for_stalled(store: Store) -> None:
    held = new_job(store, now=ago(7200), due_in_s=3600)
    assert stalled(store, pending_cutoff=later(7200)) == []
    assert store.get(held) is not None


def test_a_pause_keeps_held_rows_from_the_pass_and_the_relay(store: Store) -> None:
    """Both halves of issue 26: a held row a pause covers is nobody's until the resume; a
    pause-held row due later is the pass's, not the relay's, once unpaused."""
    held = new_job(store, job_type="ocr", due_in_s=3600, now=ago(120))
    store.pause("job_type", "ocr", by="ops", reason=None)
    assert _ids(store, 4000) == []  # the pass skips it (else it fills its 100 every pass)
    assert store.unpublished(cutoff=utcnow(), now=later(4000)) == []  # so does the relay
    assert not store.relay_claim(held, owner=PASS_A, now=utcnow(), lease_s=30, cutoff=utcnow())
    # a countdown delivery held by the pause: given back, still due later
    near = new_job(store, job_type="ocr", due_in_s=60, now=ago(120))
    assert store.handed_over(near, ago(119))
    assert store.hold(near, 0, now=utcnow(), message="held")
    assert store.unpublished(cutoff=ago(3600), now=utcnow()) == []
    store.resume("job_type", "ocr")
    assert _ids(store, 4000) == [near, held]
    assert store.unpublished(cutoff=utcnow(), now=utcnow()) == []  # neither is due yet
    assert store.unpublished(cutoff=ago(3600), now=later(120)) == [near]  # no grace, once due


def test_a_fast_forwarded_claim_moves_the_due_time_once(store: Store) -> None:
    """A scheduler pass judging ahead of the database's clock moves the row's due time in
    its claim (``moved_due``), so the delivery's claim fence agrees with its message."""
    job_id = new_job(store, due_in_s=7200)
    soon = later(30)
    assert store.relay_claim(
        job_id, owner=PASS_A, now=utcnow(), lease_s=30, cutoff=later(8000), moved_due=soon
    )
    job = store.get(job_id)
    assert job is not None and job.not_before is not None
    assert abs((job.not_before - soon).total_seconds()) < 0.001
    kept = new_job(store, due_in_s=7200)
    before = store.get(kept)
    assert store.relay_claim(kept, owner=PASS_B, now=utcnow(), lease_s=30, cutoff=later(8000))
    after = store.get(kept)
    assert before is not None and after is not None and after.not_before == before.not_before
