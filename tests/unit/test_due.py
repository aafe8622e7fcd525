"""A pending job's countdown/eta (``not_before``, issue 22 item 8): a delivery before it
waits the rest of it (a worker whose clock runs ahead waits once more, never in a loop),
the reaper never judges it stalled before it (on the database's clock) plus its patience,
and a producer's options give it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from celery_tracked.services.lease import waiting_hold
from celery_tracked.services.producer import NewJob, due
from celery_tracked.services.reaper import Thresholds, presumed_lost, stalled_why
from tests.unit.job_rows import NOW, a_job
from tests.unit.test_messages_and_lease import new_job

LIMITS = Thresholds(
    lease_grace_s=15.0, processing_s=60.0, pending_s=600.0, retrying_s=300.0, max_rescues=5
)
LONG_AGO = NOW - timedelta(hours=2)


def test_an_early_delivery_of_a_countdown_job_waits_the_rest_of_it() -> None:
    job = a_job(not_before=NOW + timedelta(seconds=3.5), published_at=LONG_AGO)
    hold = waiting_hold(job, NOW)
    assert hold is not None and hold.countdown_s == 3.5 and "countdown/eta" in hold.why
    # a worker 1.5 s ahead of the database: its timer fires 1.5 s early, it waits 1.5 s
    ahead = waiting_hold(job, NOW + timedelta(seconds=2))
    assert ahead is not None and ahead.countdown_s == 1.5
    # due: a pending claim that failed is another's (no backoff hold)
    assert waiting_hold(a_job(not_before=NOW - timedelta(seconds=1)), NOW) is None


def test_a_pending_job_is_stalled_only_its_patience_after_it_is_due() -> None:
    def stalled(due_in: float, now: datetime = NOW) -> str | None:
        job = a_job(not_before=NOW + timedelta(seconds=due_in), published_at=LONG_AGO)
        return stalled_why(job, db_now=NOW, now=now, limits=LIMITS)

    assert stalled(3600) is None
    assert stalled(-599) is None  # due lately
    why = stalled(-601)
    assert why is not None and "due 601 s ago" in why
    # a given ``now`` far ahead judges the patience; "due" only on the database's clock
    assert stalled(60, now=NOW + timedelta(hours=1)) is None


def test_of_a_queue_the_latest_due_are_taken_to_be_its_ready_messages() -> None:
    old = a_job(id="old", published_at=LONG_AGO)
    later_due = a_job(id="later", published_at=LONG_AGO - timedelta(hours=1), not_before=NOW)
    assert [j.id for j in presumed_lost([later_due, old], set(), 1)] == ["old"]


def test_a_countdown_wins_over_an_eta_a_naive_eta_is_utc() -> None:
    def new() -> NewJob:
        return new_job(None)

    eta = datetime(2030, 1, 1, 12, 0)
    assert due(new(), {"countdown": 5, "eta": eta}).due_in_s == 5.0
    assert due(new(), {"eta": eta}).due_at == eta.replace(tzinfo=timezone.utc)
    assert due(new(), {"eta": "2030-01-01T13:00:00+01:00"}).due_at == eta.replace(
        tzinfo=timezone.utc
    )
    assert due(new(), {}).due_at is None and due(new(), {}).due_in_s is None
