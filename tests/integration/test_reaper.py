"""The reaper's moves on a real database (PostgreSQL and SQLite): what it rescues, what it
abandons, what it never touches, and that a late delivery of the old message runs nothing.
The broker's answers come from a twin (``Broker`` below); the real broker and workers are
in ``tests/acceptance/test_reaper.py``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from celery_tracked import JobStatus, Tracker, tracked_task
from celery_tracked.adapter.beat import REAP_TASK
from celery_tracked.core.fences import AttemptError, Completion, Lease
from celery_tracked.core.jobs import Claim, Job, utcnow
from celery_tracked.core.redact import REDACTED
from celery_tracked.services.reaper import Reaper, ReapReport
from celery_tracked.services.stall import confirm_seconds
from celery_tracked.store import JobStore
from tests.conftest import wait_for

from .conftest import AppFactory, insert_job

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")

LATER = timedelta(hours=1)
OWNER = "elsewhere:boot:ns:1"


@dataclass
class Broker:
    """The broker's answers: ``ready`` messages per queue, the ids live workers ``held``
    (None: cannot say)."""

    ready_count: int | None = 0
    held_ids: set[str] | None = field(default_factory=set)
    asked: list[str] = field(default_factory=list)

    def ready(self, queue: str) -> int | None:
        self.asked.append(queue)
        return self.ready_count

    def held(self, message_ids: Sequence[str]) -> Collection[str] | None:
        return self.held_ids


@dataclass
class Sent:
    """A publish that records what it was handed (or fails)."""

    jobs: list[Job] = field(default_factory=list)
    fail: bool = False

    def __call__(self, job: Job) -> None:
        if self.fail:
            raise ConnectionError("broker down: redis://:hunter2@broker:6379/0")
        self.jobs.append(job)


@pytest.fixture
def tracker(make_app: AppFactory) -> Tracker:
    app = make_app(
        tracked_lease_seconds=1.0,  # a takeover grace of 0.25 s
        tracked_reaper_processing_seconds=0,
        tracked_reaper_max_rescues=2,
    )
    return Tracker.for_app(app)


def reap(
    tracker: Tracker, broker: Broker | None = None, confirmed: bool = True, **kw: Any
) -> tuple[ReapReport, Sent]:
    """A pass of the reaper; ``confirmed``: and the confirming pass after it (a message
    found nowhere is taken as lost only by a second pass, ``confirm_s`` later)."""
    sent = Sent(fail=kw.pop("fail", False))
    reaper = Reaper(
        tracker._services.store, tracker._services.hooks, tracker.settings, sent, broker or Broker()
    )
    report = reaper.run(**kw)
    if not confirmed:
        return report, sent
    now = kw.pop("now", None) or tracker._services.store.clock()
    later = now + timedelta(seconds=reaper.limits.confirm_s)
    second = reaper.run(now=later, **kw)
    for name in ("rescued", "abandoned", "unpublished", "cancelled"):
        getattr(report, name).extend(getattr(second, name))
    report.left = second.left
    return report, sent


def handed_over(store: JobStore, **values: Any) -> str:
    job_id = insert_job(store, **values)
    assert store.handed_over(job_id, utcnow())
    return job_id


def running(store: JobStore, lease_s: float, **values: Any) -> Job:
    job_id = handed_over(store, **values)
    who = {"owner": OWNER, "worker": "w1@dead", "now": utcnow()}
    assert store.claim(job_id, Lease(lease_s=lease_s, **who)) is not None
    job = store.get(job_id)
    assert job is not None
    return job


def events(tracker: Tracker, job_id: str) -> list[str]:
    return [e.event for e in tracker.history(job_id)]


def get(tracker: Tracker, job_id: str) -> Job:
    job = tracker.get_job(job_id)
    assert job is not None
    return job


# -- processing ---------------------------------------------------------------------------


def test_a_lapsed_run_is_rescued_and_the_old_message_runs_nothing(tracker: Tracker) -> None:
    store = tracker._services.store
    job = running(store, lease_s=0.0)
    report, sent = wait_for(lambda: (r := reap(tracker))[0].rescued and r, what="a rescue")
    assert report.rescued == [job.id] and report.abandoned == []
    after = get(tracker, job.id)
    assert after.status is JobStatus.RETRYING and after.revision == job.revision + 1
    assert after.error_type == "WorkerLost" and after.locked_by is None
    # the lapsed lease is gone; the next attempt is due at once (issue 14: its own column)
    assert after.locked_until is None
    assert after.not_before is not None and after.not_before <= store.clock()
    assert events(tracker, job.id)[-1] == "rescued"
    assert [(j.id, j.revision, j.status) for j in sent.jobs] == [
        (job.id, job.revision + 1, JobStatus.RETRYING)
    ]
    who = {"owner": "w2", "worker": "w2", "now": utcnow(), "lease_s": 30.0}
    assert store.claim(job.id, Lease(revision=job.revision, **who)) is None  # the old message
    claim = store.claim(job.id, Lease(revision=job.revision + 1, **who))
    assert claim is not None and claim.attempt == 2


def test_a_stalled_run_asked_to_stop_is_cancelled_never_rescued_nor_abandoned(
    tracker: Tracker,
) -> None:
    """``Tracker.cancel(job_id, running=True)`` recorded a request, then the whole worker
    died: the reaper ends the job ``cancelled`` as asked (its body never runs again)."""
    store = tracker._services.store
    job = running(store, lease_s=60.0)
    assert store.request_cancel(job.id, now=utcnow(), message="stop it")
    assert store.renew(Claim(job.id, job.attempts_made, job.max_attempts), 0.0)
    report, sent = wait_for(lambda: (r := reap(tracker))[0].cancelled and r, what="a cancel")
    assert report.cancelled == [job.id] and report.rescued == report.abandoned == []
    assert sent.jobs == []
    assert get(tracker, job.id).status is JobStatus.CANCELLED
    assert events(tracker, job.id)[-1] == "cancelled"


def test_a_live_lease_is_never_touched_whatever_the_time(tracker: Tracker) -> None:
    job = running(tracker._services.store, lease_s=60.0)
    report, sent = reap(tracker, now=utcnow() + timedelta(days=2))
    empty: dict[str, list[str]] = {"rescued": [], "abandoned": [], "left": [], "unpublished": []}
    assert report.as_dict() == {**empty, "cancelled": []}
    assert get(tracker, job.id).status is JobStatus.PROCESSING and sent.jobs == []


def test_the_reaper_waits_its_processing_seconds_a_given_now_skips_them(
    make_app: AppFactory,
) -> None:
    """``tracked_reaper_processing_seconds`` (default 60 s) lets the broker's redelivery go
    first; ``now`` stands for a later time, though only the database's clock lapses a lease."""
    tracker = Tracker.for_app(make_app(tracked_lease_seconds=1.0))
    job = running(tracker._services.store, lease_s=0.0)
    clock = tracker._services.store.clock()
    wait_for(
        lambda: (tracker._services.store.clock() - clock).total_seconds() > 0.5, what="the grace"
    )
    assert reap(tracker)[0].rescued == []
    assert reap(tracker, now=utcnow() + LATER)[0].rescued == [job.id]


