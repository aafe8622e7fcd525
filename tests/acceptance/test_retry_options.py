"""Acceptance: Celery's retry options mean what they meant (issue 7, item 3), measured on a
real worker from the job's events: ``autoretry_for`` + ``backoff_ms`` waits the backoff (not
Celery's 180 s ``default_retry_delay``) and fails other exceptions at once; ``max_retries=3``
makes 4 attempts, ``retry_backoff``/``retry_backoff_max`` set the delays."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from celery_tracked import JobStatus


def started(env: Any, job_id: str) -> list[Any]:
    return [e for e in env.tracker.history(job_id) if e.event == "started"]


def gaps(events: list[Any]) -> list[float]:
    return [(b.created_at - a.created_at).total_seconds() for a, b in pairwise(events)]


def test_celery_retry_options_give_the_documented_delays_and_attempts(
    env: Any, start_worker: Any
) -> None:
    start_worker()
    autoretry = env.task("acc.autoretry")
    retried = autoretry.delay("connection").id
    not_listed = autoretry.delay("other").id
    limited = env.task("acc.max_retries").delay("m").id

    # autoretry_for + backoff_ms=300: the second attempt after ~0.3 s, not 180 s
    job = env.wait_status(retried, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED, env.diagnose(retried)
    assert job.attempts_made == 2 and job.result == 2
    [gap] = gaps(started(env, retried))
    assert 0.25 <= gap < 3.0, gap

    # an exception not in autoretry_for fails at once: one attempt
    job = env.wait_status(not_listed, "failed", "completed", timeout=30)
    assert job.status is JobStatus.FAILED, env.diagnose(not_listed)
    assert job.attempts_made == 1 and env.ran(not_listed) == 1

    # max_retries=3 → 4 attempts; retry_backoff=True capped by retry_backoff_max=1: 1 s each
    job = env.wait_status(limited, "failed", "completed", timeout=60)
    assert job.status is JobStatus.FAILED, env.diagnose(limited)
    assert job.max_attempts == 4 and job.attempts_made == 4
    assert env.ran(limited) == 4
    for gap in gaps(started(env, limited)):
        assert 0.9 <= gap < 3.0, gap
