"""The message priorities the app's broker carries, per queue (``InvalidPriority`` beyond).

- RabbitMQ (``amqp``, ``pyamqp``, ``amqps``): 0-255 (AMQP's byte), or the queue's
  ``x-max-priority`` when the app declares it: the queue's ``queue_arguments`` in
  ``task_queues``, else ``task_queue_max_priority`` (Celery declares its queues with it).
  A priority above a queue's ``x-max-priority`` would be taken as that maximum by RabbitMQ;
  refused here instead, so what the row records is what the broker orders by.
- Redis and kombu's other virtual transports: 0-9 (kombu clamps to it), or the highest of
  ``broker_transport_options["priority_steps"]`` when set. With Redis, a LOWER number
  runs first (0 is the highest priority): docs/operations.md, "Priority".
"""

from __future__ import annotations

from typing import Any

from celery import Celery

#: AMQP's priority is one byte.
AMQP_HIGHEST = 255
#: kombu's virtual transports (Redis...) clamp a priority to 0-9.
VIRTUAL_HIGHEST = 9
_AMQP = ("amqp", "pyamqp", "amqps", "librabbitmq")


def transport_of(app: Celery) -> str:
    """The scheme of the app's broker (``broker_transport``, else its URL's)."""
    conf = app.conf
    if conf.broker_transport:
        return str(conf.broker_transport)
    url: Any = conf.broker_write_url or conf.broker_url or "amqp://"
    if isinstance(url, list | tuple):
        url = url[0] if url else "amqp://"
    return str(url).split("://", 1)[0].split("+", 1)[0].lower()


def highest_priority(app: Celery, queue: str) -> int:
    """The highest priority the broker of ``app`` carries on ``queue`` (module text)."""
    conf = app.conf
    if transport_of(app) in _AMQP:
        for declared in conf.task_queues or ():
            if getattr(declared, "name", None) == queue:
                top = (getattr(declared, "queue_arguments", None) or {}).get("x-max-priority")
                if top is not None:
                    return min(int(top), AMQP_HIGHEST)
        top = conf.task_queue_max_priority
        return AMQP_HIGHEST if top is None else min(int(top), AMQP_HIGHEST)
    steps = (conf.broker_transport_options or {}).get("priority_steps")
    return max(int(s) for s in steps) if steps else VIRTUAL_HIGHEST
