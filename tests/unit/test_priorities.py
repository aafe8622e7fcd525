"""Priority (issue 26): the broker's range per queue, a call's priority, the listing filter."""

from __future__ import annotations

import pytest
from celery import Celery
from kombu import Queue

from celery_tracked.adapter.priorities import highest_priority
from celery_tracked.core.errors import InvalidFilter, InvalidPriority, InvalidTaskOption
from celery_tracked.core.finder import JobFilter
from celery_tracked.core.options import check_task_options


def test_redis_takes_0_to_9_or_its_priority_steps() -> None:
    app = Celery("p", broker="redis://127.0.0.1:6379/0", set_as_current=False)
    assert highest_priority(app, "celery") == 9
    app.conf.broker_transport_options = {"priority_steps": list(range(6))}
    assert highest_priority(app, "celery") == 5


def test_rabbitmq_takes_0_to_255_or_the_queue_s_x_max_priority() -> None:
    app = Celery("p", broker="amqp://guest:guest@127.0.0.1//", set_as_current=False)
    assert highest_priority(app, "celery") == 255
    app.conf.task_queues = [Queue("urgent", queue_arguments={"x-max-priority": 10})]
    assert highest_priority(app, "urgent") == 10
    assert highest_priority(app, "other") == 255
    app.conf.task_queue_max_priority = 5
    assert highest_priority(app, "other") == 5 and highest_priority(app, "urgent") == 10


def test_a_priority_beyond_the_queue_s_range_is_refused_by_name() -> None:
    from dataclasses import replace

    from tests.unit.test_description import a_description

    task = replace(a_description(), highest_priority=lambda queue: 9)
    assert task.priority_of({"priority": 9}, "q") == 9
    assert task.priority_of({}, "q") is None
    with pytest.raises(InvalidPriority) as caught:
        task.priority_of({"priority": 10}, "q")
    assert caught.value.highest == 9 and "queue 'q'" in str(caught.value)
    assert replace(task, priority=3).priority_of({}, "q") == 3


@pytest.mark.parametrize("bad", [-1, 256, "5", True])
def test_a_task_s_priority_option_is_checked_at_decoration(bad: object) -> None:
    with pytest.raises(InvalidTaskOption):
        check_task_options({"priority": bad})


@pytest.mark.parametrize("bad", [-1, 256, "5", True])
def test_the_priority_filter_takes_an_int_0_to_255(bad: object) -> None:
    with pytest.raises(InvalidFilter):
        JobFilter.of(priority=bad)  # type: ignore[arg-type]


class Publishing:
    """A platform that keeps what it was asked to publish (``send_job`` reads ``show``)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, object]] = []

    def show(self, value: object, limit: int) -> str:
        return repr(value)[:limit]

    def publish(
        self, task: object, args: object, kwargs: object, options: dict[str, object]
    ) -> None:
        self.sent.append(dict(options))


@pytest.mark.parametrize("priority", [None, 0, 7])
def test_every_publish_from_a_row_sends_its_priority(priority: int | None) -> None:
    """The relay's, the reaper's and ``Tracker.retry``'s publish (``send_job``)."""
    from celery_tracked.services.rerun import send_job
    from tests.unit.job_rows import a_job

    platform = Publishing()
    send_job(platform, a_job(priority=priority), [], {})  # type: ignore[arg-type]
    (options,) = platform.sent
    assert options.get("priority") == priority and ("priority" in options) == (priority is not None)
