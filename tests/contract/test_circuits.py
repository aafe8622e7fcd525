"""The circuits role (``CircuitStore``): each change of a circuit one conditional
``UPDATE`` on the store's clock, and the jobs an open circuit holds, which the relay, the
scheduler pass and the reaper leave alone until it closes (issue 27)."""

from __future__ import annotations

import time
from datetime import timedelta

from celery_tracked.core.circuits import CLOSED, HALF_OPEN, OPEN, CircuitRule, held_by
from celery_tracked.core.jobs import JobStatus, utcnow
from celery_tracked.core.ports import Store
from tests.contract.conftest import ago, claimed, event_names, failure, new_job, stalled

RULE = CircuitRule("stripe", threshold=3, window_s=60, cooldown_s=30)
RELAY = "relay-a:1:1"


def _wait_until(check: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_the_threshold_th_failure_in_the_window_opens_it(store: Store) -> None:
    assert store.circuit("stripe") is None and store.circuits() == []
    first = store.circuit_failed(RULE, "ConnectionError: down")
    assert first is not None and (first.state, first.failures) == (CLOSED, 1)
    assert first.window_started_at is not None
    second = store.circuit_failed(RULE, "ConnectionError: down")
    assert second is not None and (second.state, second.failures) == (CLOSED, 2)
    assert second.window_started_at == first.window_started_at  # the same window
    opened = store.circuit_failed(RULE, "ConnectionError: third")
    assert opened is not None and (opened.state, opened.failures) == (OPEN, 3)
    assert opened.opened_count == 1 and opened.reason == "ConnectionError: third"
    assert opened.opened_by is None and not opened.manual
    assert opened.opened_at is not None and opened.reopen_at is not None
    cooldown = (opened.reopen_at - opened.opened_at).total_seconds()
    assert abs(cooldown - 30) < 0.01  # both on the store's clock
    assert abs((opened.opened_at - store.clock()).total_seconds()) < 5
    again = store.circuit_failed(RULE, "late")  # open: nothing more is counted
    assert again is not None and (again.failures, again.opened_count) == (3, 1)
    assert [c.name for c in store.circuits()] == ["stripe"]


def test_a_failure_after_the_window_starts_a_new_one(store: Store) -> None:
    short = CircuitRule("ocr", threshold=2, window_s=0.2, cooldown_s=30)
    store.circuit_failed(short, "e")
    time.sleep(0.3)  # the window ends (the assertion is on the store's own clock)
    found = store.circuit_failed(short, "e")
    assert found is not None and (found.state, found.failures) == (CLOSED, 1)


def test_the_cool_down_half_opens_it_and_one_probe_decides(store: Store) -> None:
    quick = CircuitRule("stripe", threshold=1, window_s=60, cooldown_s=0.3)
    assert not store.half_open("stripe")  # no row
    store.circuit_failed(quick, "down")
    assert not store.half_open("stripe")  # still cooling down
    assert not store.take_probe("stripe", "job-1", lease_s=60)  # open: no probe
    assert _wait_until(lambda: store.half_open("stripe"))
    found = store.circuit("stripe")
    assert found is not None and found.state == HALF_OPEN and found.probe_job_id is None
    assert store.take_probe("stripe", "job-1", lease_s=60)
    assert store.take_probe("stripe", "job-1", lease_s=60)  # its own probe, again
    assert not store.take_probe("stripe", "job-2", lease_s=60)  # one probe at a time
    found = store.circuit("stripe")
    assert found is not None and (found.probe_job_id, found.probes) == ("job-1", 1)
    assert not store.probe_ended(quick, "job-2", "not the probe")
    assert store.probe_ended(quick, "job-1", "still down")  # open again
    found = store.circuit("stripe")
    assert found is not None and found.state == OPEN and found.opened_count == 2
    assert found.probe_job_id is None and found.reason == "still down"
    assert _wait_until(lambda: store.half_open("stripe"))
    assert store.take_probe("stripe", "job-2", lease_s=60)
    assert store.probe_ended(quick, "job-2", None)  # passed: closed
    found = store.circuit("stripe")
    assert found is not None and (found.state, found.failures, found.probes) == (CLOSED, 0, 2)
    assert found.closed_at is not None and found.window_started_at is None
    assert not store.probe_ended(quick, "job-2", None)  # once


def test_a_probe_whose_time_ran_out_is_taken_by_another(store: Store) -> None:
    quick = CircuitRule("stripe", threshold=1, window_s=60, cooldown_s=0.1)
    store.circuit_failed(quick, "down")
    assert _wait_until(lambda: store.half_open("stripe"))
    assert store.take_probe("stripe", "job-1", lease_s=0.2)
    assert _wait_until(lambda: store.take_probe("stripe", "job-2", lease_s=60))
    found = store.circuit("stripe")
    assert found is not None and (found.probe_job_id, found.probes) == ("job-2", 2)


def test_opened_by_hand_it_stays_open_until_closed_by_hand(store: Store) -> None:
    assert not store.by_hand("stripe", None, None)  # nothing to close
    assert store.by_hand("stripe", "ops@host", "provider incident")
    assert not store.by_hand("stripe", "other@host", "again")  # the first one's kept
    found = store.circuit("stripe")
    assert found is not None and found.manual and found.opened_by == "ops@host"
    assert found.reason == "provider incident" and found.reopen_at is None
    assert not store.half_open("stripe")  # never by itself
    assert store.circuit_failed(RULE, "e") is not None
    assert store.by_hand("stripe", None, None)
    found = store.circuit("stripe")
    assert found is not None and found.state == CLOSED and found.opened_by is None
    assert found.opened_count == 1


def test_an_automatic_open_becomes_a_manual_one(store: Store) -> None:
    quick = CircuitRule("stripe", threshold=1, window_s=60, cooldown_s=0.1)
    store.circuit_failed(quick, "down")
    assert store.by_hand("stripe", "ops", None)
    time.sleep(0.2)
    assert not store.half_open("stripe")
    found = store.circuit("stripe")
    assert found is not None and found.manual and found.opened_count == 2


def test_a_held_job_waits_for_its_circuit_then_goes_to_the_relay(store: Store) -> None:
    job_id = new_job(store, now=ago(120))
    assert store.handed_over(job_id, ago(119))
    store.by_hand("stripe", "ops", None)
    assert not store.hold(job_id, 1, now=utcnow(), message="held", circuit="stripe")
    assert store.hold(job_id, 0, now=utcnow(), message="held: circuit open", circuit="stripe")
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.PENDING and job.attempts_made == 0
    assert job.published_at is None and job.revision == 1
    assert job.locked_by == held_by("stripe")
    assert event_names(store, job_id) == ["enqueued", "circuit_open"]
    assert store.circuit_held("stripe") == [job_id] and store.circuit_held("other") == []
    # open: neither the relay, the scheduler pass nor the reaper publishes it
    assert store.unpublished(cutoff=utcnow(), now=utcnow()) == []
    assert not store.relay_claim(job_id, owner=RELAY, now=utcnow(), lease_s=30, cutoff=utcnow())
    assert store.held_due(until=utcnow() + timedelta(days=1)) == []
    assert stalled(store, pending_cutoff=utcnow()) == []
    assert store.backlog(cutoff=utcnow()) == 0
    store.by_hand("stripe", None, None)  # closed: the relay's, without its grace
    assert store.unpublished(cutoff=ago(3600), now=utcnow()) == [job_id]
    assert store.relay_claim(job_id, owner=RELAY, now=utcnow(), lease_s=30, cutoff=ago(3600))
    assert store.relayed(job_id, owner=RELAY, now=utcnow(), message="relayed", revision=1)
    assert claimed(store, job_id, revision=1).attempt == 1


def test_the_probe_pass_claims_and_sends_one_held_job(store: Store) -> None:
    quick = CircuitRule("stripe", threshold=1, window_s=60, cooldown_s=0.1)
    first, second = new_job(store, now=ago(60)), new_job(store, now=ago(30))
    store.circuit_failed(quick, "down")
    for job_id in (first, second):
        assert store.hold(job_id, 0, now=utcnow(), message="held", circuit="stripe")
    assert store.circuit_held("stripe") == [first, second]  # longest held first
    assert _wait_until(lambda: store.half_open("stripe"))
    assert store.unpublished(cutoff=utcnow(), now=utcnow()) == []  # half-open: still held
    assert not store.probe_claim(first, "other", "probe:1", 30)
    assert store.probe_claim(first, "stripe", "probe:1", 30)
    assert not store.probe_claim(first, "stripe", "probe:2", 30)  # once
    assert store.circuit_held("stripe") == [second]
    assert not store.probe_sent(first, "probe:2", 1, "sent")  # not its claim
    assert store.probe_sent(first, "probe:1", 1, "sent as the probe")
    job = store.get(first)
    assert job is not None and job.published_at is not None and job.locked_by is None
    assert event_names(store, first)[-1] == "circuit_probe"


def test_a_held_retrying_job_keeps_its_status_and_its_attempts(store: Store) -> None:
    job_id = new_job(store)
    assert store.retrying(claimed(store, job_id), failure(utcnow()), delay_ms=0)
    store.by_hand("stripe", "ops", None)
    assert store.hold(job_id, 0, now=utcnow(), message="held", circuit="stripe")
    job = store.get(job_id)
    assert job is not None and job.status is JobStatus.RETRYING and job.attempts_made == 1
    assert stalled(store, retrying_cutoff=utcnow()) == []
    assert store.unpublished(cutoff=ago(3600), now=utcnow()) == []
    store.by_hand("stripe", None, None)
    assert store.unpublished(cutoff=ago(3600), now=utcnow()) == [job_id]
