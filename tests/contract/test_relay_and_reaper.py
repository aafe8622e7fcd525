"""The relay's hand-over and the reaper's reads and moves."""

from __future__ import annotations

from typing import Any

from celery_tracked.core.jobs import JobStatus, utcnow
from celery_tracked.core.moves import AttemptError, Lease, StaleRun, StallCutoffs
from celery_tracked.core.ports import Store
from tests.contract.conftest import OWNER, WORKER, ago, claimed, event_names, later, new_job

RELAY_A, RELAY_B = "relay-a:1:1", "relay-b:1:2"


def test_the_relay_claims_an_unpublished_job_and_hands_it_over(store: Store) -> None:
    job_id = new_job(store, now=ago(120))
    published = new_job(store, now=ago(120))
    assert store.handed_over(published, utcnow())
    fresh = new_job(store)
    assert store.unpublished(cutoff=ago(60), now=utcnow()) == [job_id]
    assert store.backlog(cutoff=ago(60)) == 1
    assert store.backlog(cutoff=later(60)) == 2  # the fresh one too, once old enough
    assert not store.relay_claim(fresh, owner=RELAY_A, now=utcnow(), lease_s=30, cutoff=ago(60))
    assert store.relay_claim(job_id, owner=RELAY_A, now=utcnow(), lease_s=30, cutoff=ago(60))
    assert not store.relay_claim(job_id, owner=RELAY_B, now=utcnow(), lease_s=30, cutoff=ago(60))
    assert store.unpublished(cutoff=ago(60), now=utcnow()) == []
    # a delivery racing the relay waits for its claim
    assert store.claim(job_id, Lease(owner=OWNER, worker=WORKER, now=utcnow(), lease_s=60)) is None
    assert not store.relayed(job_id, owner=RELAY_B, now=utcnow(), message="relayed")
    assert not store.relayed(job_id, owner=RELAY_A, now=utcnow(), message="relayed", revision=1)
    assert store.relayed(job_id, owner=RELAY_A, now=utcnow(), message="relayed")
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.PENDING and job.published_at is not None
    assert job.locked_by is None and job.locked_until is None
    assert event_names(store, job_id) == ["enqueued", "relayed"]
    assert store.backlog(cutoff=ago(60)) == 0
    assert claimed(store, job_id).attempt == 1


def test_a_lapsed_relay_claim_is_taken_by_another_relay(store: Store) -> None:
    job_id = new_job(store, now=ago(120))
    assert store.relay_claim(job_id, owner=RELAY_A, now=utcnow(), lease_s=-5, cutoff=ago(60))
    assert store.unpublished(cutoff=ago(60), now=utcnow()) == [job_id]
    assert store.relay_claim(job_id, owner=RELAY_B, now=utcnow(), lease_s=30, cutoff=ago(60))
    assert not store.relayed(job_id, owner=RELAY_A, now=utcnow(), message="late")
    assert store.relayed(job_id, owner=RELAY_B, now=utcnow(), message="relayed")


def _stalled(store: Store, **cutoffs: Any) -> list[tuple[str, int]]:
    args = {
        "grace_s": 0.0,
        "run_cutoff": later(60),
        "pending_cutoff": ago(3600),
        "retrying_cutoff": ago(3600),
    }
    args.update(cutoffs)
    return [(job.id, rescues) for job, rescues in store.stalled(StallCutoffs(**args), 10)]


def test_a_lapsed_run_is_rescued_once_then_abandoned(store: Store) -> None:
    job_id = new_job(store, max_attempts=2)
    live = new_job(store)
    claimed(store, job_id, lease_s=-30)
    claimed(store, live)
    assert _stalled(store) == [(job_id, 0)]
    assert _stalled(store, run_cutoff=ago(3600)) == []  # not stalled long enough
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
    assert _stalled(store, retrying_cutoff=later(60)) == [(job_id, 1)]
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
    assert sorted(_stalled(store, **cut)) == sorted([(pending, 0), (retrying, 0)])
    assert _stalled(store, pending_cutoff=ago(9000)) == []
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


def test_a_postponed_waiting_delivery_marks_its_message_handed_over_again(store: Store) -> None:
    """``republished`` (issue 22, item 0): a waiting row of the current revision only."""
    job_id, unsent = new_job(store), new_job(store)
    assert store.handed_over(job_id, ago(7200))
    assert _stalled(store) == [(job_id, 0)]
    assert not store.republished(job_id, 1, 60)  # a replaced message's delivery
    assert not store.republished(unsent, 0, 60)  # never handed over: the relay's
    assert store.republished(job_id, 0, 60)
    assert not store.republished(job_id, 0, 60)  # recorded less than 60 s ago: not again
    assert _stalled(store) == []
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
    assert _stalled(store, **cut) == [(job_id, 0)]  # due, handed over a while ago
    assert store.republished(job_id, 0, 0)
    assert _stalled(store, **{**cut, "retrying_cutoff": ago(60)}) == []


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
