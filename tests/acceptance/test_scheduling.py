"""Acceptance (issue 26, items 1 and 4): jobs held in the database until due, published once
by the scheduler pass and started on time by a real ``celery worker``; a countdown longer
than the Redis transport's ``visibility_timeout`` runs once, on time; a job past its
deadline never starts, from every delivery path, and ends ``cancelled``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool
from tracked_app import QUEUE, create_app

from celery_tracked import Tracker
from celery_tracked.core.deadlines import DEADLINE_EXCEEDED
from tests.conftest import wait_for

TIMED = "acc.timed"


def db_now(env: Any) -> datetime:
    return env.tracker._services.store.clock()


def started_at(env: Any, job_id: str) -> float:
    """When the body's (only) run started, on this host's clock (the epoch)."""
    spans = env.spans(job_id)
    assert len(spans) == 1, f"job {job_id} ran {len(spans)} times"
    return spans[0][1]


def write(env: Any, statement: str, **params: Any) -> None:
    """Change the test's database by hand (committed)."""
    engine = create_engine(env.database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            assert conn.execute(text(statement), params).rowcount == 1
    finally:
        engine.dispose()


def set_due(env: Any, job_id: str, seconds: float) -> datetime:
    """The held job as if the time had passed: due ``seconds`` from now (the database's
    clock), written two hours ago."""
    write(
        env,
        "UPDATE background_jobs SET not_before = now() + make_interval(secs => :s), "
        "created_at = now() - interval '2 hours', updated_at = now() - interval '2 hours' "
        "WHERE id = :id",
        s=seconds,
        id=job_id,
    )
    job = env.tracker.get_job(job_id)
    assert job is not None and job.not_before is not None
    return job.not_before


def no_message_anywhere(env: Any) -> bool:
    return env.broker_messages() == [] and env.unacked() == []


def has_message(env: Any, job_id: str) -> bool:
    """The job's message is in the broker: queued, or held unacknowledged by a worker."""
    return job_id in {m["headers"]["id"] for m in env.broker_messages() + env.unacked()}


def test_a_held_job_has_no_message_until_the_pass_publishes_it_once_then_starts_on_time(
    env: Any, start_worker: Any
) -> None:
    start_worker()
    r = env.task(TIMED).apply_async(args=("held",), countdown=7200)
    job = env.tracker.get_job(r.id)
    assert job is not None and job.published_at is None
    assert 7100 < (job.not_before - db_now(env)).total_seconds() <= 7200
    assert no_message_anywhere(env), "a held job has no message in the broker"
    assert env.tracker.schedule().as_dict()["published"] == []  # not within the horizon
    due = set_due(env, r.id, 3.0)  # as if two hours had passed
    reports: list[dict[str, Any]] = []
    passes = [
        threading.Thread(target=lambda: reports.append(env.tracker.schedule().as_dict()))
        for _ in range(2)
    ]
    for one in passes:
        one.start()
    for one in passes:
        one.join(timeout=30)
    assert sorted(len(report["published"]) for report in reports) == [0, 1], reports
    env.wait_status(r.id, "completed", timeout=30)
    began = started_at(env, r.id)
    print(f"started {began - due.timestamp():+.3f} s after its due time")
    assert due.timestamp() - 0.05 <= began <= due.timestamp() + 2.0, (began, due)
    assert env.ran(r.id) == 1
    events = [e.event for e in env.tracker.history(r.id)]
    assert events.count("scheduled") == 1 and "relayed" not in events


@pytest.fixture
def short_visibility(env: Any) -> Iterator[tuple[Any, Tracker]]:
    """An app whose Redis transport redelivers an unacknowledged message after 4 s, whose
    jobs due further than 2 s ahead are held (the horizon kept below the timeout)."""
    app = create_app({**env.config, "visibility_timeout": 4})
    app.conf.update(tracked_schedule_horizon_seconds=2, tracked_schedule_interval_seconds=1)
    tracker = Tracker.for_app(app)
    try:
        yield app, tracker
    finally:
        tracker.close()
        app.close()


def test_a_countdown_longer_than_the_visibility_timeout_runs_once_on_time(
    env: Any, start_worker: Any, short_visibility: tuple[Any, Tracker]
) -> None:
    app, tracker = short_visibility
    start_worker(environ={"TRACKED_TEST_VISIBILITY_TIMEOUT": "4"})  # swept every second
    # the control: plain Celery's countdown waits in the worker, unacknowledged, and is
    # given back to the queue after 4 s, again and again: it runs more than once
    control = app.tasks["acc.plain"].apply_async(args=("control",), countdown=10)
    r = app.tasks[TIMED].apply_async(args=("vt",), countdown=10)
    job = tracker.get_job(r.id)
    assert job is not None and job.published_at is None and not has_message(env, r.id)
    due = job.not_before
    assert due is not None

    def published() -> bool:  # the Beat entry's work, every second
        tracker.schedule()
        found = tracker.get_job(r.id)
        return found is not None and found.published_at is not None

    wait_for(published, timeout=20, interval=0.5, what="the pass to publish it")
    env.wait_status(r.id, "completed", timeout=20)
    began = started_at(env, r.id)
    print(f"started {began - due.timestamp():+.3f} s after its due time")
    assert due.timestamp() - 0.05 <= began <= due.timestamp() + 2.0, (began, due)
    time.sleep(5)  # past another visibility_timeout: no second delivery runs it again
    assert env.ran(r.id) == 1 and not has_message(env, r.id)
    wait_for(lambda: env.ran(control.id) >= 2, timeout=20, what="the control to run twice")
    print(f"the control (plain Celery, the same countdown) ran {env.ran(control.id)} times")


def wait_past_deadline(env: Any, job_id: str) -> None:
    def past() -> bool:
        rows = env.sql("SELECT deadline_at < now() FROM background_jobs WHERE id = :id", id=job_id)
        return bool(rows[0][0])

    wait_for(past, timeout=10, interval=0.1, what="its deadline to pass")


def assert_expired(env: Any, job_id: str) -> None:
    job = env.wait_status(job_id, "cancelled", timeout=30)
    assert job.error_type == DEADLINE_EXCEEDED, job
    assert "deadline" in job.error_message and job.finished_at is not None


def test_a_first_message_past_its_deadline_never_starts(env: Any, start_worker: Any) -> None:
    r = env.task(TIMED).apply_async(args=("late",), _deadline=timedelta(seconds=1))
    wait_past_deadline(env, r.id)
    start_worker()
    assert_expired(env, r.id)
    assert env.ran(r.id) == 0 and env.tracker.get_job(r.id).attempts_made == 0


def test_a_retry_past_its_deadline_never_starts_and_a_body_reads_its_deadline(
    env: Any, start_worker: Any
) -> None:
    start_worker()
    task = env.task(TIMED)
    r = task.apply_async(args=("retry",), kwargs={"fail_first_after": 2.5}, _deadline=2.0)
    assert_expired(env, r.id)  # its first run started in time; its retry did not
    assert env.ran(r.id) == 1
    job = env.tracker.get_job(r.id)
    read = env.redis.get(f"deadline:{r.id}").decode()
    assert datetime.fromisoformat(read) == job.deadline_at
    events = [e.event for e in env.tracker.history(r.id)]
    assert events[-1] == "cancelled" and events.count("started") == 1


def test_a_relayed_or_rescued_message_past_its_deadline_never_starts(
    env: Any, start_worker: Any
) -> None:
    relayed = env.task(TIMED).apply_async(args=("relayed",), _deadline=timedelta(seconds=1))
    rescued = env.task(TIMED).apply_async(args=("rescued",), _deadline=timedelta(seconds=1))
    env.redis.delete(QUEUE)  # both messages lost (this test's own Redis DB)
    # the first as if its producer died before its publish
    write(
        env,
        "UPDATE background_jobs SET published_at = NULL, updated_at = now() - interval '5 min' "
        "WHERE id = :id",
        id=relayed.id,
    )
    wait_past_deadline(env, relayed.id)
    wait_past_deadline(env, rescued.id)
    report = env.tracker.relay().as_dict()
    assert report["cancelled"] == [relayed.id] and report["published"] == []
    assert_expired(env, relayed.id)
    start_worker()
    env.redeliver(TIMED, rescued.id, x="rescued")  # a rescue's (or the broker's) delivery
    assert_expired(env, rescued.id)
    assert env.ran(relayed.id) == 0 and env.ran(rescued.id) == 0


def test_a_held_job_past_its_deadline_is_cancelled_by_the_pass(env: Any) -> None:
    r = env.task(TIMED).apply_async(args=("held",), countdown=3600, _deadline=7200)
    write(
        env,
        "UPDATE background_jobs SET not_before = now() + interval '10 s', "
        "deadline_at = now() - interval '1 s' WHERE id = :id",
        id=r.id,
    )
    report = env.tracker.schedule().as_dict()
    assert report["cancelled"] == [r.id] and report["published"] == []
    assert_expired(env, r.id)
    assert no_message_anywhere(env)


def test_the_cli_knows_held_jobs(env: Any, cli_in_process: Any) -> None:
    held = env.task(TIMED).apply_async(args=("cli",), countdown=7200, _deadline=3 * 3600)
    env.task(TIMED).apply_async(args=("now",))
    listed = cli_in_process("jobs", "--due-before", "3h", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [job["id"] for job in json.loads(listed.stdout)["jobs"]] == [held.id]
    shown = cli_in_process("show", held.id, "--no-history")
    assert "held: published by the scheduler pass" in shown.stdout, shown.stdout
    assert "deadline" in shown.stdout
    as_json = json.loads(cli_in_process("show", held.id, "--json").stdout)
    assert as_json["due_at"] and as_json["deadline_at"]
    stats = cli_in_process("stats")
    assert "SCHEDULED" in stats.stdout
    assert json.loads(cli_in_process("stats", "--json").stdout)[QUEUE]["scheduled"] == 1
    passed = cli_in_process("schedule", "--json")
    assert passed.returncode == 0 and json.loads(passed.stdout)["published"] == []
