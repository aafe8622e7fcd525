"""The new-user trial (issue 26, F12): a held job whose task was renamed (or removed) before
its due time is published by the scheduler pass by name, as every process may publish a
task it never imported; the real ``celery worker`` that receives it has no such task,
Celery discards the message, and the job ends ``cancelled`` with ``error_type``
``UnknownTask`` and why, at once, instead of waiting for the reaper to give up on it."""

from __future__ import annotations

from typing import Any

from tracked_app import QUEUE

from celery_tracked import JobStatus, tracked_task
from tests.acceptance.test_scheduling import set_due
from tests.conftest import wait_for


def test_a_held_job_whose_task_is_gone_ends_cancelled_unknown_task(
    env: Any, start_worker: Any
) -> None:
    @tracked_task(app=env.app, queue=QUEUE, name="acc.renamed_before_due", shared=False)
    def renamed(who: str) -> str:  # registered here only: the worker never had it
        return who

    worker = start_worker()
    r = renamed.apply_async(args=("a",), countdown=7200)
    set_due(env, r.id, 1.0)  # as if two hours had passed
    assert env.tracker.schedule().as_dict()["published"] == [r.id]

    def ended() -> Any:
        job = env.tracker.get_job(r.id)
        return job if job is not None and job.status is JobStatus.CANCELLED else None

    job = wait_for(ended, timeout=30, what="the job cancelled by the worker")
    assert job.error_type == "UnknownTask"
    assert "has no task 'acc.renamed_before_due' registered" in (job.error_message or "")
    assert env.ran(r.id) == 0
    assert env.tracker.history(r.id)[-1].event == "cancelled"
    assert worker is not None
