"""Acceptance: a killed pool child, a killed database connection."""

from __future__ import annotations

import os
import signal
from typing import Any

from conftest import terminate_worker_connections
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from celery_tracked import JobStatus
from tests.conftest import wait_for


def test_sigkill_of_pool_child_mid_job_is_redelivered_and_completes(
    env: Any, start_worker: Any
) -> None:
    worker = start_worker()
    job_id = env.task("acc.kill_me").enqueue(x="k").job_id
    pid = int(wait_for(lambda: env.redis.get(f"pid:{job_id}"), timeout=20, what="run 1's pid"))
    assert pid != worker.proc.pid
    assert env.status(job_id) == "processing"

    os.kill(pid, signal.SIGKILL)

    job = env.wait_status(job_id, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 2
    assert env.ran(job_id) == 2
    # run 1 never finished (killed): the one span is run 2's, in another process
    [(run_2_pid, _, _)] = env.spans(job_id)
    assert run_2_pid != pid
    history = env.tracker.history(job_id)
    assert [e.event for e in history] == ["enqueued", "started", "redelivered", "completed"]
    assert [e.event for e in history].count("redelivered") == 1
    assert history[2].attempt == 2
    assert history[-1].attempt == 2
    assert worker.proc.poll() is None  # the worker itself survived


def test_db_connection_terminated_during_body_completes_on_a_fresh_one(
    env: Any, start_worker: Any
) -> None:
    # one pool child, warmed up so its pooled connections exist before the job runs
    start_worker(concurrency=1)
    warm = env.task("acc.succeed").enqueue(x="warm").job_id
    env.wait_status(warm, "completed", timeout=30)

    job_id = env.task("acc.hold").enqueue(x="db").job_id
    wait_for(lambda: env.redis.exists(f"holding:{job_id}"), timeout=20, what="run 1 to start")
    assert env.status(job_id) == "processing"

    # only the worker's connections (its application_name), never this process's
    terminated = terminate_worker_connections(env.database_url)
    assert terminated, "no database connection of the worker was found"
    assert all(ok for _, ok in terminated), terminated
    env.redis.set(f"go:{job_id}", 1)

    job = env.wait_status(job_id, "completed", "failed", timeout=40)
    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 1, "a connection lost during the body costs no attempt"
    assert env.ran(job_id) == 1
    history = env.tracker.history(job_id)
    assert [e.event for e in history] == ["enqueued", "started", "completed"]


def test_unrecoverable_whose_failure_write_fails_never_runs_again(
    env: Any, start_worker: Any
) -> None:
    """The failure is decided but the database refuses every connection when it is written:
    the decision travels in the re-published message and is recorded later; no body reruns."""
    worker = start_worker(concurrency=1)
    job_id = env.task("acc.hold_then_unrecoverable").enqueue(x="d").job_id
    wait_for(lambda: env.redis.exists(f"holding:{job_id}"), timeout=20, what="the body to start")

    database = env.database_url.rsplit("/", 1)[1]
    admin = create_engine(
        env.database_url.rsplit("/", 1)[0] + "/postgres",
        poolclass=NullPool,
        isolation_level="AUTOCOMMIT",
    )
    try:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false'))
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :db AND pid <> pg_backend_pid()"
                ),
                {"db": database},
            )
        env.redis.set(f"go:{job_id}", 1)
        wait_for(
            lambda: "could not record failed" in worker.log(),
            timeout=30,
            what="the failure write to fail",
        )
        wait_for(
            lambda: "failure still not recorded" in worker.log(),
            timeout=30,
            what="the re-published delivery to find the database still closed",
        )
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true'))
        admin.dispose()

    job = env.wait_status(job_id, "failed", "completed", timeout=30)
    assert job.status is JobStatus.FAILED
    assert job.error_type == "Unrecoverable"
    assert job.attempts_made == 1
    assert env.ran(job_id) == 1, "the body must not run again"
