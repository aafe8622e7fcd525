"""The maintenance plugins' Celery side: a shared task and a default Beat entry for each.

One loop over the wiring's list (``celery_tracked.wiring.MAINTENANCE``, the plugins of
``services/maintenance.py``) gives each plugin a shared task ``celery_tracked.<name>``
running one pass of that plugin of the app's tracker (``Tracker.run_maintenance``), and a
default Beat entry of the same name on the plugin's schedule:

- ``celery_tracked.relay``: the relay (``services/relay.py``) publishes pending jobs whose
  producer died before handing their message to the broker; every
  ``tracked_relay_interval_seconds``;
- ``celery_tracked.reap``: the reaper (``services/reaper.py``) rescues (or abandons) the
  stalled jobs nothing will move any more (a whole worker died, the broker lost
  messages); every ``tracked_reaper_interval_seconds``;
- ``celery_tracked.cleanup``: the cleanup (``services/cleanup.py``) removes the ended jobs
  past their retention, in batches; on ``tracked_cleanup_schedule`` (daily at 03:17 by
  default).

Each is a shared task (every app of the process knows it, so any worker can run it) and
safe to run from many workers at once. Every app with a tracked task gets the default Beat
entries, added when the app is configured. None replaces an entry of the user's with that
name; an interval of 0 (``tracked_cleanup_schedule = False``) leaves it out. Only
reassigning ``app.conf.beat_schedule = {...}`` after configuration drops them.

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
from typing import Any

from celery import Celery, Task, shared_task
from celery.schedules import crontab

from ..core.errors import ConfigurationError
from ..services.maintenance import Maintenance
from ..wiring import MAINTENANCE
from .celery_state import settings_for
from .celery_tracker import Tracker

logger = logging.getLogger("celery_tracked")

_INSTALLED = "_celery_tracked_beat_installed"


def task_name(plugin: type[Maintenance]) -> str:
    """The name of ``plugin``'s shared task, and of its default Beat entry."""
    return f"celery_tracked.{plugin.name}"


def _shared_task(plugin: type[Maintenance]) -> Any:
    """Register ``plugin``'s shared task: one pass of the app's plugin, its report."""

    def run(self: Task[Any, Any]) -> dict[str, Any]:
        return Tracker.for_app(self.app).run_maintenance(plugin.name).as_dict()

    run.__name__ = run.__qualname__ = plugin.name
    run.__doc__ = plugin.summary
    return shared_task(
        name=task_name(plugin), base=Task, bind=True, ignore_result=True, send_events=False
    )(run)


#: The shared tasks, by plugin name: one loop.
TASKS = {plugin.name: _shared_task(plugin) for plugin in MAINTENANCE}
RELAY_TASK = "celery_tracked.relay"
REAP_TASK = "celery_tracked.reap"
CLEANUP_TASK = "celery_tracked.cleanup"


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
    missing = [plugin for plugin in MAINTENANCE if task_name(plugin) not in mine]
    if not missing:
        return
    try:
        settings = settings_for(app)
    except ConfigurationError as exc:  # its reason is said where it is refused
        logger.warning(
            "no default Beat entries for %s: the setting %s is invalid",
            ", ".join(task_name(plugin) for plugin in missing),
            exc.setting,
        )
        return
    for plugin in missing:
        _add_entry(app, task_name(plugin), plugin.schedule(settings))


def _add_entry(app: Celery, name: str, when: object) -> None:
    """A Beat entry ``name`` running its task on ``when`` (a plugin's schedule: seconds,
    a crontab string, a Celery schedule; None: no entry)."""
    if when is None:
        return
    options: dict[str, Any] = {}
    schedule: Any = when
    if isinstance(when, (int, float)):
        options["expires"] = when  # a run that could not start before the next is dropped
    elif isinstance(when, str):
        schedule = crontab.from_string(when)  # minute hour day-of-month month day-of-week
    app.add_periodic_task(schedule, app.signature(name), name=name, **options)
