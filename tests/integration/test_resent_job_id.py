"""A job id re-sent after its job ended runs again as a new round, and a ``pydantic=True``
task receives its models (issue 24): in eager mode (``task_always_eager``), as on a worker
(``tests/acceptance/test_resent_job_id.py``, ``test_celery_values.py``), and a re-send
whose publish fails leaves the job as it was."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Task
from pydantic import BaseModel

from celery_tracked import EnqueueError, JobStatus, TaskIdInUse, tracked_task

from .conftest import AppFactory, tracker_of


class Point(BaseModel):
    x: int
    y: int


def test_an_eager_resend_of_an_ended_job_runs_it_again(make_app: AppFactory) -> None:
    app = make_app(task_always_eager=True, task_eager_propagates=True)

    @tracked_task(app=app, queue="eager_q")
    def add(x: int, y: int) -> int:
        return x + y

    first = add.apply_async((1, 2))
    assert first.get() == 3
    again = add.apply_async((3, 4), task_id=first.id)
    assert (again.id, again.get()) == (first.id, 7)
    job = tracker_of(app).get_job(first.id)
    assert job is not None and job.status is JobStatus.COMPLETED
    assert (job.result, job.attempts_made, job.payload) == (7, 2, {"args": [3, 4], "kwargs": {}})
    assert [e.event for e in tracker_of(app).history(first.id)] == [
        "enqueued", "started", "completed", "retried", "started", "completed",
    ]  # fmt: skip


def test_an_eager_pydantic_task_receives_its_model(make_app: AppFactory) -> None:
    app = make_app(task_always_eager=True, task_eager_propagates=True)

    @tracked_task(app=app, queue="eager_q", pydantic=True)
    def norm(point: Point) -> int:
        assert isinstance(point, Point)
        return point.x * point.x + point.y * point.y

    result = norm.delay(Point(x=3, y=4))
    assert result.get() == 25
    assert norm.apply_async((Point(x=1, y=1),), serializer="pickle").get() == 2  # dumped too
    job = tracker_of(app).get_job(result.id)
    assert job is not None and job.payload == {"args": [{"x": 3, "y": 4}], "kwargs": {}}


def test_a_successor_of_a_pydantic_task_takes_its_model(make_app: AppFactory) -> None:
    app = make_app(task_always_eager=True, task_eager_propagates=True)

    @tracked_task(app=app, queue="eager_q", pydantic=True)
    def norm(point: Point) -> int:
        assert isinstance(point, Point)
        return point.x + point.y

    @tracked_task(app=app, queue="eager_q", bind=True)
    def step(self: Any) -> str:
        return self.then(norm, Point(x=1, y=2))

    first = step.delay()
    successor = tracker_of(app).get_job(first.get())
    assert successor is not None and successor.status is JobStatus.COMPLETED
    assert (successor.result, successor.payload) == (3, {"args": [{"x": 1, "y": 2}], "kwargs": {}})


def test_a_resend_whose_publish_fails_leaves_the_ended_job_as_it_was(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()

    @tracked_task(app=app, queue="resend_q")
    def work(n: int) -> None: ...

    first = work.apply_async((1,))
    tracker = tracker_of(app)
    assert tracker.cancel(first.id)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("broker down")

    with monkeypatch.context() as patched:
        patched.setattr(Task, "apply_async", refused)
        with pytest.raises(EnqueueError, match="broker down"):
            work.apply_async((2,), task_id=first.id)
    job = tracker.get_job(first.id)
    assert job is not None and job.status is JobStatus.CANCELLED
    assert job.payload == {"args": [1], "kwargs": {}} and job.finished_at is not None

    again = work.apply_async((3,), task_id=first.id)
    job = tracker.get_job(again.id)
    assert job is not None and (job.status, job.revision) == (JobStatus.PENDING, 2)
    assert job.payload == {"args": [3], "kwargs": {}} and job.published_at is not None
    assert [e.event for e in tracker.history(first.id)] == [
        "enqueued", "cancelled", "retried", "retry_undone", "retried",
    ]  # fmt: skip


@pytest.mark.parametrize("eager", [True, False])
def test_a_task_id_resent_to_another_task_is_refused(make_app: AppFactory, eager: bool) -> None:
    """The id of a job of another task is refused (``TaskIdInUse``, naming both tasks),
    nothing created, never the other task's job returned: ended or not, eager or not."""
    app = make_app(task_always_eager=eager, task_eager_propagates=eager)

    @tracked_task(app=app, queue="resend_q")
    def add(x: int, y: int) -> int:
        return x + y

    @tracked_task(app=app, queue="resend_q")
    def tsum(numbers: list[int]) -> int:
        return sum(numbers)

    first = add.apply_async((1, 2))
    tracker = tracker_of(app)
    with pytest.raises(TaskIdInUse) as info:
        tsum.apply_async(([5, 5],), task_id=first.id)
    assert (info.value.job_id, info.value.task_id) == (first.id, first.id)
    assert add.name in str(info.value) and tsum.name in str(info.value)
    assert isinstance(info.value, ValueError) and not info.value.retryable
    job = tracker.get_job(first.id)
    assert job is not None and job.task_name == add.name and job.payload["args"] == [1, 2]
    assert tracker.jobs(task_name=tsum.name).jobs == ()
