"""A tracked task sent around its ``apply_async`` (``app.send_task``, ``celery call``,
``signature.apply_async`` of a name only) is sent untracked: no row, no guard, its
arguments unredacted in the message. Celery's ``before_task_publish`` sees every message
this process publishes; one of a tracked task known here without the tracked headers is
logged as a WARNING, once per task and process, with the fix (``Tracker.enqueue(name,
...)``, ``celery tracked call``).

Known here: registered in the app (``app._tasks``), or declared on an app not finalized
yet (``celery -A proj call`` never uses the app's tasks, so Celery has not made them):
its ``@app.task`` decorator is still pending (``app._pending``), and its name and task
class are read from the decorator's arguments, without finalizing the app or making the
task (that would run the app's ``on_after_finalize`` handlers, and raise for an app made
with ``autofinalize=False``, in the middle of a publish). A task whose module this
process never imported (``include=``, ``autodiscover_tasks``: the worker imports them,
``celery call`` does not) cannot be known here: the worker then logs each untracked run
(``TrackedTask.__call__``, :func:`warn_run`).

Connected when ``celery_tracked`` is imported (``signals.py``).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from celery.signals import before_task_publish

from ..core.description import TaskDescription
from ..core.messages import TrackedHeaders
from ..core.retry_policy import RetryPolicy
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
    """``name`` is a tracked task of ``app``: in its registry, read as Celery's own
    ``send_task`` reads it (``app._tasks``), or among its pending task decorators (an app
    not finalized yet): never finalizing the app."""
    registry = getattr(app, "_tasks", None)
    get = getattr(registry, "get", None)
    task = get(name) if callable(get) else None
    if isinstance(getattr(task, "description", None), TaskDescription):
        return True
    return any(pending == name and _tracked_class(base) for pending, base in _pending(app))


def _pending(app: Any) -> Iterator[tuple[str, Any]]:
    """The name and task class of each task ``app`` declared that Celery has not made yet
    (its ``PromiseProxy`` in ``app._pending``), read from the decorator's arguments without
    evaluating it; nothing where Celery keeps them otherwise."""
    try:
        proxies = list(getattr(app, "_pending", None) or ())
    except RuntimeError:  # finalized meanwhile, in another thread: the registry has them
        return
    for proxy in proxies:
        try:
            if proxy.__evaluated__():
                continue  # made: in the registry
            fun = object.__getattribute__(proxy, "_Proxy__args")[0]
            options = object.__getattribute__(proxy, "_Proxy__kwargs")
            name = options.get("name") or app.gen_task_name(fun.__name__, fun.__module__)
        except Exception:  # a Celery that keeps them otherwise: nothing known
            continue
        yield str(name), options.get("base") or _class(getattr(app, "task_cls", None))


def _class(task_cls: Any) -> Any:
    """The app's ``task_cls`` (a class, or Celery's ``"module:Class"`` form), only from a
    module already imported: nothing is imported during a publish."""
    if not isinstance(task_cls, str):
        return task_cls
    module, _, attr = task_cls.partition(":") if ":" in task_cls else task_cls.rpartition(".")
    return getattr(sys.modules.get(module), attr, None)


def _tracked_class(base: Any) -> bool:
    """``base`` is ``TrackedTask`` or a subclass (read by the retry policy every one of
    them holds: ``task.py`` imports this module, so it is not imported here)."""
    return isinstance(base, type) and isinstance(getattr(base, "_tracked_retry", None), RetryPolicy)


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
