"""A job id re-sent after its job ended runs again as a new round, and a ``pydantic=True``
task receives its models (issue 24): in eager mode (``task_always_eager``), as on a worker
(``tests/acceptance/test_resent_job_id.py``, ``test_celery_values.py``), and a re-send
whose publish fails leaves the job as it was."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
import redis
from celery import Task
from pydantic import BaseModel

from celery_tracked import EnqueueError, JobStatus, TaskIdInUse, tracked_task
from celery_tracked.core.jobs import utcnow

from .conftest import AppFactory, queue_messages, tracker_of


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


def test_two_concurrent_resends_of_an_ended_job_both_see_the_new_round(
    make_app: AppFactory, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two producers re-send an ended job's id at once: one moves it to its new round and
    publishes; the other's move finds it moved and returns it as the winner left it
    (``pending``), never its old status, and publishes nothing."""
    app = make_app()

    @tracked_task(app=app, queue="race_q")
    def work(n: int) -> None: ...

    first = work.apply_async((1,))
    tracker = tracker_of(app)
    assert tracker.cancel(first.id)
    both_read = threading.Barrier(2, timeout=10)
    real_retry = tracker._services.store.retry

    def after_both_read(*args: Any, **kwargs: Any) -> bool:
        both_read.wait()  # each has read the job cancelled: the race of the moves
        return real_retry(*args, **kwargs)

    monkeypatch.setattr(tracker._services.store, "retry", after_both_read)
    results: list[Any] = []
    with ThreadPoolExecutor(2) as pool:
        resend = work.with_options(options={"task_id": first.id})
        futures = [pool.submit(resend, n) for n in (2, 3)]
        results = [future.result(timeout=30) for future in futures]
    assert [r.job_id for r in results] == [first.id, first.id]
    assert sorted(r.created for r in results) == [False, True]
    assert [r.status for r in results] == [JobStatus.PENDING, JobStatus.PENDING], results
    job = tracker.get_job(first.id)
    assert job is not None and (job.status, job.revision) == (JobStatus.PENDING, 1)
    events = [e.event for e in tracker.history(first.id)]
    assert events == ["enqueued", "cancelled", "retried"], events
    assert len(queue_messages(broker, "race_q")) == 2  # the first round's, the new round's


def test_a_resends_countdown_is_the_new_rounds_due_time(make_app: AppFactory) -> None:
    """A re-send with a ``countdown`` (or an ``eta``) makes its new round due then, on the
    database's clock, as a first enqueue's; without one, due at once."""
    app = make_app()

    @tracked_task(app=app, queue="resend_due_q")
    def work(n: int) -> None: ...

    first = work.apply_async((1,))
    tracker = tracker_of(app)
    assert tracker.cancel(first.id)
    work.apply_async((2,), task_id=first.id, countdown=600)
    job = tracker.get_job(first.id)
    assert job is not None and job.status is JobStatus.PENDING and job.not_before is not None
    due_in = (job.not_before - tracker._services.store.clock()).total_seconds()
    assert 590 < due_in <= 600, due_in
    assert tracker.cancel(first.id)
    eta = (utcnow() + timedelta(hours=2)).replace(microsecond=0)
    work.apply_async((3,), task_id=first.id, eta=eta)
    job = tracker.get_job(first.id)
    assert job is not None and job.not_before == eta
    assert tracker.cancel(first.id)
    work.apply_async((4,), task_id=first.id)
    job = tracker.get_job(first.id)
    assert job is not None and job.status is JobStatus.PENDING and job.not_before is None