def test_a_lost_last_attempt_is_abandoned(tracker: Tracker) -> None:
    job = running(tracker._services.store, lease_s=0.0, max_attempts=1)
    report, sent = wait_for(lambda: (r := reap(tracker))[0].abandoned and r, what="abandon")
    assert report.abandoned == [job.id] and sent.jobs == []
    after = get(tracker, job.id)
    assert (after.status, after.error_type) == (JobStatus.FAILED, "abandoned")
    assert after.retries_exhausted and after.finished_at is not None
    assert "no attempts remain" in (after.error_message or "")
    assert events(tracker, job.id)[-1] == "failed"


# -- pending and retrying -----------------------------------------------------------------


def test_a_pending_job_whose_message_is_lost_is_sent_again(tracker: Tracker) -> None:
    job_id = handed_over(tracker._services.store)
    report, sent = reap(tracker, now=utcnow())  # handed over just now: not stalled
    assert report.rescued == [] and report.left == []
    report, sent = reap(tracker, now=utcnow() + LATER)
    assert report.rescued == [job_id]
    after = get(tracker, job_id)
    assert after.status is JobStatus.PENDING and after.revision == 1
    assert after.published_at is not None  # the new message is handed over
    assert [j.revision for j in sent.jobs] == [1]
    assert events(tracker, job_id) == ["enqueued", "missing", "rescued"]


