"""Acceptance (issue 26, bad input): a due time in the past is fine and runs now; a naive
deadline, a deadline not after the due time, an unknown queue (or job type) to pause and a
priority out of the Redis transport's range (0-9) each get a typed error before anything
is written: no row, no event, no pause, no message, no guard key. Real Redis and
PostgreSQL, a real ``celery worker`` for the job that runs. (RabbitMQ's range:
``test_priority.py``.)

A naive ``eta`` is not an error: it is read as UTC, as Celery reads it
(docs/scheduling.md); a naive deadline is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from conftest import Env, Worker
from kombu import Queue

from celery_tracked import InvalidPause, InvalidPayload, InvalidPriority

TIMED = "acc.timed"


def written(env: Env) -> tuple[Any, ...]:
    """What a call could have written: the rows of the three tables, every Redis key of
    the test's DB (its broker queue and the guard's keys)."""
    counts = env.sql(
        "SELECT (SELECT count(*) FROM background_jobs), (SELECT count(*) FROM "
        "background_job_events), (SELECT count(*) FROM background_job_pauses)"
    )[0]
    return (*counts, sorted(env.redis.keys("*")))


@contextmanager
def refused(env: Env, error: type[Exception], match: str) -> Iterator[None]:
    """The call raises ``error`` (exactly that type or a subclass) and writes nothing."""
    before = written(env)
    with pytest.raises(error, match=match):
        yield
    assert written(env) == before, "the refused call wrote something"


def test_a_due_time_in_the_past_runs_now(env: Env, start_worker: Callable[..., Worker]) -> None:
    start_worker()
    now = env.tracker._services.store.clock()
    timed = env.task(TIMED)
    past = timed.apply_async(args=("past",), eta=now - timedelta(hours=1))
    zero = timed.apply_async(args=("zero",), countdown=0)
    for result in (past, zero):
        job = env.wait_status(result.id, "completed", timeout=30)
        assert job.published_at is not None  # not held: published at the enqueue
        assert job.started_at - job.created_at < timedelta(seconds=10), job
        assert env.ran(result.id) == 1


def test_a_naive_eta_is_read_as_utc(env: Env) -> None:
    timed = env.task(TIMED)
    naive = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0) + timedelta(hours=2)
    r = timed.apply_async(args=("naive",), eta=naive)
    job = env.tracker.get_job(r.id)
    assert job is not None and job.published_at is None  # held: due in two hours
    assert job.not_before == naive.replace(tzinfo=timezone.utc)


def test_bad_deadlines_are_refused_before_anything_is_written(env: Env) -> None:
    timed = env.task(TIMED)
    now = datetime.now(timezone.utc)
    naive = now.replace(tzinfo=None) + timedelta(hours=1)
    with refused(env, InvalidPayload, "aware datetime"):
        timed.apply_async(args=(1,), _deadline=naive)
    with refused(env, InvalidPayload, "aware datetime"):
        timed.with_options(deadline=naive)(x=1)
    with refused(env, InvalidPayload, "deadline"):  # 1 min after the enqueue, due in 10
        timed.apply_async(args=(1,), countdown=600, _deadline=timedelta(minutes=1))
    with refused(env, InvalidPayload, "deadline"):  # an absolute one before the eta
        timed.apply_async(
            args=(1,), eta=now + timedelta(hours=2), _deadline=now + timedelta(hours=1)
        )
    with refused(env, InvalidPayload, "deadline"):  # a relative span that is not positive
        timed.apply_async(args=(1,), _deadline=timedelta(seconds=-5))
    with refused(env, InvalidPayload, "deadline"):  # passed already: not after "due now"
        timed.apply_async(args=(1,), _deadline=now - timedelta(minutes=1))
    with refused(env, TypeError, "deadline"):
        timed.apply_async(args=(1,), _deadline="tomorrow")
    ok = timed.apply_async(args=(1,), countdown=600, _deadline=timedelta(minutes=20))
    job = env.tracker.get_job(ok.id)
    assert job is not None and job.deadline_at is not None and job.not_before < job.deadline_at


def test_an_unknown_queue_or_job_type_to_pause_is_refused(env: Env) -> None:
    with refused(env, InvalidPause, "unknown queue 'nope'"):
        env.tracker.pause(queue="nope")
    with refused(env, InvalidPause, "unknown job type"):
        env.tracker.pause(job_type="nope")
    with refused(env, InvalidPause, "exactly one scope"):
        env.tracker.pause(queue="acc", job_type="ocr")
    assert env.tracker.paused() == []
    assert env.tracker.pause(queue="acc").name == "acc"  # the app's own queue is known


def test_a_queue_the_app_declares_may_be_paused_before_any_task_routes_to_it(env: Env) -> None:
    env.app.conf.task_queues = [Queue("acc"), Queue("spare")]  # "spare": no task's queue
    assert env.tracker.pause(queue="spare").name == "spare"
    assert [p.name for p in env.tracker.paused()] == ["spare"]


@pytest.mark.parametrize("priority", [10, 99])
def test_a_priority_beyond_the_redis_range_is_refused(env: Env, priority: int) -> None:
    timed = env.task(TIMED)
    with refused(env, InvalidPriority, "0 to 9"):
        timed.apply_async(args=(1,), priority=priority)
    with refused(env, InvalidPriority, "0 to 9"):
        timed.with_options(options={"priority": priority})(x=1)


@pytest.mark.parametrize("priority", [-1, 256])
def test_a_priority_below_0_or_above_255_is_an_invalid_priority(env: Env, priority: int) -> None:
    """Known bug F4 (fixed on another branch): raised ``InvalidPayload``, not its subclass
    ``InvalidPriority``."""
    with refused(env, InvalidPriority, "priority"):
        env.task(TIMED).apply_async(args=(1,), priority=priority)
