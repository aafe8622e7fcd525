"""A tracked task sent around its ``apply_async`` (``app.send_task``, ``celery call``,
``signature.apply_async`` of a name only) is sent untracked: no row, no guard, its
arguments unredacted in the message. Celery's ``before_task_publish`` sees every message
this process publishes; one of a tracked task registered here without the tracked headers
is logged as a WARNING, once per task and process, with the fix (``Tracker.enqueue(name,
...)``, ``celery tracked call``). A process where the task is not registered (or its app
not finalized yet: Celery registers an app's tasks when it is first used) cannot tell it
is tracked: the worker then logs each untracked run (``TrackedTask.__call__``).

Connected when ``celery_tracked`` is imported (``signals.py``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from celery.signals import before_task_publish

from ..core.description import TaskDescription
from ..core.messages import TrackedHeaders
from .celery_state import get_active_apps

logger = logging.getLogger("celery_tracked")


@before_task_publish.connect(weak=False)
def warn_untracked(sender: Any = None, headers: Mapping[str, Any] | None = None, **_: Any) -> None:
    """Log, once per task, a tracked task's message published without tracking."""
    name = str(sender or "")
    untracked = bool(name) and TrackedHeaders.read(headers) is None
    if untracked and any(_tracks(app, name) for app in get_active_apps()):
        _warn(name)


@functools.cache  # once per task and process
def _warn(name: str) -> None:
    logger.warning(
        "celery-tracked: %s is a tracked task, but this message was sent untracked "
        "(app.send_task, `celery call`, or a signature by name): no job row, no idempotency "
        "guard, arguments not redacted. Send it with Tracker.for_app(app).enqueue(%r, ...), "
        "`celery -A <app> tracked call %s --kwargs '{...}'`, or the task's own "
        "delay/apply_async/enqueue (logged once per task and process)",
        name,
        name,
        name,
    )


def _tracks(app: Any, name: str) -> bool:
    """``name`` is a tracked task in ``app``'s registry, read as Celery's own
    ``send_task`` reads it (``app._tasks``): never finalizing the app. An app not finalized
    yet (no task of it used in this process) has registered none: nothing is said."""
    registry = getattr(app, "_tasks", None)
    get = getattr(registry, "get", None)
    task = get(name) if callable(get) else None
    return isinstance(getattr(task, "description", None), TaskDescription)


def warn_run(task_name: str, task_id: str | None) -> None:
    """A worker runs a message of a tracked task sent untracked (each run: this process
    may not be the one that sent it)."""
    logger.warning(
        "%s[%s] was not sent through celery-tracked: untracked run (no row; send it with "
        "its delay/apply_async/enqueue, Tracker.enqueue(name, ...) or `celery tracked "
        "call`, not app.send_task)",
        task_name,
        task_id,
    )