def test_a_message_a_live_worker_holds_or_a_backlog_may_hold_is_left(tracker: Tracker) -> None:
    first, second = handed_over(tracker._services.store), handed_over(tracker._services.store)
    later = utcnow() + LATER
    report, _ = reap(tracker, Broker(held_ids={first, second}), now=later)
    assert sorted(report.left) == sorted([first, second]) and report.rescued == []
    report, _ = reap(tracker, Broker(ready_count=2), now=later)
    assert sorted(report.left) == sorted([first, second]) and report.rescued == []
    report, _ = reap(tracker, Broker(ready_count=1), now=later)
    assert report.rescued == [first] and report.left == [second]  # the oldest is lost
    assert get(tracker, second).revision == 0


def test_nothing_waiting_is_touched_when_the_broker_cannot_say(tracker: Tracker) -> None:
    job_id = handed_over(tracker._services.store)
    later = utcnow() + LATER
    for broker in (Broker(ready_count=None), Broker(held_ids=None)):
        report, sent = reap(tracker, broker, now=later)
        assert report.left == [job_id] and report.rescued == [] and sent.jobs == []
    assert get(tracker, job_id).revision == 0


def test_a_retrying_job_is_rescued_only_long_past_due(tracker: Tracker) -> None:
    store = tracker._services.store
    job = running(store, lease_s=30.0)
    held = Claim(job.id, 1, job.max_attempts)
    assert store.retrying(
        held,
        AttemptError(error_type="E", error_message="m", duration_ms=None, now=utcnow()),
        delay_ms=3_600_000,
    )
    report, _ = reap(tracker, now=utcnow() + timedelta(minutes=30))  # due in an hour
    assert report.rescued == [] and report.left == []
    report, sent = reap(tracker, now=utcnow() + timedelta(hours=2))
    assert report.rescued == [job.id]
    after = get(tracker, job.id)
    assert after.status is JobStatus.RETRYING and after.revision == 1
    assert after.not_before is not None and after.not_before <= store.clock()  # due now
    assert (after.locked_by, after.locked_until) == (None, None)  # and held by nobody
    assert [(j.status, j.revision) for j in sent.jobs] == [(JobStatus.RETRYING, 1)]


def test_the_rescue_cap_abandons_and_a_retry_starts_it_afresh(tracker: Tracker) -> None:
    job_id = handed_over(tracker._services.store)
    when = utcnow()
    for _ in range(2):  # tracked_reaper_max_rescues = 2
        when += LATER
        assert reap(tracker, now=when)[0].rescued == [job_id]
    when += LATER
    report, _ = reap(tracker, now=when)
    assert report.abandoned == [job_id]
    after = get(tracker, job_id)
    assert (after.status, after.error_type) == (JobStatus.FAILED, "abandoned")
    assert "rescued 2 time(s)" in (after.error_message or "")
    assert not after.retries_exhausted
    # the user runs it again: its rescues count from zero
    assert tracker._services.store.retry(
        job_id, seen_revision=after.revision, budget=3, now=utcnow(), message="again"
    )
    assert tracker._services.store.handed_over(job_id, utcnow(), after.revision + 1)
    when += LATER
    assert reap(tracker, now=when)[0].rescued == [job_id]


def test_a_retry_of_another_job_does_not_reset_a_jobs_rescue_count(tracker: Tracker) -> None:
    """Rescues are counted per job since *its own* last retry: a ``Tracker.retry`` of some
    other job (a newer ``retried`` event in the table) must not start the count afresh."""
    lost, other = handed_over(tracker._services.store), handed_over(tracker._services.store)
    when = utcnow()
    for _ in range(2):  # tracked_reaper_max_rescues = 2
        when += LATER
        assert sorted(reap(tracker, now=when)[0].rescued) == sorted([lost, other])
    assert tracker.cancel(other)
    cancelled = get(tracker, other)
    assert tracker._services.store.retry(
        other, seen_revision=cancelled.revision, budget=3, now=utcnow(), message="again"
    )
    when += LATER
    report, _ = reap(tracker, now=when)
    assert report.abandoned == [lost] and lost not in report.rescued
    assert events(tracker, lost).count("rescued") == 2


