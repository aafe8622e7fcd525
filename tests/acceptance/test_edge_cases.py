"""Acceptance: edge cases of the worker path with real ``celery worker`` processes.

Expired messages, ``Tracker.cancel``, ``Ignore``/``Reject`` raised by a body, Celery's own
``max_retries`` against postponements, and secrets carried by Celery's retry machinery
(``autoretry_for``, ``self.retry(exc=...)``) or by a chained exception.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from celery_tracked import JobStatus
from tests.conftest import wait_for


def names(history: list[Any]) -> list[str]:
    return [e.event for e in history]


def test_message_consumed_after_it_expired_cancels_the_job_without_running_it(
    env: Any, start_worker: Any
) -> None:
    sent_at = time.time()
    via_enqueue = env.task("acc.succeed").enqueue(x="exp-1", _options={"expires": 1}).job_id
    via_apply = env.task("acc.succeed").apply_async(kwargs={"x": "exp-2"}, expires=1).id
    messages = env.broker_messages()
    assert sorted(m["headers"]["id"] for m in messages) == sorted([via_enqueue, via_apply])
    for message in messages:
        assert message["headers"]["expires"] is not None
    assert env.status(via_enqueue) == env.status(via_apply) == "pending"

    # let both messages expire before any worker consumes them
    wait_for(lambda: time.time() > sent_at + 1.5, timeout=5, what="the messages to expire")
    worker = start_worker()

    for job_id in (via_enqueue, via_apply):
        job = env.wait_status(job_id, "cancelled", "completed", "failed", timeout=20)
        assert job.status is JobStatus.CANCELLED, env.diagnose(job_id)
        assert job.attempts_made == 0
        assert job.started_at is None
        assert job.finished_at is not None
        history = env.tracker.history(job_id)
        assert names(history) == ["enqueued", "cancelled"]
        assert history[-1].status is JobStatus.CANCELLED
        assert "expired" in (history[-1].message or "")
        wait_for(
            lambda job_id=job_id: worker.records_of(job_id, "cancelled"),
            timeout=10,
            what="the cancellation log record",
        )
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(via_enqueue) == 0
    assert env.ran(via_apply) == 0
    assert env.spans(via_enqueue) == [] and env.spans(via_apply) == []


def test_cancel_pending_job_then_its_delivery_runs_nothing(env: Any, start_worker: Any) -> None:
    job_id = env.task("acc.succeed").enqueue(x="cancel-me").job_id
    assert env.status(job_id) == "pending"

    assert env.tracker.cancel(job_id) is True
    job = env.tracker.get_job(job_id)
    assert job.status is JobStatus.CANCELLED
    assert job.finished_at is not None
    assert names(env.tracker.history(job_id)) == ["enqueued", "cancelled"]
    assert env.tracker.cancel(job_id) is False  # already cancelled
    assert len(env.broker_messages()) == 1  # the message is still queued

    worker = start_worker()
    wait_for(
        lambda: worker.records_of(job_id, "skipped"),
        timeout=20,
        what="the delivery of the cancelled job to be skipped",
    )
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 0
    after = env.tracker.get_job(job_id)
    assert after == job
    assert names(env.tracker.history(job_id)) == ["enqueued", "cancelled"]
    assert worker.records_of(job_id, "processing") == []


def test_cancel_of_running_or_completed_job_returns_false(env: Any, start_worker: Any) -> None:
    start_worker()
    held = env.task("acc.hold").enqueue(x="running").job_id
    wait_for(lambda: env.redis.exists(f"holding:{held}"), timeout=20, what="run 1 to start")
    assert env.tracker.cancel(held) is False
    assert env.status(held) == "processing"
    env.redis.set(f"go:{held}", 1)
    job = env.wait_status(held, "completed", "failed", "cancelled", timeout=20)
    assert job.status is JobStatus.COMPLETED

    done = env.task("acc.succeed").enqueue(x="done").job_id
    before = env.wait_status(done, "completed", timeout=20)
    assert env.tracker.cancel(done) is False
    assert env.tracker.get_job(done) == before
    assert names(env.tracker.history(done)) == ["enqueued", "started", "completed"]
    assert env.tracker.cancel(str(uuid.uuid4())) is False  # no such job


def test_body_raising_ignore_completes_the_job(env: Any, start_worker: Any) -> None:
    worker = start_worker()
    job_id = env.task("acc.ignore").enqueue(x="ign").job_id

    job = env.wait_status(job_id, "completed", "failed", timeout=20)
    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 1
    assert job.result is None
    assert job.finished_at is not None
    assert names(env.tracker.history(job_id)) == ["enqueued", "started", "completed"]
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 1
    [completed] = wait_for(
        lambda: worker.records_of(job_id, "completed"), timeout=10, what="the completion record"
    )
    assert completed["attempt"] == 1


def test_body_raising_reject_without_requeue_fails_the_job(env: Any, start_worker: Any) -> None:
    worker = start_worker()
    job_id = env.task("acc.reject").enqueue(x="rej").job_id

    job = env.wait_status(job_id, "failed", "completed", timeout=20)
    assert job.status is JobStatus.FAILED
    assert job.error_type == "Reject"
    assert job.attempts_made == 1  # max_attempts=3, but a rejected message is never retried
    assert job.max_attempts == 3
    assert job.finished_at is not None
    assert names(env.tracker.history(job_id)) == ["enqueued", "started", "failed"]
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert env.ran(job_id) == 1
    wait_for(lambda: worker.records_of(job_id, "failed"), timeout=10, what="the failure record")
    assert env.tracker.get_job(job_id).status is JobStatus.FAILED


def test_celery_max_retries_does_not_limit_postponements(env: Any, start_worker: Any) -> None:
    """``max_retries=1`` is Celery's counter; a duplicate postponed again and again (a
    Celery retry each time) must neither raise MaxRetriesExceededError nor be dropped."""
    task = env.task("acc.hold_max_retries")
    assert task.max_retries == 1
    worker = start_worker()
    job_id = task.enqueue(x="mr").job_id
    wait_for(lambda: env.redis.exists(f"holding:{job_id}"), timeout=20, what="run 1 to start")

    env.redeliver("acc.hold_max_retries", job_id, x="mr")
    wait_for(
        lambda: len(worker.records_of(job_id, "busy")) >= 3,
        timeout=30,
        what="the duplicate to be postponed 3 times",
    )
    assert env.ran(job_id) == 1
    assert env.status(job_id) == "processing"

    env.redis.set(f"go:{job_id}", 1)
    job = env.wait_status(job_id, "completed", "failed", timeout=20)
    wait_for(
        lambda: worker.records_of(job_id, "skipped"),
        timeout=20,
        what="the postponed duplicate to be skipped",
    )
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 1
    assert env.ran(job_id) == 1
    assert len(env.spans(job_id)) == 1
    assert names(env.tracker.history(job_id)) == ["enqueued", "started", "completed"]
    log = worker.log()
    assert "MaxRetriesExceeded" not in log
    assert "Can't retry" not in log


def test_secret_in_celery_retry_exception_never_reaches_worker_output(
    env: Any, start_worker: Any
) -> None:
    """``autoretry_for`` and ``self.retry(exc=...)`` build Celery's ``Retry`` from an
    exception holding the password: the worker logs it ("Task ... retry: ...")."""
    canary = f"canary-{uuid.uuid4().hex}"
    worker = start_worker()
    auto = env.task("acc.autoretry_secret").enqueue(user="alice", password=canary).job_id
    manual = env.task("acc.self_retry_secret").enqueue(user="bob", password=canary).job_id

    for job_id, user in ((auto, "alice"), (manual, "bob")):
        job = env.wait_status(job_id, "completed", "failed", timeout=30)
        assert job.status is JobStatus.COMPLETED, env.diagnose(job_id)
        assert job.attempts_made == 2
        assert job.result == {"user": user, "run": 2}
        assert env.ran(job_id) == 2
        history = env.tracker.history(job_id)
        assert names(history) == ["enqueued", "started", "retrying", "started", "completed"]
        retrying = history[2]
        assert f"login failed for {user}" in (retrying.message or "")
        assert "ValueError" in (retrying.message or "")
        for event in history:
            assert canary not in (event.message or ""), event
        assert canary not in (job.payload_json or "")
        # Celery's own retry line was written before we look at the output
        wait_for(
            lambda job_id=job_id: f"[{job_id}] retry" in worker.log(),
            timeout=10,
            what="Celery's retry log line",
        )
        wait_for(
            lambda job_id=job_id: worker.records_of(job_id, "completed"),
            timeout=10,
            what="the completion record",
        )
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")

    log = worker.log()
    assert "login failed for alice" in log  # the retry was logged...
    leaked = [line for line in log.splitlines() if canary in line]
    assert leaked == [], "the password is in the worker's output:\n" + "\n".join(leaked)
    assert canary not in worker.jsonl_path.read_text()


def test_secret_in_chained_exception_never_reaches_worker_output(
    env: Any, start_worker: Any
) -> None:
    """``RuntimeError("outer") from ValueError(f"inner {password}")``, on the retried
    attempt and on the last one: the traceback Celery logs shows the whole chain."""
    canary = f"canary-{uuid.uuid4().hex}"
    worker = start_worker()
    job_id = env.task("acc.chained_secret").enqueue(user="carol", password=canary).job_id

    job = env.wait_status(job_id, "failed", "completed", timeout=30)
    assert job.status is JobStatus.FAILED
    assert job.attempts_made == 2 == job.max_attempts
    assert job.error_type == "RuntimeError"
    assert job.error_message == "outer"
    assert env.ran(job_id) == 2
    history = env.tracker.history(job_id)
    assert names(history) == ["enqueued", "started", "retrying", "started", "failed"]
    for event in history:
        assert canary not in (event.message or ""), event

    # Celery logged the final failure with its traceback (the chain included)
    wait_for(
        lambda: f"[{job_id}] raised unexpected" in worker.log(),
        timeout=10,
        what="Celery's failure log line",
    )
    wait_for(lambda: worker.records_of(job_id, "failed"), timeout=10, what="the failure record")
    wait_for(env.broker_empty, timeout=10, what="the broker to be empty")
    log = worker.log()
    assert "inner carol" in log  # the cause was printed...
    leaked = [line for line in log.splitlines() if canary in line]
    assert leaked == [], "the password is in the worker's output:\n" + "\n".join(leaked)
    assert canary not in worker.jsonl_path.read_text()
