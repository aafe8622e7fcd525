"""Acceptance (issue 26, item 4): a job past its deadline never starts when its message
comes from the reaper's rescue, with real workers, the reaper's own pass (the documented
maintenance call, at compressed thresholds), a real Redis broker and PostgreSQL.

- A run whose whole worker is SIGKILLed (its attempt started in time): once its deadline
  has passed, the reaper rescues it and the rescue's delivery does not start it again; the
  job ends ``cancelled``, ``DeadlineExceeded``.
- A ``pending`` job whose message was lost: the reaper rescues it after its deadline; the
  rescue's delivery never starts it.

(The first message, a retry, the relay and a broker redelivery: ``test_scheduling.py``.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from conftest import Env, Worker
from test_reaper import kill_whole_worker, reap_until, reaper_of
from tracked_app import QUEUE

from celery_tracked import Tracker
from celery_tracked.core.deadlines import DEADLINE_EXCEEDED
from tests.conftest import wait_for


@pytest.fixture
def reaper(env: Env) -> Iterator[Tracker]:
    """A reaper of its own, as a Beat-run one would be (test_reaper.py's short thresholds)."""
    tracker = reaper_of(env.config)
    yield tracker
    tracker.close()
    tracker.app.close()


def past_deadline(env: Env, job_id: str) -> bool:
    rows = env.sql("SELECT deadline_at < now() FROM background_jobs WHERE id = :id", id=job_id)
    return bool(rows[0][0])


def assert_expired(env: Env, job_id: str) -> None:
    job = env.wait_status(job_id, "cancelled", timeout=30)
    assert job.error_type == DEADLINE_EXCEEDED, job
    assert "deadline" in job.error_message and job.finished_at is not None


def test_a_killed_run_rescued_after_its_deadline_never_starts_again(
    env: Env, start_worker: Callable[..., Worker], reaper: Tracker
) -> None:
    first = start_worker("w1", concurrency=1)
    job_id = env.task("acc.kill_me").enqueue(x="late", _deadline=timedelta(seconds=3)).job_id
    wait_for(lambda: env.redis.get(f"pid:{job_id}"), what="its first run to start")
    kill_whole_worker(first)  # its attempt started in time; its lease now lapses
    wait_for(lambda: past_deadline(env, job_id), timeout=10, interval=0.1, what="the deadline")
    start_worker("w2", concurrency=1)
    report = reap_until(reaper, lambda r: job_id in r.rescued, timeout=40)
    assert report.abandoned == []
    assert_expired(env, job_id)
    assert env.ran(job_id) == 1  # the run that started in time only
    events = [e.event for e in env.tracker.history(job_id)]
    assert events.count("started") == 1 and "rescued" in events, events
    assert events[-1] == "cancelled", events


def test_a_lost_message_rescued_after_its_deadline_never_starts(
    env: Env, start_worker: Callable[..., Worker], reaper: Tracker
) -> None:
    job_id = env.task("acc.timed").enqueue(x="lost", _deadline=timedelta(seconds=2)).job_id
    assert env.redis.delete(QUEUE) == 1  # its message lost (this test's own Redis DB)
    job = env.tracker.get_job(job_id)
    assert job is not None and job.published_at is not None  # handed over: not the relay's
    start_worker("w1", concurrency=1)  # answers the reaper: it does not hold the job
    wait_for(lambda: past_deadline(env, job_id), timeout=10, interval=0.1, what="the deadline")
    report = reap_until(reaper, lambda r: job_id in r.rescued, timeout=30)
    assert report.abandoned == []
    assert_expired(env, job_id)
    assert env.ran(job_id) == 0
    assert env.tracker.get_job(job_id).attempts_made == 0
    events = [e.event for e in env.tracker.history(job_id)]
    assert "rescued" in events and "started" not in events, events