def test_a_failed_publish_leaves_a_pending_job_to_the_relay(tracker: Tracker) -> None:
    job_id = handed_over(tracker._services.store)
    report, _ = reap(tracker, now=utcnow() + LATER, fail=True)
    assert report.rescued == [job_id] and report.unpublished == [job_id]
    after = get(tracker, job_id)
    assert after.published_at is None and after.revision == 1
    later = utcnow() + LATER
    assert tracker._services.store.unpublished(cutoff=later, now=later) == [job_id]


def test_redacted_arguments_abandon_instead_of_sending_the_marker(tracker: Tracker) -> None:
    payload = json.dumps({"args": [], "kwargs": {"password": REDACTED}})
    job_id = handed_over(tracker._services.store, payload_json=payload)
    report, sent = reap(tracker, now=utcnow() + LATER)
    assert report.abandoned == [job_id] and sent.jobs == []
    assert "arguments=" in (get(tracker, job_id).error_message or "")


def test_an_ended_or_unpublished_job_is_never_touched(tracker: Tracker) -> None:
    store = tracker._services.store
    unpublished = insert_job(store)  # the relay's
    done = running(store, lease_s=30.0)
    assert store.complete(
        Claim(done.id, 1, done.max_attempts),
        Completion(result_json=None, now=utcnow(), duration_ms=1),
    )
    report, _ = reap(tracker, now=utcnow() + timedelta(days=30))
    assert report.as_dict()["rescued"] == [] and report.left == []
    assert get(tracker, unpublished).revision == 0
    assert get(tracker, done.id).status is JobStatus.COMPLETED


# -- the task and its Beat entry ------------------------------------------------------------


def add_task(app: Any) -> None:
    def noop() -> None: ...

    tracked_task(app=app, name=f"reap_test.{uuid.uuid4().hex}")(noop)


def test_an_app_with_a_tracked_task_gets_the_reaper_beat_entry(make_app: AppFactory) -> None:
    app = make_app(tracked_reaper_interval_seconds=9)
    add_task(app)
    app.finalize()
    entry = app.conf.beat_schedule[REAP_TASK]
    assert entry["task"] == REAP_TASK and entry["schedule"] == 9
    assert entry["options"]["expires"] == 9
    assert REAP_TASK in app.tasks


def test_the_users_own_reaper_entry_and_turning_it_off_are_respected(
    make_app: AppFactory,
) -> None:
    mine = {"task": REAP_TASK, "schedule": 3600.0}
    app = make_app(beat_schedule={REAP_TASK: mine})
    add_task(app)
    app.finalize()
    assert app.conf.beat_schedule[REAP_TASK] == mine
    off = make_app(tracked_reaper_interval_seconds=0)
    add_task(off)
    off.finalize()
    assert REAP_TASK not in off.conf.beat_schedule
    assert "celery_tracked.relay" in off.conf.beat_schedule  # the other entry stays


