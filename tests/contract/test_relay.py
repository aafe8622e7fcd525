"""The relay's role (``RelayStore``): its claim of an unpublished job and the hand-over."""

from __future__ import annotations

from celery_tracked.core.fences import Lease
from celery_tracked.core.jobs import JobStatus, utcnow
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
