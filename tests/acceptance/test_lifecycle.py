"""Acceptance: the job lifecycle with real ``celery worker`` processes.

FEAT-33-01, -02, -06, -07, -15 and the Unrecoverable sentinel; each runs with PostgreSQL
reached directly and through PgBouncer in transaction pooling mode (``.ci/pgbouncer``).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from tracked_app import QUEUE

from celery_tracked import JobStatus
from tests.conftest import wait_for

pytestmark = pytest.mark.parametrize("database_route", ["direct", "pgbouncer"])


def names(history: list[Any]) -> list[str]:
    return [e.event for e in history]


def test_feat_33_01_enqueue_returns_pending_job_and_publishes_one_message(env: Any) -> None:
    """No worker: the row is pending and the broker holds one message whose id is the job id."""
    result = env.task("acc.succeed").enqueue(x=1)

    assert result.created is True
    assert result.status is JobStatus.PENDING
    job = env.tracker.get_job(result.job_id)
    assert job is not None
    assert job.status is JobStatus.PENDING
    assert job.id == result.job_id
    assert job.celery_task_id == result.job_id
    assert job.queue_name == QUEUE
    assert job.attempts_made == 0
    assert job.started_at is None and job.finished_at is None
    assert names(env.tracker.history(result.job_id)) == ["enqueued"]

    messages = env.broker_messages()
    assert len(messages) == 1
    headers = messages[0]["headers"]
    assert headers["id"] == result.job_id
    assert headers["task"] == "acc.succeed"
    assert headers["tracked_job_id"] == result.job_id
    rows = env.sql("SELECT id, status FROM background_jobs")
    assert [tuple(r) for r in rows] == [(result.job_id, "pending")]


def test_feat_33_02_worker_moves_job_through_processing_to_completed(
    env: Any, start_worker: Any
) -> None:
    worker = start_worker()
    result = env.task("acc.succeed").enqueue(x="a", sleep=1.0)
    job_id = result.job_id

    env.wait_status(job_id, "processing", timeout=20)
    job = env.wait_status(job_id, "completed", timeout=20)

    assert job.attempts_made == 1
    assert job.result == {"x": "a", "run": 1}
    assert job.worker is not None and job.worker.startswith("w1@")
    assert job.created_at <= job.started_at <= job.finished_at
    assert (job.finished_at - job.started_at).total_seconds() >= 1.0

    history = env.tracker.history(job_id)
    assert names(history) == ["enqueued", "started", "completed"]
    assert [e.status.value for e in history] == ["pending", "processing", "completed"]
    assert [e.attempt for e in history] == [0, 1, 1]
    assert history[0].created_at <= history[1].created_at <= history[2].created_at
    completed = history[-1]
    assert completed.duration_ms is not None and completed.duration_ms >= 1000
    assert env.ran(job_id) == 1

    # the duration is in the worker's log output
    logged = wait_for(
        lambda: re.search(rf"job {job_id} completed in (\d+) ms", worker.log()),
        timeout=10,
        what="the completion log line",
    )
    assert int(logged.group(1)) >= 1000


def test_feat_33_06_fails_once_then_succeeds_after_backoff(env: Any, start_worker: Any) -> None:
    start_worker()
    backoff_ms = 300  # acc.flaky's backoff_ms
    job_id = env.task("acc.flaky").enqueue(x=6).job_id

    job = env.wait_status(job_id, "completed", "failed", timeout=30)

    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 2
    assert job.error_type is None and job.error_message is None
    assert env.ran(job_id) == 2
    history = env.tracker.history(job_id)
    assert names(history) == ["enqueued", "started", "retrying", "started", "completed"]
    assert [e.status.value for e in history] == [
        "pending",
        "processing",
        "retrying",
        "processing",
        "completed",
    ]
    assert [e.attempt for e in history] == [0, 1, 1, 2, 2]
    retrying, restarted = history[2], history[3]
    match = re.match(r"retry in (\d+) ms", retrying.message or "")
    assert match, retrying.message
    delay = int(match.group(1))
    # documented: base x 2^(attempt-1) plus up to 25 % jitter
    assert backoff_ms <= delay <= backoff_ms * 1.25
    assert "ConnectionError" in retrying.message
    gap_ms = (restarted.created_at - retrying.created_at).total_seconds() * 1000
    assert gap_ms >= backoff_ms, f"attempt 2 started {gap_ms:.0f} ms after the retry"


def test_feat_33_07_always_failing_job_fails_after_max_attempts(
    env: Any, start_worker: Any
) -> None:
    start_worker()
    job_id = env.task("acc.always_fail").enqueue(x="doc-7").job_id

    job = env.wait_status(job_id, "failed", "completed", timeout=30)

    assert job.status is JobStatus.FAILED
    assert job.attempts_made == 3 == job.max_attempts
    assert job.finished_at is not None
    assert job.error_type == "ValueError"
    assert job.error_message is not None
    assert job.error_message.startswith("run 3 of doc-7 failed: xxx")
    assert len(job.error_message) <= 500
    assert "Traceback" not in job.error_message
    assert "\n" not in job.error_message
    assert "second line" not in job.error_message
    assert env.ran(job_id) == 3
    history = env.tracker.history(job_id)
    assert names(history) == [
        "enqueued",
        "started",
        "retrying",
        "started",
        "retrying",
        "started",
        "failed",
    ]
    assert history[-1].attempt == 3
    # no message left behind for another attempt
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 3


def test_unrecoverable_fails_after_one_attempt(env: Any, start_worker: Any) -> None:
    start_worker()
    job_id = env.task("acc.unrecoverable").enqueue(x="doc-u").job_id

    job = env.wait_status(job_id, "failed", "completed", timeout=30)

    assert job.status is JobStatus.FAILED
    assert job.max_attempts == 5
    assert job.attempts_made == 1
    assert job.error_type == "Unrecoverable"
    assert job.error_message == "document doc-u is corrupt"
    history = env.tracker.history(job_id)
    assert names(history) == ["enqueued", "started", "failed"]
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 1
    assert env.tracker.get_job(job_id).attempts_made == 1


def test_feat_33_15_log_records_carry_job_context(env: Any, start_worker: Any) -> None:
    worker = start_worker()
    ok_id = env.task("acc.succeed").enqueue(x="log-ok").job_id
    bad_id = env.task("acc.always_fail").enqueue(x="log-bad").job_id
    env.wait_status(ok_id, "completed", timeout=30)
    env.wait_status(bad_id, "failed", timeout=30)

    records_of = worker.records_of

    wait_for(lambda: records_of(bad_id, "failed"), timeout=10, what="the failure record")
    fields = {"queue", "job_type", "job_id", "status", "attempt", "duration_ms"}
    for record in worker.records():
        extra = record["extra"]
        if extra.get("job_id") in (ok_id, bad_id):
            assert fields <= set(extra), record

    [processing] = records_of(ok_id, "processing")
    assert processing["queue"] == QUEUE
    assert processing["job_type"] == "acc.succeed"
    assert processing["attempt"] == 1
    [completed] = records_of(ok_id, "completed")
    assert completed["queue"] == QUEUE
    assert completed["job_type"] == "acc.succeed"
    assert completed["attempt"] == 1
    assert isinstance(completed["duration_ms"], int) and completed["duration_ms"] >= 0

    retrying = records_of(bad_id, "retrying")
    assert [r["attempt"] for r in retrying] == [1, 2]
    [failed] = records_of(bad_id, "failed")
    assert failed["queue"] == QUEUE
    assert failed["job_type"] == "acc.always_fail"
    assert failed["attempt"] == 3
    assert isinstance(failed["duration_ms"], int) and failed["duration_ms"] >= 0
    for record in retrying:
        assert isinstance(record["duration_ms"], int)
