"""Which queue a message goes to, for the row's ``queue_name`` (the reaper judges a
backlog by it, ``stats`` and the metrics count by it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def routed_queue(
    app: Any,
    task_name: str,
    options: Mapping[str, Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> str:
    """The queue a Celery ``app`` routes a call of ``task_name`` to (neither the call nor
    the task names one): the call's exchange, else ``task_routes``, else the default queue
    (a task's ``TaskDescription.route``)."""
    route = options if options.get("exchange") else {}
    if not route and app.conf.task_routes:
        route = app.amqp.router.route({}, task_name, args, kwargs)
    queue = declared_queue(route, app.amqp.queues.values())
    return str(getattr(queue, "name", queue or app.conf.task_default_queue))


def declared_queue(route: Mapping[str, Any], queues: Iterable[Any]) -> str | None:
    """The name of the route's queue: its ``queue``, else the one declared queue bound to
    its ``exchange`` with its ``routing_key`` (a direct binding; None when there is no
    such queue, or several)."""
    queue = route.get("queue")
    if queue is not None:
        return str(getattr(queue, "name", queue))
    exchange = route.get("exchange")
    if exchange is None:
        return None
    exchange_name = getattr(exchange, "name", exchange)
    key = route.get("routing_key")
    bound = [
        q.name
        for q in queues
        if getattr(q.exchange, "name", None) == exchange_name
        and (key is None or q.routing_key == key)
    ]
    return str(bound[0]) if len(bound) == 1 else None
