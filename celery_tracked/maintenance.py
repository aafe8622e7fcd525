"""The maintenance tasks celery-tracked adds to a Celery app, and their default Beat entries.

``celery_tracked.relay`` runs the :class:`~celery_tracked.relay.Relay` of the app's
tracker: it publishes pending jobs whose producer died before handing their message to the
broker. It is a shared task (every app of the process knows it, so any worker can run it)
and safe to run from many workers at once.

Every app with a tracked task gets a default Beat entry of the same name, every
``tracked_relay_interval_seconds``, added when the app is configured. It never replaces
an entry of the user's with that name; ``tracked_relay_interval_seconds = 0`` leaves it
out. Only reassigning ``app.conf.beat_schedule = {...}`` after configuration drops it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Celery, Task, shared_task

from .errors import ConfigurationError
from .jobs import Job
from .resend import send_job, stored_arguments
from .settings import Settings
from .tracker import Tracker

logger = logging.getLogger("celery_tracked")

RELAY_TASK = "celery_tracked.relay"
_INSTALLED = "_celery_tracked_beat_installed"


@shared_task(name=RELAY_TASK, bind=True, ignore_result=True)
def relay(self: Task[Any, Any]) -> dict[str, list[str]]:
    """Publish the pending jobs whose message was never handed to the broker."""
    report = Tracker.for_app(self.app).relay.run(publisher(self.app))
    return {"published": report.published, "cancelled": report.cancelled}


def publisher(app: Celery) -> Callable[[Job], None]:
    """Sends a job's message from its row: same task id, tracking headers and queue (its
    arguments as stored; a ``countdown``/``eta`` given at enqueue is not kept)."""

    def publish(job: Job) -> None:
        send_job(app, job, *stored_arguments(job))

    return publish


def install_beat_entries(app: Celery) -> None:
    """Add the default Beat entries to ``app`` once: now if it is configured, else when it
    is (the user's own ``beat_schedule`` is known only then)."""
    if app.__dict__.get(_INSTALLED):
        return
    setattr(app, _INSTALLED, True)
    if getattr(app, "configured", False):  # Celery's own flag (not in its type stubs)
        _add_entries(app)
    else:
        app.on_after_configure.connect(_on_configured, weak=False)


def _on_configured(sender: Celery, **kwargs: Any) -> None:
    _add_entries(sender)


def _add_entries(app: Celery) -> None:
    if RELAY_TASK in (app.conf.beat_schedule or {}):
        return  # the user's own entry wins
    try:
        interval = Settings.for_app(app).relay_interval_seconds
    except ConfigurationError as exc:
        logger.warning("no default Beat entry for %s: %s", RELAY_TASK, exc)
        return
    if interval > 0:
        signature = app.signature(RELAY_TASK)
        app.add_periodic_task(interval, signature, name=RELAY_TASK, expires=interval)
