"""Why a delivery could not claim a waiting row (``lease.waiting_hold``), each judged by its
own column (issue 14): the relay's claim by ``locked_until``, a ``retrying`` row's backoff
by ``not_before``; a run's lease (``processing``) is ``diagnose``'s, never this."""

from __future__ import annotations

from datetime import timedelta

import pytest

from celery_tracked.core.jobs import Job, JobStatus
from celery_tracked.services.lease import RELAY_RECHECK_S, diagnose, waiting_hold
from celery_tracked.services.reaper import Thresholds, stalled_why
from tests.unit.job_rows import NOW, a_job

LIMITS = Thresholds(
    lease_grace_s=15.0, processing_s=60.0, pending_s=600.0, retrying_s=300.0, max_rescues=5
)


def stalled(job: Job) -> str | None:
    return stalled_why(job, db_now=NOW, now=NOW, limits=LIMITS)


RELAY = "relay:host:boot:ns:1:ab12cd34"


def test_a_pending_row_the_relay_holds_waits_for_the_relay_not_for_a_run() -> None:
    held = a_job(locked_by=RELAY, locked_until=NOW + timedelta(seconds=29.5))
    hold = waiting_hold(held, NOW)
    assert hold is not None and hold.countdown_s == RELAY_RECHECK_S
    assert hold.why == "the relay is publishing its message (its claim ends in 29.5 s at most)"
    assert waiting_hold(held, NOW, keyed=True) == hold  # not "no free slot"


@pytest.mark.parametrize("until", [None, NOW, NOW - timedelta(seconds=1)])
def test_a_pending_row_nobody_holds_has_no_hold(until: object) -> None:
    assert waiting_hold(a_job(locked_until=until), NOW) is None


def test_a_retrying_row_waits_for_its_not_before_by_the_remaining_time() -> None:
    due = a_job(status=JobStatus.RETRYING, attempts_made=1, not_before=NOW + timedelta(seconds=42))
    hold = waiting_hold(due, NOW)
    assert hold is not None and hold.why == "its backoff is not due"
    assert hold.countdown_s == pytest.approx(42)
    assert waiting_hold(due, NOW, keyed=True) == hold


def test_a_retrying_row_that_became_due_since_its_claim_looks_again_soon() -> None:
    """The claim was refused a moment before ``not_before``, read a moment after: look again
    soon; for a keyed job the key's full slots refused it (the runner says so)."""
    due = a_job(
        status=JobStatus.RETRYING, attempts_made=1, not_before=NOW - timedelta(seconds=0.05)
    )
    hold = waiting_hold(due, NOW)
    assert hold is not None and (hold.countdown_s, hold.why) == (0.2, "its backoff is not due")
    assert waiting_hold(due, NOW, keyed=True) is None
    assert waiting_hold(a_job(status=JobStatus.RETRYING, not_before=None), NOW) is None


def test_a_lease_is_not_a_due_time_and_a_due_time_is_not_a_lease() -> None:
    """A ``retrying`` row long past its ``not_before`` and a ``processing`` row whose lease
    expired long ago: the reaper judges each by its own column, never by the other's."""
    retrying = a_job(
        status=JobStatus.RETRYING,
        attempts_made=1,
        not_before=NOW - timedelta(hours=1),
        locked_until=NOW + timedelta(hours=1),  # never written on a retrying row; ignored
    )
    running = a_job(
        status=JobStatus.PROCESSING,
        attempts_made=1,
        locked_by="host:boot:ns:1",
        locked_until=NOW - timedelta(hours=1),
        not_before=NOW + timedelta(hours=1),  # never written on a run; ignored
    )
    assert stalled(retrying) == "its retry was due 3600 s ago and never started"
    assert stalled(running) == "attempt 1 was lost (its lease expired 3600 s ago)"
    assert diagnose(running, NOW, None).why == "its lease expired"
    assert waiting_hold(running, NOW) is None  # a run's lease is diagnose's


@pytest.mark.parametrize("status", [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED])
def test_an_ended_row_has_no_hold(status: JobStatus) -> None:
    ended = a_job(status=status, locked_until=NOW + timedelta(hours=1))
    assert waiting_hold(ended, NOW) is None
