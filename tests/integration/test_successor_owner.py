"""A pipeline's successors carry their step's ``owner_id`` (issue 22, item 4): a service
that checks a job's owner against its data (the example's processors) sees the same owner
on every step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_tracked import Tracker, tracked_task
from celery_tracked.migrate import upgrade


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery]:
    url = f"sqlite:///{tmp_path / 'owners.sqlite3'}"
    upgrade(url)
    app = Celery("owners", broker="memory://", set_as_current=False)
    app.conf.update(tracked_database_url=url, tracked_redis_url="memory://", task_always_eager=True)
    yield app
    Tracker.forget(app)


def test_successors_carry_the_owner_of_their_step(app: Celery) -> None:
    @tracked_task(app=app, shared=False, name="own.leaf")
    def leaf(n: int) -> int:
        return n

    @tracked_task(app=app, bind=True, shared=False, name="own.first")
    def first(self: Any, width: int) -> None:
        for n in range(width):
            self.then(leaf, n)

    tracker = Tracker.for_app(app)
    owned = first.with_options(owner_id="alice:x")(2).job_id
    unowned = first.enqueue(1).job_id
    steps = tracker.pipeline(owned).jobs
    assert len(steps) == 3 and {job.owner_id for job in steps} == {"alice:x"}
    assert {job.owner_id for job in tracker.pipeline(unowned).jobs} == {None}
