"""Issue 26: due times held in the database and deadlines, on the in-memory store (no
service): the pure decisions, bad input refused before anything is written, a held job
created without a message and published once by the scheduler pass."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery

from celery_tracked import (
    InvalidPayload,
    InvalidTaskOption,
    JobStatus,
    Tracker,
    tracked_task,
)
from celery_tracked.adapter.beat import TASKS
from celery_tracked.backends.memory import MemoryStore
from celery_tracked.core.deadlines import (
    Deadline,
    check_deadline,
    deadline_of,
    held,
    held_row,
    past_deadline,
    task_deadline,
)
from celery_tracked.core.jobs import utcnow
from celery_tracked.services.relay import rest_of_wait
from tests.unit.job_rows import a_job

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_a_deadline_is_an_aware_time_or_a_positive_span() -> None:
    assert deadline_of(None) == Deadline()
    assert deadline_of(timedelta(minutes=10)) == Deadline(in_s=600.0)
    assert deadline_of(90) == Deadline(in_s=90.0)
    assert deadline_of(NOW) == Deadline(at=NOW)
    with pytest.raises(InvalidPayload, match="aware datetime"):
        deadline_of(datetime(2026, 1, 1))
    for bad in (0, -5, timedelta(seconds=-1), float("nan"), float("inf")):
        with pytest.raises(InvalidPayload, match="positive span"):
            deadline_of(bad)
    with pytest.raises(TypeError, match="timedelta"):
        deadline_of("10m")
    with pytest.raises(TypeError):
        deadline_of(True)


def test_a_task_deadline_is_a_span() -> None:
    assert task_deadline(timedelta(minutes=10)) == 600.0
    assert task_deadline(None) is None
    for bad in (NOW, -1, "soon"):
        with pytest.raises(InvalidTaskOption, match="deadline"):
            task_deadline(bad)


def test_a_deadline_must_come_after_the_due_time() -> None:
    check_deadline(Deadline(in_s=60), 30, None, NOW)
    check_deadline(Deadline(at=NOW + timedelta(hours=2)), None, NOW + timedelta(hours=1), NOW)
    with pytest.raises(InvalidPayload, match="not after the job's due time"):
        check_deadline(Deadline(in_s=60), 120, None, NOW)
    with pytest.raises(InvalidPayload, match="not after"):
        check_deadline(Deadline(at=NOW + timedelta(minutes=5)), None, NOW + timedelta(hours=1), NOW)
    with pytest.raises(InvalidPayload, match="not after"):
        check_deadline(Deadline(at=NOW - timedelta(seconds=1)), None, None, NOW)  # past already
    with pytest.raises(InvalidPayload, match="not after"):
        check_deadline(Deadline(in_s=60), None, NOW + timedelta(minutes=2), NOW)


def test_held_past_the_horizon_only() -> None:
    assert held(301, None, 300, NOW) and not held(300, None, 300, NOW)
    assert held(None, NOW + timedelta(seconds=400), 300, NOW)
    assert not held(None, NOW + timedelta(seconds=200), 300, NOW)
    assert not held(None, None, 300, NOW)
    row = a_job(updated_at=NOW, not_before=NOW + timedelta(hours=2))
    assert held_row(row, 300) and not held_row(row, 3 * 3600)
    assert not held_row(a_job(updated_at=NOW), 300)


def test_past_deadline_and_the_rest_of_the_wait() -> None:
    job = a_job(deadline_at=NOW)
    assert past_deadline(job, NOW) and not past_deadline(job, NOW - timedelta(seconds=1))
    assert not past_deadline(a_job(), NOW)
    due = a_job(not_before=NOW + timedelta(seconds=100))
    # the database's clock at NOW: the message a publish makes waits 100 s from here
    moved = rest_of_wait(due, NOW)
    assert moved.not_before is not None
    assert 99 <= (moved.not_before - utcnow()).total_seconds() <= 101
    assert rest_of_wait(a_job(), NOW).not_before is None


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("sched", broker="memory://", set_as_current=False)
    app.conf.update(
        tracked_database_url="memory://",
        tracked_redis_url="memory://",
        tracked_schedule_horizon_seconds=300,
    )
    yield app


def _task(app: Celery, **options: Any) -> Any:
    @tracked_task(app=app, shared=False, name="sched.remind", **options)
    def remind(who: str) -> str:
        return who

    return remind


def test_a_far_job_is_held_without_a_message_and_published_once(app: Celery) -> None:
    remind = _task(app)
    tracker = Tracker.for_app(app)
    far = remind.apply_async(args=("a",), countdown=7200)
    near = remind.apply_async(args=("b",), countdown=10)
    job = tracker.get_job(far.id)
    assert job is not None and job.status is JobStatus.PENDING
    assert job.published_at is None and job.not_before is not None  # no message
    assert 7100 < (job.not_before - utcnow()).total_seconds() <= 7200
    near_job = tracker.get_job(near.id)
    assert near_job is not None and near_job.published_at is not None  # in the broker
    assert tracker.schedule().as_dict()["published"] == []  # not within the horizon
    assert tracker.relay(now=utcnow() + timedelta(hours=1)).as_dict()["published"] == []
    stats = tracker.stats()["celery"]
    assert stats["scheduled"] == 2 and stats["oldest_pending_age_s"] is None
    assert [j.id for j in tracker.jobs(due_after=timedelta(hours=1)).jobs] == [far.id]
    soon = job.not_before - timedelta(seconds=100)
    assert tracker.schedule(now=soon).as_dict()["published"] == [far.id]
    assert tracker.schedule(now=soon).as_dict()["published"] == []  # once
    sent = tracker.get_job(far.id)
    assert sent is not None and sent.published_at is not None
    assert [e.event for e in tracker.history(far.id)] == ["enqueued", "scheduled"]


def test_a_held_job_past_its_deadline_is_cancelled_by_the_pass(app: Celery) -> None:
    remind = _task(app, deadline=timedelta(hours=3))
    tracker = Tracker.for_app(app)
    r = remind.apply_async(args=("a",), countdown=7200)
    job = tracker.get_job(r.id)
    assert job is not None and job.deadline_at is not None
    assert 3 * 3600 - 100 < (job.deadline_at - utcnow()).total_seconds() <= 3 * 3600
    store = tracker._services.store
    assert isinstance(store, MemoryStore)  # its deadline passed while it was held
    store.rows[r.id] = replace(job, deadline_at=utcnow() - timedelta(seconds=1))
    report = tracker.schedule(now=job.not_before).as_dict()
    assert report["cancelled"] == [r.id] and report["published"] == []
    ended = tracker.get_job(r.id)
    assert ended is not None and ended.status is JobStatus.CANCELLED
    assert ended.error_type == "DeadlineExceeded" and "deadline" in (ended.error_message or "")


def test_bad_schedule_input_is_refused_before_anything_is_written(app: Celery) -> None:
    remind = _task(app)
    tracker = Tracker.for_app(app)
    with pytest.raises(InvalidPayload, match="aware"):
        remind.apply_async(args=("a",), _deadline=datetime(2030, 1, 1))
    with pytest.raises(InvalidPayload, match="not after the job's due time"):
        remind.apply_async(args=("a",), countdown=3600, _deadline=timedelta(minutes=5))
    with pytest.raises(InvalidPayload, match="positive"):
        remind.enqueue("a", _deadline=-3)
    with pytest.raises(InvalidPayload, match="not after"):
        remind.with_options(deadline=utcnow() - timedelta(seconds=5))("a")
    assert tracker.jobs().jobs == ()
    with pytest.raises(InvalidTaskOption, match="deadline"):
        _task(app, deadline=-1)


def test_a_per_call_deadline_wins_over_the_task_s(app: Celery) -> None:
    remind = _task(app, deadline=timedelta(minutes=10))
    tracker = Tracker.for_app(app)
    at = utcnow() + timedelta(hours=5)
    job = tracker.get_job(remind.apply_async(args=("a",), _deadline=at).id)
    assert job is not None and job.deadline_at == at
    own = tracker.get_job(remind.enqueue("b").job_id)
    assert own is not None and own.deadline_at is not None
    assert 500 < (own.deadline_at - utcnow()).total_seconds() <= 600


def test_the_schedule_plugin_has_a_task_and_a_beat_entry(app: Celery) -> None:
    _task(app)
    app.finalize()
    assert "schedule" in TASKS
    entry = app.conf.beat_schedule["celery_tracked.schedule"]
    assert entry["schedule"] == 30.0


def test_a_held_job_is_cancelled_and_retried_like_any_pending_one(app: Celery) -> None:
    remind = _task(app)
    tracker = Tracker.for_app(app)
    r = remind.apply_async(args=("a",), countdown=7200)
    assert tracker.cancel(r.id)
    job = tracker.get_job(r.id)
    assert job is not None and job.status is JobStatus.CANCELLED and job.not_before is None
    assert tracker.schedule(now=utcnow() + timedelta(hours=3)).as_dict()["published"] == []
    assert tracker.retry(r.id)  # runs again now: its message is published at once
    again = tracker.get_job(r.id)
    assert again is not None and again.status is JobStatus.PENDING
    assert again.not_before is None and again.published_at is not None


def test_a_duplicate_of_a_held_job_is_returned_at_once(app: Celery) -> None:
    remind = _task(app, idempotency_key="remind:{who}")
    first = remind.enqueue("a", _options={"countdown": 7200})
    assert first.created
    again = remind.enqueue("a")
    assert (again.job_id, again.created) == (first.job_id, False)
