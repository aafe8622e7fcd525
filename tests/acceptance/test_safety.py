"""Acceptance: no row stays ``processing`` with no message left (issue 6, item 3).

A run Celery kills outside the task's call path (the hard ``time_limit``,
``revoke(terminate=True)``) is ended from the worker's main process; an exception whose
``__str__`` raises is summarised by its type.
"""

from __future__ import annotations

from typing import Any

from celery_tracked import JobStatus
from tests.conftest import wait_for


def events_of(env: Any, job_id: str) -> list[str]:
    return [e.event for e in env.tracker.history(job_id)]


def test_a_hard_time_limit_retries_the_job_and_the_next_attempt_completes(
    env: Any, start_worker: Any
) -> None:
    start_worker()
    job_id = env.task("acc.time_limited").enqueue(x="tl", hang_runs=1).job_id
    job = env.wait_status(job_id, "completed", "failed", timeout=40)
    assert job.status is JobStatus.COMPLETED, env.diagnose(job_id)
    assert job.attempts_made == 2
    assert job.result == {"x": "tl", "run": 2}
    assert env.ran(job_id) == 2
    history = env.tracker.history(job_id)
    assert [e.event for e in history] == [
        "enqueued",
        "started",
        "retrying",
        "started",
        "completed",
    ]
    assert "TimeLimitExceeded" in (history[2].message or "")
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")


def test_a_hard_time_limit_on_the_last_attempt_fails_with_its_own_error_type(
    env: Any, start_worker: Any
) -> None:
    start_worker()
    job_id = env.task("acc.time_limited").enqueue(x="tl", hang_runs=99).job_id
    job = env.wait_status(job_id, "completed", "failed", timeout=40)
    assert job.status is JobStatus.FAILED, env.diagnose(job_id)
    assert job.error_type == "TimeLimitExceeded"
    assert "hard time limit (2 s) exceeded" in (job.error_message or "")
    assert job.attempts_made == 2 and env.ran(job_id) == 2
    assert events_of(env, job_id)[-1] == "failed"
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")


def test_revoke_with_terminate_cancels_the_running_job(env: Any, start_worker: Any) -> None:
    start_worker()
    job_id = env.task("acc.long").enqueue(x="rt").job_id
    wait_for(lambda: env.redis.exists(f"holding:{job_id}"), timeout=20, what="the body to run")
    assert env.status(job_id) == "processing"
    env.app.control.revoke(job_id, terminate=True)
    job = env.wait_status(job_id, "cancelled", "completed", "failed", timeout=20)
    assert job.status is JobStatus.CANCELLED, env.diagnose(job_id)
    assert job.locked_by is None and job.finished_at is not None
    assert events_of(env, job_id)[-1] == "cancelled"
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 1


def test_an_exception_whose_str_raises_is_summarised_by_its_type(
    env: Any, start_worker: Any
) -> None:
    worker = start_worker()
    job_id = env.task("acc.unprintable").enqueue(x="u").job_id
    job = env.wait_status(job_id, "completed", "failed", timeout=30)
    assert job.status is JobStatus.FAILED, env.diagnose(job_id)
    assert job.error_type == "Unprintable"
    assert job.error_message == "<unprintable Unprintable>"
    assert job.attempts_made == 2 and env.ran(job_id) == 2
    assert events_of(env, job_id) == ["enqueued", "started", "retrying", "started", "failed"]
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert "Unprintable" in worker.log()
