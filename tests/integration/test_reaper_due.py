"""A job enqueued with a countdown/eta records its due time on its row (``not_before``, on
the database's clock), and the reaper never publishes one that is not due yet (issue 22,
item 8), on PostgreSQL and SQLite. The real worker paused across two passes is in
``tests/acceptance/test_reaper_due.py``."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from celery_tracked import JobStatus, Tracker, tracked_task
from celery_tracked.core.fences import Lease
from celery_tracked.core.jobs import utcnow
from celery_tracked.services.lease import waiting_hold
from celery_tracked.services.rerun import send_job

from .conftest import AppFactory, insert_job
from .test_reaper import LATER, Broker, get, handed_over, reap

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")


@pytest.fixture
def tracker(make_app: AppFactory) -> Tracker:
    return Tracker.for_app(make_app(tracked_reaper_max_rescues=2))


def _due_in(tracker: Tracker, job_id: str) -> float:
    due = get(tracker, job_id).not_before
    assert due is not None, "the countdown was not recorded on the row"
    return (due - tracker._services.store.clock()).total_seconds()


def test_a_countdown_and_an_eta_are_recorded_on_the_row(make_app: AppFactory) -> None:
    app = make_app()

    @tracked_task(app=app, name=f"due.later.{uuid.uuid4().hex}")
    def later() -> None: ...

    by_countdown = later.apply_async(countdown=3600)
    eta = datetime.now(timezone.utc) + timedelta(hours=2)
    by_eta = later.apply_async(eta=eta)
    naive = later.apply_async(eta=(eta + timedelta(hours=1)).replace(tzinfo=None))
    at_once = later.apply_async()
    tracker = Tracker.for_app(app)
    assert 3590 < _due_in(tracker, by_countdown.id) <= 3600  # the database's time + 3600 s
    assert get(tracker, by_eta.id).not_before == eta
    assert get(tracker, naive.id).not_before == eta + timedelta(hours=1)  # read as UTC
    assert get(tracker, at_once.id).not_before is None


def test_a_pending_job_not_due_is_never_stalled_nor_claimed(tracker: Tracker) -> None:
    """Handed over long ago (as the reaper's ``now`` says), found nowhere on two passes:
    still not rescued while its countdown runs on the database's clock."""
    store = tracker._services.store
    far = handed_over(store, due_in_s=7200)  # due after the reaper's cutoff
    near = handed_over(store, due_in_s=1800)  # due before the cutoff, not on the database
    report, sent = reap(tracker, Broker(), now=utcnow() + LATER)
    assert report.rescued == report.abandoned == [] and sent.jobs == []
    for job_id in (far, near):
        assert get(tracker, job_id).status is JobStatus.PENDING
        assert get(tracker, job_id).revision == 0
        # a delivery before its due time is postponed by the rest of it
        who = {"owner": "w", "worker": "w", "now": utcnow(), "lease_s": 30.0}
        assert store.claim(job_id, Lease(**who)) is None
        hold = waiting_hold(get(tracker, job_id), store.clock())
        assert hold is not None and hold.countdown_s > 1700


def test_a_pending_job_past_its_due_time_is_rescued(tracker: Tracker) -> None:
    store = tracker._services.store
    job_id = handed_over(store, due_in_s=-60)  # its countdown ran out a minute ago
    report, sent = reap(tracker, Broker(), now=utcnow() + LATER)
    assert report.rescued == [job_id] and [j.id for j in sent.jobs] == [job_id]
    who = {"owner": "w", "worker": "w", "now": utcnow(), "lease_s": 30.0}
    assert store.claim(job_id, Lease(revision=1, **who)) is not None


class Platform:
    def __init__(self) -> None:
        self.options: list[dict[str, Any]] = []

    def show(self, value: Any, limit: int) -> str:
        return repr(value)[:limit]

    def publish(self, name: str, args: Any, kwargs: Any, options: dict[str, Any]) -> None:
        self.options.append(options)


def test_a_message_sent_from_the_row_carries_the_rest_of_its_wait(tracker: Tracker) -> None:
    """The relay's and the reaper's publish: a row not due yet is sent with the rest of its
    countdown; a due one at once."""
    platform = Platform()
    later = get(tracker, insert_job(tracker._services.store, due_in_s=600))
    now = get(tracker, insert_job(tracker._services.store))
    send_job(platform, later, (), {})  # type: ignore[arg-type]
    send_job(platform, now, (), {})  # type: ignore[arg-type]
    assert 590 < platform.options[0]["countdown"] <= 600
    assert "countdown" not in platform.options[1]


def test_an_eager_run_ignores_a_countdown_as_celery_does(make_app: AppFactory) -> None:
    """``task_always_eager``: the job runs here at once (its row not held back until the
    countdown ends, which blocked the caller for the whole countdown)."""
    app = make_app(task_always_eager=True, task_eager_propagates=True)

    @tracked_task(app=app, name=f"due.eager.{uuid.uuid4().hex}")
    def add(x: int, y: int) -> int:
        return x + y

    began = time.monotonic()
    result = add.apply_async((2, 3), countdown=60)
    assert result.get() == 5 and time.monotonic() - began < 10
    job = get(Tracker.for_app(app), result.id)
    assert job.status is JobStatus.COMPLETED and job.not_before is None
