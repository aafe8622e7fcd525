"""Acceptance: documented worker behaviours (docs/lifecycle.md), each with a real worker.

A lost last attempt, ``revoke``, ``Reject(requeue=True)``, ``self.replace()``, the
database down at claim time, and a re-publish the broker refuses.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool
from waiting import PROMPT_S, Waiter

from celery_tracked import JobFailed, JobStatus
from tests.conftest import REDIS_HOST, REDIS_PORT, wait_for


def names(history: list[Any]) -> list[str]:
    return [e.event for e in history]


def test_last_attempt_lost_fails_the_job_as_worker_lost(env: Any, start_worker: Any) -> None:
    """SIGKILL of the pool child running the only attempt: the redelivery finds the lease
    of a dead process and no attempt left, so the job is ``failed``/``WorkerLost``."""
    worker = start_worker()
    job_id = env.task("acc.kill_me").enqueue(x="lost", _max_attempts=1).job_id
    pid = int(wait_for(lambda: env.redis.get(f"pid:{job_id}"), timeout=20, what="run 1's pid"))
    assert env.status(job_id) == "processing"

    os.kill(pid, signal.SIGKILL)

    job = env.wait_status(job_id, "failed", "completed", timeout=30)
    assert job.status is JobStatus.FAILED
    assert job.error_type == "WorkerLost"
    assert job.attempts_made == 1 == job.max_attempts
    assert job.finished_at is not None
    assert env.ran(job_id) == 1  # the redelivery ran no body
    assert env.spans(job_id) == []  # and run 1 never finished
    history = env.tracker.history(job_id)
    assert names(history) == ["enqueued", "started", "failed"]
    assert history[-1].status is JobStatus.FAILED
    wait_for(lambda: worker.records_of(job_id, "failed"), timeout=10, what="the failure record")
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 1
    assert worker.proc.poll() is None


def test_revoke_of_a_queued_job_cancels_it_and_wakes_its_waiter(
    env: Any, start_worker: Any, slow_reread: float
) -> None:
    worker = start_worker()
    job_id = env.task("acc.succeed").enqueue(x="revoked", _options={"countdown": 3}).job_id
    waiter = Waiter.on(env, job_id)

    env.app.control.revoke(job_id)

    waiter.join(timeout=20)
    assert isinstance(waiter.error, JobFailed), waiter.error
    job = env.tracker.get_job(job_id)
    assert job.status is JobStatus.CANCELLED
    assert job.attempts_made == 0
    assert job.started_at is None and job.finished_at is not None
    assert waiter.latency() < PROMPT_S  # the worker's main process notified
    history = env.tracker.history(job_id)
    assert names(history) == ["enqueued", "cancelled"]
    assert "revoked" in (history[-1].message or "")
    wait_for(lambda: worker.records_of(job_id, "cancelled"), timeout=10, what="the record")
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 0


def test_reject_with_requeue_runs_the_job_again_from_the_returned_message(
    env: Any, start_worker: Any
) -> None:
    start_worker()
    job_id = env.task("acc.reject_requeue").enqueue(x="rq").job_id

    job = env.wait_status(job_id, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED, env.diagnose(job_id)
    assert job.result == {"x": "rq", "run": 2}  # the body ran again, on the returned message
    assert env.ran(job_id) == 2
    assert job.attempts_made == 2
    assert job.error_type is None
    # the released lease lets the returned message take the job over at once
    history = env.tracker.history(job_id)
    assert names(history) == ["enqueued", "started", "redelivered", "completed"]
    assert [e.attempt for e in history] == [0, 1, 2, 2]
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 2


def test_replace_completes_the_row_and_runs_the_replacement(env: Any, start_worker: Any) -> None:
    start_worker()
    job_id = env.task("acc.replacer").enqueue(x="rp").job_id

    job = env.wait_status(job_id, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED, env.diagnose(job_id)
    assert job.attempts_made == 1
    assert job.result is None  # the work was handed over
    assert names(env.tracker.history(job_id)) == ["enqueued", "started", "completed"]
    # the replacement (an untracked task, same task id as Celery does) ran once
    replaced = wait_for(
        lambda: env.redis.get(f"plain:{job_id}"), timeout=20, what="the replacement to run"
    )
    assert replaced.decode() == '{"x": "replaced rp", "run": 2}'  # run 1 was the replacer
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 2
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 1


def test_database_down_at_claim_retries_without_using_an_attempt(
    env: Any, start_worker: Any
) -> None:
    job_id = env.task("acc.succeed").enqueue(x="db-down").job_id
    database = env.database_url.rsplit("/", 1)[1]
    admin = create_engine(
        env.database_url.rsplit("/", 1)[0] + "/postgres",
        poolclass=NullPool,
        isolation_level="AUTOCOMMIT",
    )
    try:
        with admin.connect() as conn:
            # the worker is not started yet: every connection it opens is refused
            conn.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false'))
        worker = start_worker()
        wait_for(
            lambda: len(worker.records_of(job_id, "error")) >= 2,
            timeout=40,
            what="the delivery to find the database down twice",
        )
        assert env.ran(job_id) == 0
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true'))
        admin.dispose()

    job = env.wait_status(job_id, "completed", "failed", timeout=40)
    assert job.status is JobStatus.COMPLETED, env.diagnose(job_id)
    assert job.attempts_made == 1  # the refused claims used no attempt
    assert job.result == {"x": "db-down", "run": 1}
    assert names(env.tracker.history(job_id)) == ["enqueued", "started", "completed"]
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 1


def test_replace_with_a_tracked_signature_runs_the_replacement(env: Any, start_worker: Any) -> None:
    start_worker()
    job_id = env.task("acc.replacer_tracked").enqueue(x="rpt").job_id
    job = env.wait_status(job_id, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED

    def replacement_ran() -> bool:
        # under the replacer's id (run 2 of that id) or as a job of its own
        rows = env.sql("SELECT count(*) FROM background_jobs WHERE task_name = 'acc.succeed'")
        return env.ran(job_id) == 2 or rows[0][0] == 1

    wait_for(replacement_ran, timeout=5, what="the tracked replacement to run")
    # a job of its own, child of the replacer's, sent under the replacer's task id
    replacement = env.sql(
        "SELECT id, parent_job_id, celery_task_id FROM background_jobs "
        "WHERE task_name = 'acc.succeed'"
    )[0]
    assert replacement[0] != job_id
    assert (replacement[1], replacement[2]) == (job_id, job_id)
    done = env.wait_status(replacement[0], "completed", "failed", timeout=30)
    assert done.result["x"] == "replaced rpt"


@pytest.fixture
def refusing_broker(env: Any) -> Iterator[tuple[str, str]]:
    """Two Redis ACL users on the test's broker DB: a reader allowed everything, a writer
    refused ``LPUSH`` (kombu's publish). Yields (read URL, write URL)."""
    suffix = uuid.uuid4().hex[:10]
    password = uuid.uuid4().hex
    reader, writer = f"ct-read-{suffix}", f"ct-write-{suffix}"
    admin = redis.Redis(host=REDIS_HOST, port=REDIS_PORT)
    try:
        admin.acl_setuser(
            reader, enabled=True, passwords=[f"+{password}"], keys=["*"], channels=["*"]
        )
        admin.execute_command("ACL", "SETUSER", reader, "+@all")
        admin.acl_setuser(
            writer, enabled=True, passwords=[f"+{password}"], keys=["*"], channels=["*"]
        )
        admin.execute_command("ACL", "SETUSER", writer, "+@all", "-lpush")
    except redis.ResponseError as exc:  # pragma: no cover - Redis < 6
        admin.close()
        pytest.skip(f"Redis ACLs unavailable: {exc}")
    db = env.config["broker"].rsplit("/", 1)[1]
    base = f"{REDIS_HOST}:{REDIS_PORT}/{db}"
    try:
        yield f"redis://{reader}:{password}@{base}", f"redis://{writer}:{password}@{base}"
    finally:
        admin.acl_deluser(reader, writer)
        admin.close()


def test_a_refused_republish_is_requeued_not_dropped(
    env: Any, start_worker: Any, refusing_broker: tuple[str, str]
) -> None:
    """Attempt 1 fails; its retry message is refused by the broker. Celery would drop the
    delivery (``Reject(requeue=False)``), leaving the job ``retrying`` for ever; the
    tracker hands the message back instead, and attempt 2 completes the job."""
    read_url, write_url = refusing_broker
    worker = start_worker(
        environ={"TRACKED_TEST_BROKER": read_url, "TRACKED_TEST_BROKER_WRITE": write_url}
    )
    job_id = env.task("acc.flaky").enqueue(x="refused").job_id

    job = env.wait_status(job_id, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED, env.diagnose(job_id)
    assert job.attempts_made == 2
    assert job.result == {"x": "refused", "run": 2}
    assert env.ran(job_id) == 2
    assert names(env.tracker.history(job_id)) == [
        "enqueued",
        "started",
        "retrying",
        "started",
        "completed",
    ]
    # the re-publish really was refused (the writer may not LPUSH)
    assert "NOPERM" in worker.log() or "no permissions" in worker.log().lower()
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 2


def test_a_bodys_own_retry_whose_republish_is_refused_is_requeued_not_failed(
    env: Any, start_worker: Any, refusing_broker: tuple[str, str]
) -> None:
    """Issue 6, item 8: a body's ``self.retry()`` (and ``autoretry_for``) whose re-publish
    the broker refuses made Celery raise ``Reject(requeue=False)``, recorded ``failed``
    with attempts remaining. The message is handed back instead and attempt 2 completes."""
    read_url, write_url = refusing_broker
    worker = start_worker(
        environ={"TRACKED_TEST_BROKER": read_url, "TRACKED_TEST_BROKER_WRITE": write_url}
    )
    own = env.task("acc.self_retry_secret").enqueue(user="u", password="pw-own").job_id
    auto = env.task("acc.autoretry_secret").enqueue(user="u", password="pw-auto").job_id
    for job_id in (own, auto):
        job = env.wait_status(job_id, "completed", "failed", timeout=30)
        assert job.status is JobStatus.COMPLETED, env.diagnose(job_id)
        assert job.attempts_made == 2 and env.ran(job_id) == 2
        assert job.result == {"user": "u", "run": 2}
    assert "NOPERM" in worker.log() or "no permissions" in worker.log().lower()
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
