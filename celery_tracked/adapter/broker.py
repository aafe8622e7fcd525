"""What the broker and its live workers say, for the reaper (the Celery side of its
``BrokerView``: ``CeleryPlatform`` in ``celery_tracker.py`` answers with this).

- :meth:`CeleryBroker.ready`: the messages waiting in a queue, from a passive
  ``queue_declare`` (kombu: the ready count on RabbitMQ, the list length on Redis, the
  visible messages on SQS; a queue the broker does not know holds none).
- :meth:`CeleryBroker.held`: which messages live workers hold (received and waiting for a
  pool slot, scheduled for a countdown/eta, running), asked with Celery's ``query_task``
  remote-control command: one broadcast, answered by every worker that is alive and has
  remote control enabled (Celery's default); plus those of this very process when it is a
  worker (a ``-P solo`` worker cannot answer while it runs the reaper).

And, for the producer, :func:`broker_failure`: whether a failed publish was the broker's
(worth retrying: an ``EnqueueError``) or Celery refusing the call itself (its own error).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from celery import Celery
from celery.exceptions import CeleryError
from kombu.exceptions import LimitExceeded, OperationalError

from ..core.redact import mask_url

logger = logging.getLogger("celery_tracked")

#: How long the reaper waits for live workers to say which messages they hold.
INSPECT_TIMEOUT_S = 2.0


class CeleryBroker:
    """The reaper's view of one app's broker (``reaper.BrokerView``)."""

    def __init__(self, app: Celery, timeout_s: float = INSPECT_TIMEOUT_S) -> None:
        self.app = app
        self.timeout_s = timeout_s

    def ready(self, queue: str) -> int | None:
        try:
            with self.app.connection_for_read() as conn:
                channel: Any = conn.channel()
                try:
                    return int(channel.queue_declare(queue=queue, passive=True).message_count)
                except conn.channel_errors as exc:
                    if _not_found(exc):
                        return 0
                    raise
                finally:
                    _close(channel)
        except Exception as exc:
            logger.warning(
                "reaper: could not count the messages of queue %s: %s", queue, mask_url(str(exc))
            )
            return None

    def held(self, message_ids: Sequence[str]) -> set[str] | None:
        wanted = set(message_ids)
        try:
            replies = self.app.control.inspect(timeout=self.timeout_s).query_task(*message_ids)
        except Exception as exc:
            logger.warning("reaper: could not ask the workers: %s", mask_url(str(exc)))
            return None
        held = {str(task_id) for reply in (replies or {}).values() for task_id in reply or {}}
        return (held | _held_here()) & wanted


def broker_failure(app: Celery, exc: Exception) -> bool:
    """``exc``, raised by Celery's publish, is a failure of the broker or of the way to it:
    kombu's ``OperationalError`` (what Celery makes of a lost connection), a socket's
    ``OSError``, a pool at its limit, or one of the errors the app's transport declares
    (``redis.ConnectionError``...), or its result backend (which Celery subscribes on
    before publishing). Celery's own errors (``QueueNotFound``...) and anything else
    (its ``ValueError`` of a bad time limit, a ``TypeError``...) are the call's own fault:
    retrying it cannot help."""
    if isinstance(exc, CeleryError):  # Celery's own (``QueueNotFound``...): never the broker's
        return False
    if isinstance(exc, OperationalError | OSError | LimitExceeded):
        return True
    try:
        with app.connection_for_write() as conn:  # no I/O: the transport's error classes
            declared = tuple(conn.connection_errors) + tuple(conn.channel_errors)
        backend = app.backend
        declared += tuple(getattr(backend, "connection_errors", ()) or ())
        declared += tuple(getattr(backend, "channel_errors", ()) or ())
    except Exception:  # a transport or backend that cannot even be loaded: not the call's
        return True
    return isinstance(exc, declared)


def _held_here() -> set[str]:
    """The messages this process holds if it is a worker (stale copies in a pool child,
    which only makes the reaper leave more alone)."""
    from celery.worker import state

    return {str(task_id) for task_id in list(state.requests)}


def _not_found(exc: BaseException) -> bool:
    """A passive declare of a queue the broker does not know (AMQP 404; kombu's virtual
    transports say ``NOT_FOUND``: a Redis queue with no message has no key)."""
    return getattr(exc, "code", None) == 404 or "NOT_FOUND" in str(exc)


def _close(channel: Any) -> None:
    try:
        channel.close()
    except Exception as exc:  # a channel a 404 already closed
        logger.debug("reaper: closing a channel: %s", exc)
