"""A task routed by exchange and routing key (no ``queue`` in the route) records the
declared queue bound to them, the queue its message waits in: the reaper judges a backlog,
``stats`` and the metrics count by it."""

from __future__ import annotations

from typing import Any

from kombu import Exchange, Queue

from celery_tracked import Tracker, tracked_task

from .conftest import AppFactory

MEDIA = Exchange("media", type="direct")


def test_a_route_by_exchange_and_routing_key_records_its_declared_queue(
    make_app: AppFactory,
) -> None:
    app = make_app(
        task_queues=[
            Queue("videos", MEDIA, routing_key="media.video"),
            Queue("celery", Exchange("celery"), routing_key="celery"),
        ],
        task_routes={"routing.video": {"exchange": "media", "routing_key": "media.video"}},
    )

    @tracked_task(app=app, name="routing.video", shared=False)
    def video(x: Any) -> Any:
        return x

    @tracked_task(app=app, name="routing.other", shared=False)
    def other(x: Any) -> Any:
        return x

    tracker = Tracker.for_app(app)
    routed = tracker.get_job(video.enqueue(x=1).job_id)
    assert routed is not None and routed.queue_name == "videos"
    given = tracker.get_job(
        other.apply_async(kwargs={"x": 2}, exchange="media", routing_key="media.video").id
    )
    assert given is not None and given.queue_name == "videos"
    plain = tracker.get_job(other.enqueue(x=3).job_id)
    assert plain is not None and plain.queue_name == "celery"
