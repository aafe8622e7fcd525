"""The maintenance tasks celery-tracked adds to a Celery app, and their default Beat entries.

``celery_tracked.relay`` runs the :class:`~celery_tracked.relay.Relay` of the app's
tracker: it publishes pending jobs whose producer died before handing their message to the
broker. It is a shared task (every app of the process knows it, so any worker can run it)
and safe to run from many workers at once.

``celery_tracked.reap`` runs the :class:`~celery_tracked.reaper.Reaper`: it rescues (or
abandons) the stalled jobs nothing will move any more (a whole worker died, the broker
lost messages). Shared too, and safe to run from many workers at once.

``celery_tracked.cleanup`` runs ``Tracker.cleanup``: it removes the ended jobs past
their retention, in batches (``cleanup.py``); also safe to run from many workers at once.

Every app with a tracked task gets a default Beat entry of the same name for each, added
when the app is configured: the relay every ``tracked_relay_interval_seconds``, the
reaper every ``tracked_reaper_interval_seconds``, the cleanup on
``tracked_cleanup_schedule`` (daily at 03:17 by default). None replaces an entry of the
user's with that name; an interval of 0 (``tracked_cleanup_schedule = False``) leaves it
out. Only reassigning ``app.conf.beat_schedule = {...}`` after configuration drops them.

They are built on Celery's own ``Task``, never on the app's ``task_cls``: they are no
tracked jobs themselves, even in an app tracked app-wide (``Celery(task_cls=TrackedTask)``),
and registering them needs no app's task class (importing ``celery_tracked`` while such an
app makes its task class, from the string form ``"celery_tracked:TrackedTask"``, registers
them on that very app).

The maintenance tasks send no worker events (``send_events=False``): run every minute,
they would flood Flower's task list. A producer with ``task_send_sent_event = True`` (Beat
included) still sends their ``task-sent`` event, so Flower then lists them as sent only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Celery, Task, shared_task
from celery.schedules import crontab

from ..core.errors import ConfigurationError
from ..core.jobs import Job
from ..services import resend
from .celery_state import settings_for
from .celery_tracker import CeleryPlatform, Tracker

logger = logging.getLogger("celery_tracked")

RELAY_TASK = "celery_tracked.relay"
REAP_TASK = "celery_tracked.reap"
CLEANUP_TASK = "celery_tracked.cleanup"
_INSTALLED = "_celery_tracked_beat_installed"


@shared_task(name=RELAY_TASK, base=Task, bind=True, ignore_result=True, send_events=False)
def relay(self: Task[Any, Any]) -> dict[str, list[str]]:
    """Publish the pending jobs whose message was never handed to the broker."""
    report = Tracker.for_app(self.app).relay.run(publisher(self.app))
    return {"published": report.published, "cancelled": report.cancelled}


@shared_task(name=REAP_TASK, base=Task, bind=True, ignore_result=True, send_events=False)
def reap(self: Task[Any, Any]) -> dict[str, list[str]]:
    """Rescue (or abandon) the stalled jobs: see ``celery_tracked.reaper``."""
    return Tracker.for_app(self.app).reap().as_dict()


@shared_task(name=CLEANUP_TASK, base=Task, bind=True, ignore_result=True, send_events=False)
def cleanup(self: Task[Any, Any]) -> dict[str, Any]:
    """Remove the ended jobs past their retention (``Tracker.cleanup``); its report."""
    return Tracker.for_app(self.app).cleanup().as_dict()


def publisher(app: Celery) -> Callable[[Job], None]:
    """Sends a job's message from its row: same task id, tracking headers and queue (its
    arguments as stored, the sealed ones opened with ``tracked_secret_key``; the
    rest of a ``countdown``/``eta`` given at enqueue when the row is not due yet)."""
    return resend.publisher(CeleryPlatform(app), Tracker.for_app(app).sealer)


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
    """The default Beat entries the user did not define; a bad setting is said once
    (the worker's start check, or Beat's first use, refuses it)."""
    mine = app.conf.beat_schedule or {}
    missing = [name for name in (RELAY_TASK, REAP_TASK, CLEANUP_TASK) if name not in mine]
    if not missing:
        return
    try:
        settings = settings_for(app)
    except ConfigurationError as exc:  # its reason is said where it is refused
        logger.warning(
            "no default Beat entries for %s: the setting %s is invalid",
            ", ".join(missing),
            exc.setting,
        )
        return
    intervals = {
        RELAY_TASK: settings.relay_interval_seconds,
        REAP_TASK: settings.reaper_interval_seconds,
    }
    for name, interval in intervals.items():
        if name in missing and interval > 0:
            app.add_periodic_task(interval, app.signature(name), name=name, expires=interval)
    if CLEANUP_TASK in missing:
        _add_cleanup_entry(app, settings.cleanup_schedule)


def _add_cleanup_entry(app: Celery, when: object) -> None:
    if when is None:
        return
    options: dict[str, Any] = {}
    schedule: Any = when
    if isinstance(when, float):
        options["expires"] = when  # a run that could not start before the next is dropped
    elif isinstance(when, str):
        schedule = crontab.from_string(when)  # minute hour day-of-month month day-of-week
    app.add_periodic_task(schedule, app.signature(CLEANUP_TASK), name=CLEANUP_TASK, **options)
