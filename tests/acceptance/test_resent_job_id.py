"""Acceptance: a job id sent again (a frozen signature or canvas applied again, a
``task_id`` given twice), on a real worker with a Redis result backend (issue 24, Build 3).

Celery runs each apply of a frozen signature again under its frozen task id. Tracked:
a re-send of a job whose job has **ended** runs it again as a new round of that job (its
history kept, as ``Tracker.retry`` does); a re-send while it is still active stays one job
(the deduplication).
"""

from __future__ import annotations

from typing import Any

import pytest
from celery import chord, group
from test_celery_values import backend_env  # noqa: F401 (fixture)

from tests.conftest import wait_for

DEADLINE_S = 30.0
pytestmark = pytest.mark.timeout(90)


def events(env: Any, job_id: str) -> list[str]:
    return [e.event for e in env.tracker.history(job_id)]


def test_a_frozen_signature_applied_again_after_it_ended_runs_again(
    backend_env: Any,  # noqa: F811
) -> None:
    sig = backend_env.task("acc.succeed").si("again")
    job_id = sig.freeze().id
    first = sig.apply_async()
    assert first.id == job_id and first.get(timeout=DEADLINE_S) == {"x": "again", "run": 1}
    backend_env.wait_status(job_id, "completed")

    second = sig.apply_async()
    assert second.id == job_id
    assert second.get(timeout=DEADLINE_S) == {"x": "again", "run": 2}  # the new run's
    job = backend_env.wait_status(job_id, "completed")
    assert backend_env.ran(job_id) == 2 and job.attempts_made == 2
    assert events(backend_env, job_id) == [
        "enqueued", "started", "completed", "retried", "started", "completed",
    ]  # fmt: skip
    assert backend_env.sql("SELECT count(*) FROM background_jobs")[0][0] == 1


def test_a_frozen_chord_applied_again_dispatches_its_body_again(
    backend_env: Any,  # noqa: F811
) -> None:
    succeed = backend_env.task("acc.succeed")
    # header members that outlast the header's send: Celery 5.7's Redis backend drops a
    # re-applied frozen chord's member result that comes before its last member is sent,
    # plain or tracked (docs/converting.md, "Canvas"; measured with plain Celery)
    header = group(succeed.si("h1", sleep=1.0), succeed.si("h2", sleep=1.0))
    canvas = chord(header, succeed.si("body"))
    canvas.freeze()
    first = canvas.apply_async()
    assert first.get(timeout=DEADLINE_S)["run"] == 1
    second = canvas.apply_async()
    assert second.id == first.id
    # the body is sent again once the header ran again (until then Celery's result backend
    # still holds its previous run's value, as with plain Celery)
    body_ran_again = lambda: backend_env.ran(first.id) == 2  # noqa: E731
    wait_for(body_ran_again, timeout=DEADLINE_S, what="the chord's body to run again")
    job = backend_env.wait_status(first.id, "completed")
    assert job.result == {"x": "body", "run": 2} and job.attempts_made == 2
    for header in first.parent.results:  # each header member: one job, run twice
        assert backend_env.ran(header.id) == 2


def test_a_resend_while_the_job_runs_stays_one_job(backend_env: Any) -> None:  # noqa: F811
    hold = backend_env.task("acc.hold")
    sig = hold.si("busy")
    job_id = sig.freeze().id
    first = sig.apply_async()
    wait_for(
        lambda: backend_env.redis.exists(f"holding:{job_id}"), timeout=DEADLINE_S, what="the run"
    )
    second = sig.apply_async()  # deduplicated: the running job is the one
    assert second.id == job_id
    backend_env.redis.set(f"go:{job_id}", 1)
    assert first.get(timeout=DEADLINE_S) == {"x": "busy", "run": 1}
    assert backend_env.ran(job_id) == 1
    assert "retried" not in events(backend_env, job_id)


def test_a_task_id_given_again_after_a_failure_runs_with_the_new_arguments(
    backend_env: Any,  # noqa: F811
) -> None:
    task = backend_env.task("acc.unrecoverable")
    failed = task.apply_async(("first",))
    assert backend_env.wait_status(failed.id, "failed").attempts_made == 1
    again = task.apply_async(("second",), task_id=failed.id)
    assert again.id == failed.id
    job = backend_env.wait_status(failed.id, "failed")
    assert backend_env.ran(failed.id) == 2 and job.attempts_made == 2
    assert job.payload == {"args": ["second"], "kwargs": {}}
    assert job.error_message is not None and "second" in job.error_message
