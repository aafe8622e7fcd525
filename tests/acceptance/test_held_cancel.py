"""A held job (issue 26) cancelled before its due time: no broker message before or after,
and the scheduler pass never publishes it (the new-user trial's check)."""

from __future__ import annotations

from typing import Any

from celery_tracked import JobStatus
from tests.acceptance.test_scheduling import TIMED, no_message_anywhere, set_due


def test_a_held_job_cancelled_leaves_no_message_and_is_never_published(env: Any) -> None:
    r = env.task(TIMED).apply_async(args=("held",), countdown=7200)
    assert no_message_anywhere(env)
    assert env.tracker.cancel(r.id, "not needed any more")
    job = env.tracker.get_job(r.id)
    assert job is not None and job.status is JobStatus.CANCELLED and job.due_at is None
    set_due(env, r.id, 1.0)  # its old due time comes: still nothing to publish
    assert env.tracker.schedule().as_dict()["published"] == []
    assert env.tracker.relay().as_dict()["published"] == []
    assert no_message_anywhere(env)
