"""``Tracker.retry`` of a pipeline step (issue 12, item 4), in eager mode on PostgreSQL and
SQLite (the in-process guard).

A step whose failure was followed by its fail-soft successor is not run again (its
pipeline went on from that failure: running it again would run both branches); a step
stopped without one (``Unrecoverable``, a cancel) runs again, and its successors are
created when it completes, so its pipeline goes on from it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from celery_tracked import JobStatus, RetryRefused, Tracker, Unrecoverable, tracked_task
from celery_tracked.services.pipelines import fail_soft_note

#: other modules' test apps declare shared tasks this one also finalizes
pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    app = Celery("retry_step", broker="memory://", set_as_current=False)
    app.conf.update(
        task_always_eager=True, tracked_database_url=database_url, tracked_redis_url="memory://"
    )
    yield app
    Tracker.for_app(app).close()


def pipeline_of(app: Celery, how: dict[str, str]) -> tuple[Any, Any]:
    """``first`` → ``step`` (fail-soft: ``fallback``, then: ``after``): ``step`` behaves as
    ``how["step"]`` says (read at each run: a test changes it)."""

    @tracked_task(app=app, bind=True, shared=False, idempotency_key="after:{tag}")
    def after(self: Any, tag: str) -> str:
        return f"after {tag}"

    @tracked_task(app=app, bind=True, shared=False, idempotency_key="fallback:{tag}")
    def fallback(self: Any, tag: str) -> str:
        return f"fallback {tag}"

    @tracked_task(app=app, bind=True, shared=False, max_attempts=2)
    def note(self: Any, tag: str) -> str:
        return tag

    @tracked_task(app=app, bind=True, shared=False, max_attempts=2)
    def step(self: Any, tag: str) -> str:
        self.otherwise(fallback, tag)
        note.delay(tag)  # a job enqueued from the body: a child, not a successor
        if how["step"] == "break":
            raise ValueError("the provider is down")
        if how["step"] == "stop":
            raise Unrecoverable("no credits left")
        self.then(after, tag)
        return tag

    @tracked_task(app=app, bind=True, shared=False)
    def first(self: Any, tag: str) -> None:
        self.then(step, tag)

    return first, step


def test_a_step_whose_fail_soft_successor_ran_is_not_retried(app: Celery) -> None:
    how = {"step": "break"}
    first, _ = pipeline_of(app, how)
    tracker = Tracker.for_app(app)
    cid = first.delay("t1").id
    before = tracker.pipeline(cid)
    step = next(j for j in before.jobs if j.job_type.endswith("step"))
    assert (step.status, step.attempts_made, step.retries_exhausted) == (JobStatus.FAILED, 2, True)
    [fallback] = [j for j in before.children(step.id) if j.job_type.endswith("fallback")]
    assert fallback.status is JobStatus.COMPLETED
    assert before.state == "completed"
    assert tracker._services.store.fail_soft_successor(step, fail_soft_note(step.id)) == fallback

    how["step"] = "succeed"  # the provider is back: running it again would now complete
    with pytest.raises(RetryRefused, match=f"fail-soft successor {fallback.id}") as refused:
        tracker.retry(step.id)
    assert "retry the successor instead" in str(refused.value)
    after = tracker.pipeline(cid)
    assert [(j.id, j.status, j.attempts_made) for j in after.jobs] == [
        (j.id, j.status, j.attempts_made) for j in before.jobs
    ]
    assert not [j for j in after.jobs if j.job_type.endswith("after")]
    assert [e.event for e in tracker.history(step.id)][-1] == "failed"


@pytest.mark.parametrize("ended", ["stop", "cancel"])
def test_a_step_stopped_without_fail_soft_successor_runs_again_and_its_pipeline_goes_on(
    app: Celery, ended: str
) -> None:
    how = {"step": "stop"}
    first, step_task = pipeline_of(app, how)
    tracker = Tracker.for_app(app)
    if ended == "stop":  # Unrecoverable: no fail-soft successor
        cid = first.delay("t2").id
        step = next(j for j in tracker.pipeline(cid).jobs if j.job_type.endswith("step"))
    else:  # a step cancelled before it ran
        app.conf.task_always_eager = False
        queued = step_task.with_options(options={"countdown": 0})
        step = tracker.get_job(queued("t3").job_id)
        assert step is not None and tracker.cancel(step.id)
        app.conf.task_always_eager = True
        cid = step.id
    stopped = tracker.get_job(step.id)
    assert stopped is not None and not stopped.retries_exhausted
    assert stopped.status is (JobStatus.FAILED if ended == "stop" else JobStatus.CANCELLED)
    children = tracker.pipeline(cid).children(step.id)
    assert all(j.job_type.endswith("note") for j in children), children

    how["step"] = "succeed"
    assert tracker.retry(step.id) is True
    pipeline = tracker.pipeline(cid)
    retried = next(j for j in pipeline.jobs if j.id == step.id)
    assert retried.status is JobStatus.COMPLETED
    successors = [j for j in pipeline.children(step.id) if not j.job_type.endswith("note")]
    assert [(j.job_type.rsplit(".", 1)[-1], j.status) for j in successors] == [
        ("after", JobStatus.COMPLETED)
    ]
    assert pipeline.state == "completed"
