"""Successors in eager mode (SQLite, in-process guard): a long pipeline runs inline, a
successor under a key lifetime that frees keys takes the next round, a successor that
cannot be declared fails its step at once (issue 8)."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from celery_tracked import JobStatus, NotInAStep, Tracker, Unrecoverable, tracked_task
from celery_tracked.testing import TrackedTesting

#: the testing plugin's app (docs/testing.md), eager, on a SQLite file of each test's own
pytestmark = pytest.mark.celery(task_always_eager=True)


@pytest.fixture
def tracked_database() -> str:
    return "sqlite"


@pytest.fixture
def app(tracked_app: Celery) -> Celery:
    return tracked_app


def test_an_eager_pipeline_of_any_length_runs_inline(app: Celery, tracked: TrackedTesting) -> None:
    @tracked_task(app=app, bind=True, shared=False)
    def step(self: Any, n: int, total: int) -> int:
        if n < total:
            self.then(step, n + 1, total)
        return n

    first = step.delay(1, 250)
    pipeline = tracked.pipeline(first)
    assert len(pipeline.jobs) == 250 and pipeline.state == "completed"
    assert [job.parent_job_id for job in tracked.successors(first)] == [first.id]
    assert [depth for depth, _ in pipeline.tree()] == list(range(250))


def test_a_successor_takes_the_next_round_of_a_freed_key(app: Celery) -> None:
    @tracked_task(
        app=app, bind=True, shared=False, idempotency_key="leaf:{tag}", key_lifetime="ended"
    )
    def leaf(self: Any, tag: str) -> str:
        return tag

    @tracked_task(app=app, bind=True, shared=False)
    def root(self: Any, tag: str) -> None:
        self.then(leaf, tag)

    for _ in range(3):
        root.delay("x")
    store = Tracker.for_app(app)._services.store
    latest = store.find_by_key(leaf.tracked_job_type, "leaf:x")
    assert latest is not None and latest.key_round == 2
    assert latest.status is JobStatus.COMPLETED


def test_a_successor_that_cannot_be_declared_fails_its_step_at_once(
    app: Celery, tracked: TrackedTesting
) -> None:
    @tracked_task(app=app, bind=True, shared=False)
    def takes_text(self: Any, text: str) -> str:
        return text

    @tracked_task(app=app, bind=True, shared=False, max_attempts=3)
    def bad(self: Any, what: str) -> None:
        if what == "plain":
            self.then(print, 1)
        else:
            self.then(takes_text, bogus=1)

    for what, text in (("plain", "must be a tracked task"), ("args", "missing a required")):
        job = tracked.assert_status(bad.delay(what), JobStatus.FAILED)
        assert (job.attempts_made, job.error_type) == (1, "InvalidSuccessor")
        assert text in (job.error_message or "")
        assert tracked.pipeline(job).state == "halted"
        assert tracked.successors(job) == []


def test_then_outside_a_running_task_is_refused(app: Celery) -> None:
    @tracked_task(app=app, bind=True, shared=False)
    def step(self: Any) -> str:
        return self.then(step)

    with pytest.raises(NotInAStep):
        step()


def test_a_stop_on_the_last_attempt_halts_and_used_up_retries_fail(app: Celery) -> None:
    """``retries_exhausted`` tells a stop (``Unrecoverable``, even on a job's only attempt)
    from retries used up: the pipeline is ``halted`` for the one, ``failed`` for the other."""

    @tracked_task(app=app, bind=True, shared=False, max_attempts=1)
    def only_once(self: Any, how: str) -> None:
        raise Unrecoverable("credits") if how == "stop" else ValueError("broken")

    @tracked_task(app=app, bind=True, shared=False)
    def first(self: Any, how: str) -> None:
        self.then(only_once, how)

    tracker = Tracker.for_app(app)
    for how, state, used_up in (("stop", "halted", False), ("break", "failed", True)):
        pipeline = tracker.pipeline(first.delay(how).id)
        leaf = pipeline.jobs[-1]
        assert (leaf.status, leaf.retries_exhausted) == (JobStatus.FAILED, used_up)
        assert pipeline.state == state
