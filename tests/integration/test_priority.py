"""Priority on the producer path (issue 26, item 2), in process: kombu's in-memory broker
(a virtual transport: 0-9), the in-memory store. The task's priority and the call's are
recorded on the row and carried by the message; out of range, nothing is written."""

from __future__ import annotations

import pytest
from celery import Celery

from celery_tracked import InvalidPriority, Tracker, tracked_task
from celery_tracked.testing.apps import tracked_test_app

CONFIG = {"tracked_database_url": "memory://", "tracked_redis_url": "memory://"}


def test_the_task_s_priority_and_the_call_s_are_recorded_and_sent() -> None:
    app = Celery("prio_in_process", broker="memory://", set_as_current=False)

    @tracked_task(app=app, name="p.low", priority=2, shared=False)
    def low(n: int) -> int:
        return n

    @tracked_task(app=app, name="p.none", shared=False)
    def plain(n: int) -> int:
        return n

    with tracked_test_app(app, CONFIG):
        tracker = Tracker.for_app(app)
        sent: list[object] = []
        from celery.signals import before_task_publish

        def seen(headers: dict[str, object], properties: dict[str, object], **_: object) -> None:
            sent.append(properties.get("priority"))

        before_task_publish.connect(seen, weak=False)
        try:
            by_task = low.enqueue(n=1).job_id
            by_call = low.apply_async(kwargs={"n": 2}, priority=9).id
            none = plain.delay(3).id
            with pytest.raises(InvalidPriority, match="0 to 9"):
                plain.apply_async(kwargs={"n": 4}, priority=10)
        finally:
            before_task_publish.disconnect(seen)
        assert [tracker.get_job(j).priority for j in (by_task, by_call, none)] == [2, 9, None]
        assert sent == [2, 9, None]
        assert len(tracker.jobs().jobs) == 3  # the refused call left no row
