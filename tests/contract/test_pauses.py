"""The pauses role (``PauseStore``) and the hold of a delivery a pause covers
(``ClaimStore.hold``): what the relay and the reaper then leave alone, and publish once
the pause is lifted (issue 26)."""

from __future__ import annotations

from celery_tracked.core.fences import Lease
from celery_tracked.core.jobs import JobStatus, utcnow
from celery_tracked.core.pauses import HELD_BY_PAUSE
from celery_tracked.core.ports import Store
from tests.contract.conftest import (
    OWNER,
    WORKER,
    ago,
    claimed,
    event_names,
    failure,
    new_job,
    stalled,
)

RELAY = "relay-a:1:1"


def test_a_pause_is_recorded_once_and_resumed(store: Store) -> None:
    assert store.pauses() == []
    assert store.pause("job_type", "ocr", by="ops@host", reason="provider down")
    assert not store.pause("job_type", "ocr", by="other@host", reason="again")  # kept
    assert store.pause("all", "*", by=None, reason=None)
    found = {(p.scope, p.name): p for p in store.pauses()}
    ocr = found["job_type", "ocr"]
    assert (ocr.paused_by, ocr.reason) == ("ops@host", "provider down")
    assert abs((ocr.paused_at - store.clock()).total_seconds()) < 5  # the store's clock
    assert store.resume("job_type", "ocr")
    assert not store.resume("job_type", "ocr")
    assert [(p.scope, p.name) for p in store.pauses()] == [("all", "*")]


def test_a_held_delivery_gives_the_row_back_without_a_message_or_an_attempt(
    store: Store,
) -> None:
    job_id = new_job(store, now=ago(120))
    assert store.handed_over(job_id, ago(119))
    store.pause("queue", "q", by="ops", reason=None)
    assert not store.hold(job_id, 1, now=utcnow(), message="held")  # not its revision
    assert store.hold(job_id, 0, now=utcnow(), message="held: queue 'q' paused")
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.PENDING and job.attempts_made == 0
    assert job.published_at is None and job.revision == 1 and job.locked_by == HELD_BY_PAUSE
    assert event_names(store, job_id) == ["enqueued", "paused"]
    assert not store.hold(job_id, 0, now=utcnow(), message="again")  # once per message
    # paused: neither the relay nor the reaper publishes it, nor is it a relay backlog
    assert store.unpublished(cutoff=utcnow(), now=utcnow()) == []
    assert not store.relay_claim(job_id, owner=RELAY, now=utcnow(), lease_s=30, cutoff=utcnow())
    assert stalled(store, pending_cutoff=utcnow()) == []
    assert store.backlog(cutoff=utcnow()) == 0
    # the delivery of its new revision (a resume's) claims it
    store.resume("queue", "q")
    assert store.unpublished(cutoff=ago(3600), now=utcnow()) == [job_id]  # no grace
    assert store.relay_claim(job_id, owner=RELAY, now=utcnow(), lease_s=30, cutoff=ago(3600))
    assert store.relayed(job_id, owner=RELAY, now=utcnow(), message="relayed", revision=1)
    assert claimed(store, job_id, revision=1).attempt == 1


def test_a_held_retrying_job_keeps_its_status_and_due_time(store: Store) -> None:
    job_id = new_job(store, job_type="ocr")
    claim = claimed(store, job_id)
    assert store.retrying(claim, failure(utcnow()), delay_ms=0)
    before = store.get(job_id)
    assert before is not None and before.status is JobStatus.RETRYING
    store.pause("job_type", "ocr", by="ops", reason=None)
    assert store.hold(job_id, 0, now=utcnow(), message="held")
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.RETRYING and job.attempts_made == 1
    assert job.not_before == before.not_before and job.revision == 1
    assert stalled(store, retrying_cutoff=utcnow()) == []  # the reaper leaves it alone
    assert store.unpublished(cutoff=utcnow(), now=utcnow()) == []
    lease = Lease(owner=OWNER, worker=WORKER, now=utcnow(), lease_s=60, revision=1)
    store.resume("job_type", "ocr")
    assert store.unpublished(cutoff=ago(3600), now=utcnow()) == [job_id]
    assert store.relay_claim(job_id, owner=RELAY, now=utcnow(), lease_s=30, cutoff=ago(3600))
    assert store.relayed(job_id, owner=RELAY, now=utcnow(), message="relayed", revision=1)
    relayed = store.get(job_id)
    assert relayed is not None and relayed.status is JobStatus.RETRYING
    assert store.claim(job_id, lease) is not None


def test_another_pause_still_holds_the_row_and_other_queues_flow(store: Store) -> None:
    held = new_job(store, job_type="ocr")
    other = new_job(store, queue_name="emails", job_type="mail", now=ago(120))
    store.pause("job_type", "ocr", by="ops", reason=None)
    store.pause("queue", "q", by="ops", reason=None)
    assert store.hold(held, 0, now=utcnow(), message="held")
    assert store.resume("job_type", "ocr")
    assert store.unpublished(cutoff=ago(60), now=utcnow()) == [other]  # q is still paused
    store.pause("all", "*", by="ops", reason=None)
    assert store.unpublished(cutoff=ago(60), now=utcnow()) == []
