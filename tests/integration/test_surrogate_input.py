"""A lone surrogate (text no column can hold) in an id or an enqueue option is a typed
error, with nothing left behind: no row, no guard key, no message (trial of issue 22, F2).
Like a NUL byte: ``InvalidPayload`` naming the argument; a filter: ``InvalidFilter``."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from celery_tracked import InvalidFilter, InvalidPayload, tracked_task

from .conftest import AppFactory, guard_keys, queue_messages, tracker_of
from .test_enqueue import row_count

QUEUE = "surrogate_q"

CONTROLS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"_owner_id": "o\ud800"}, {}),
    ({"_correlation_id": "c\ud800"}, {}),
    ({"_parent_job_id": "p\udcff"}, {}),
    ({"_idempotency_key": "k\ud800"}, {}),
    ({}, {"task_id": "id\udcff"}),
    ({}, {"queue": "q\udcff"}),
]


@pytest.mark.parametrize(("control", "options"), CONTROLS)
def test_an_enqueue_option_with_a_lone_surrogate_is_refused_with_nothing_left(
    make_app: AppFactory,
    broker: redis.Redis,
    database_url: str,
    control: dict[str, Any],
    options: dict[str, Any],
) -> None:
    app = make_app()

    @tracked_task(app=app, queue=QUEUE, idempotency_key="k:{x}", shared=False)
    def work(x: int) -> None: ...

    with pytest.raises(InvalidPayload) as raised:
        work.enqueue(1, **control, _options=options)
    name = next(iter(control or options)).lstrip("_")
    assert name in str(raised.value) or "key" in str(raised.value)
    assert row_count(database_url) == 0
    assert queue_messages(broker, QUEUE) == [] and guard_keys(broker) == []


@pytest.mark.parametrize("method", ["get_job", "history", "cancel", "wait", "retry", "pipeline"])
def test_an_id_with_a_lone_surrogate_is_invalid_payload(make_app: AppFactory, method: str) -> None:
    tracker = tracker_of(make_app())
    with pytest.raises(InvalidPayload, match="Unicode"):
        getattr(tracker, method)("\udcff")


@pytest.mark.parametrize("name", ["task_name", "owner_id", "correlation_id", "error_type"])
def test_a_filter_with_a_lone_surrogate_is_invalid_filter(make_app: AppFactory, name: str) -> None:
    tracker = tracker_of(make_app())
    with pytest.raises(InvalidFilter):
        tracker.jobs(**{name: "x\udcff"})
    with pytest.raises(InvalidFilter):
        tracker.cancel_many(**{name: "x\udcff"})