def test_waiting_jobs_left_alone_never_hide_a_lapsed_run(
    tracker: Tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backlog older than the pending threshold fills a pass's batch with jobs the reaper
    leaves alone (their queue's ready messages account for them); a run that lapsed later
    must still be rescued (was: read only after the backlog drained)."""
    import celery_tracked.services.reaper

    monkeypatch.setattr(celery_tracked.services.reaper, "BATCH", 3)
    backlog = [handed_over(tracker._services.store) for _ in range(3)]
    job = running(tracker._services.store, lease_s=0.0)
    report, sent = wait_for(
        lambda: (r := reap(tracker, Broker(ready_count=3), now=utcnow() + LATER))[0].rescued and r,
        timeout=5,  # the lease lapses a grace (0.25 s) after it expired, on the db's clock
        what="the lapsed run's rescue",
    )
    assert report.rescued == [job.id] and sorted(report.left) == sorted(backlog)
    assert [j.id for j in sent.jobs] == [job.id]


def test_a_run_with_redacted_arguments_is_left_while_its_message_may_be_queued(
    tracker: Tracker,
) -> None:
    """A dead worker's run whose arguments were stored redacted: while its queue's ready
    messages may hold its original message (RabbitMQ gives it back at once), it is left
    for that delivery to take over; once the broker cannot account for it, abandoned."""
    payload = json.dumps({"args": [], "kwargs": {"password": REDACTED}})
    job = running(tracker._services.store, lease_s=0.0, payload_json=payload)
    report, sent = wait_for(
        lambda: (r := reap(tracker, Broker(ready_count=1), now=utcnow() + LATER))[0].left and r,
        timeout=5,  # the lease lapses a grace (0.25 s) after it expired, on the db's clock
        what="the lapsed run judged",
    )
    assert report.left == [job.id] and report.abandoned == [] and sent.jobs == []
    assert get(tracker, job.id).status is JobStatus.PROCESSING
    report, _ = reap(tracker, Broker(ready_count=0), now=utcnow() + LATER)
    assert report.abandoned == [job.id]
    assert get(tracker, job.id).error_type == "abandoned"


# -- a message found nowhere: rescued only when a second pass confirms it (issue 22, item 8)


def test_a_message_found_nowhere_is_rescued_only_when_a_later_pass_confirms_it(
    tracker: Tracker,
) -> None:
    job_id = handed_over(tracker._services.store)
    confirm = timedelta(seconds=confirm_seconds(tracker.settings.reaper_interval_seconds))
    when = utcnow() + LATER
    report, sent = reap(tracker, now=when, confirmed=False)  # e.g. its holder did not answer
    assert report.rescued == [] and report.left == [job_id] and sent.jobs == []
    assert events(tracker, job_id) == ["enqueued", "missing"]
    report, _ = reap(tracker, now=when + confirm / 2, confirmed=False)  # too soon to confirm
    assert report.rescued == [] and events(tracker, job_id) == ["enqueued", "missing"]
    # found again (its holder answers): the next sighting starts over
    report, _ = reap(tracker, Broker(held_ids={job_id}), now=when + confirm, confirmed=False)
    assert report.rescued == [] and events(tracker, job_id)[-1] == "found"
    report, _ = reap(tracker, now=when + 2 * confirm, confirmed=False)
    assert report.rescued == [] and events(tracker, job_id)[-2:] == ["found", "missing"]
    report, sent = reap(tracker, now=when + 3 * confirm, confirmed=False)
    assert report.rescued == [job_id] and [j.revision for j in sent.jobs] == [1]
    assert events(tracker, job_id)[-1] == "rescued"


def test_a_broker_that_cannot_answer_marks_nothing(tracker: Tracker) -> None:
    job_id = handed_over(tracker._services.store)
    report, _ = reap(tracker, Broker(held_ids=None), now=utcnow() + LATER)
    assert report.rescued == [] and report.left == [job_id]
    assert events(tracker, job_id) == ["enqueued"]


def test_a_waiting_job_whose_delivery_was_postponed_is_not_stalled(make_app: AppFactory) -> None:
    """A delivery postponed behind a rate limit or a full key hands its message to the
    broker again and says so (``republished``): the job is alive (issue 22, item 0)."""
    app = make_app(
        tracked_reaper_pending_seconds=1,
        tracked_reaper_retrying_seconds=1,
        tracked_lease_seconds=30,
    )
    tracker = Tracker.for_app(app)
    store = tracker._services.store
    pending = handed_over(store)
    job = running(store, lease_s=30.0)
    claim = Claim(job.id, 1, job.max_attempts)
    error = AttemptError(error_type="E", error_message="m", duration_ms=None, now=utcnow())
    assert store.retrying(claim, error, delay_ms=0)
    start = store.clock()
    wait_for(lambda: (store.clock() - start).total_seconds() > 1.5, what="the thresholds")
    assert store.republished(pending, 0, 0.25) and store.republished(job.id, 0, 0.25)
    assert not store.republished(job.id, 1, 0.25)  # a replaced message's delivery
    report, sent = reap(tracker, confirmed=False)  # both due (or handed over) 1.5 s ago
    assert report.as_dict() == ReapReport().as_dict() and sent.jobs == []
