"""A row's queue from Celery's route: the queue named, or the one declared queue bound to
the route's exchange and routing key."""

from __future__ import annotations

from kombu import Exchange, Queue

from celery_tracked.adapter.routing import declared_queue

MEDIA = Exchange("media", type="direct")
QUEUES = [
    Queue("videos", MEDIA, routing_key="media.video"),
    Queue("images", MEDIA, routing_key="media.image"),
    Queue("celery", Exchange("celery"), routing_key="celery"),
]


def test_a_named_queue_wins() -> None:
    assert declared_queue({"queue": "x"}, QUEUES) == "x"
    assert declared_queue({"queue": Queue("y")}, QUEUES) == "y"


def test_an_exchange_and_routing_key_find_their_declared_queue() -> None:
    route = {"exchange": "media", "routing_key": "media.video"}
    assert declared_queue(route, QUEUES) == "videos"
    assert declared_queue({"exchange": MEDIA, "routing_key": "media.image"}, QUEUES) == "images"


def test_no_queue_or_an_ambiguous_binding_is_none() -> None:
    assert declared_queue({}, QUEUES) is None
    assert declared_queue({"exchange": "media"}, QUEUES) is None  # two queues bound
    assert declared_queue({"exchange": "other", "routing_key": "k"}, QUEUES) is None
