"""Acceptance: the ways Celery users declare, call and chain tasks (docs/usage.md).

Lineage recorded from inside a running tracked task, ``base=TrackedTask`` without the
decorator, a callable validator, and ``app.send_task`` running untracked with a warning.
"""

from __future__ import annotations

from typing import Any

import pytest
from tracked_app import QUEUE

from celery_tracked import InvalidPayload, JobStatus
from tests.conftest import wait_for


def names(history: list[Any]) -> list[str]:
    return [e.event for e in history]


def test_lineage_recorded_from_inside_a_running_tracked_task(env: Any, start_worker: Any) -> None:
    """``acc.spawn``'s body enqueues a tracked ``acc.succeed``: the child's row names the
    running job as its parent and inherits its correlation id (given, or the root's id)."""
    start_worker()
    spawn = env.task("acc.spawn")
    given = spawn.enqueue(x="p1", _correlation_id="req-42").job_id
    root = spawn.enqueue(x="p2").job_id

    for parent_id, correlation in ((given, "req-42"), (root, root)):
        parent = env.wait_status(parent_id, "completed", "failed", timeout=30)
        assert parent.status is JobStatus.COMPLETED, env.diagnose(parent_id)
        assert parent.correlation_id == correlation
        assert parent.parent_job_id is None
        child_id = parent.result["child"]
        assert child_id != parent_id

        child = env.wait_status(child_id, "completed", "failed", timeout=30)
        assert child.status is JobStatus.COMPLETED
        assert child.task_name == "acc.succeed"
        assert child.parent_job_id == parent_id
        assert child.correlation_id == correlation
        [row] = env.sql(
            "SELECT parent_job_id, correlation_id FROM background_jobs WHERE id = :id",
            id=child_id,
        )
        assert tuple(row) == (parent_id, correlation)
        assert env.ran(child_id) == 1

    # a job enqueued outside any task has no parent
    assert env.sql("SELECT count(*) FROM background_jobs WHERE parent_job_id IS NULL")[0][0] == 2
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 4


def test_base_tracked_task_without_the_decorator_is_tracked(env: Any, start_worker: Any) -> None:
    """``@app.task(base=TrackedTask, bind=True, max_attempts=2)``: rows, retries, lifecycle."""
    task = env.task("acc.base_only")
    via_enqueue = task.enqueue(x="b1")
    assert via_enqueue.created is True and via_enqueue.status is JobStatus.PENDING
    via_delay = task.delay("b2").id
    via_apply = task.apply_async(kwargs={"x": "b3"}, correlation_id="req-b").id
    ids = [via_enqueue.job_id, via_delay, via_apply]
    rows = env.sql("SELECT id, job_type, queue_name, max_attempts, status FROM background_jobs")
    assert sorted(tuple(r) for r in rows) == sorted(
        (job_id, "acc.base_only", QUEUE, 2, "pending") for job_id in ids
    )
    assert sorted(m["headers"]["id"] for m in env.broker_messages()) == sorted(ids)

    start_worker()
    for job_id, x in zip(ids, ("b1", "b2", "b3"), strict=True):
        job = env.wait_status(job_id, "completed", "failed", timeout=30)
        assert job.status is JobStatus.COMPLETED, env.diagnose(job_id)
        assert job.attempts_made == 2  # run 1 raised: retried by the tracker
        assert job.result == {"x": x, "run": 2}
        assert names(env.tracker.history(job_id)) == [
            "enqueued",
            "started",
            "retrying",
            "started",
            "completed",
        ]
        assert env.ran(job_id) == 2
    assert env.tracker.get_job(via_apply).correlation_id == "req-b"


def test_callable_validator_refuses_bad_input_and_creates_nothing(env: Any) -> None:
    task = env.task("acc.validated")
    keys_before = set(env.redis.keys("*"))

    with pytest.raises(InvalidPayload, match="pages must be positive, got 0"):
        task.enqueue(document_id="d-1", pages=0)
    with pytest.raises(InvalidPayload, match="pages must be positive, got -3"):
        task.apply_async(args=("d-2", -3))  # positional: bound to names for the validator
    with pytest.raises(InvalidPayload, match="pages must be positive"):
        task.delay("d-3", pages=-1)

    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 0
    assert env.sql("SELECT count(*) FROM background_job_events")[0][0] == 0
    assert env.broker_messages() == []
    assert set(env.redis.keys("*")) == keys_before  # no guard key either

    # the same task accepts good input: the refusals above were the validator's
    ok = task.enqueue(document_id="d-1", pages=3)
    assert ok.created is True
    job = env.tracker.get_job(ok.job_id)
    assert job.status is JobStatus.PENDING
    assert job.idempotency_key == "v:d-1"  # the refused call left no key behind
    assert job.payload == {"args": [], "kwargs": {"document_id": "d-1", "pages": 3}}
    assert [m["headers"]["id"] for m in env.broker_messages()] == [ok.job_id]


def test_send_task_runs_untracked_with_a_warning(env: Any, start_worker: Any) -> None:
    worker = start_worker()
    task_id = env.app.send_task("acc.succeed", kwargs={"x": "raw"}, queue=QUEUE).id

    wait_for(lambda: env.redis.exists(f"spans:{task_id}"), timeout=20, what="the body to run")
    wait_for(
        lambda: f"Task acc.succeed[{task_id}] succeeded" in worker.log(),
        timeout=10,
        what="Celery's success line",
    )
    assert env.ran(task_id) == 1  # the body ran, once
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 0  # untracked: no row
    assert env.sql("SELECT count(*) FROM background_job_events")[0][0] == 0
    assert env.tracker.get_job(task_id) is None
    warnings = [
        r
        for r in worker.records()
        if r["level"] == "WARNING" and task_id in r["message"] and "untracked" in r["message"]
    ]
    assert len(warnings) == 1, worker.records()
    assert "acc.succeed" in warnings[0]["message"]
    assert "Tracker.enqueue(name, ...) or `celery tracked call`" in warnings[0]["message"]
